"""The big-input path of the segmenting reader (whole-text literal search, sparse classes) must read a
long mixture exactly as the per-line path does: same segments, readers, unread lines, events, signals
and facts (issue 14: explain on a 19 MB log)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpuclinic import oddbytes
from gpuclinic.explain import explain_text
from gpuclinic.sources import segments
from gpuclinic.sources.evidence import snapshot_from_text

FX = Path(__file__).resolve().parents[1] / "fixtures"
TEXTS = [
    p.read_text(errors="replace")
    for p in sorted((FX / "software" / "errors").glob("*.txt"))
    + sorted((FX / "kernel_log").glob("*.log"))
    + sorted((FX / "evidence" / "issue10").glob("*.txt"))
]
EXTRA = [
    '{"hostname": "n1", "driver_version": "535.104.05"}\n',
    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-2f3a4b5c-1111-2222-3333-444455556666)\n",
    "> [ 12.345678] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n",
    "    \n\n\t\n",
    "user@node1:~$ nvidia-smi\n"
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    main()\n',
    # quoted lines that are blank once unquoted
    ">\n> \n>\u3000\n> [ 13.1] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n",
]


def _log(seed: int, extra: str = "", sep: str = "\n") -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    for step in range(6000):
        if step % 1000 == 500:
            parts.append(EXTRA[step // 1000 % len(EXTRA)])
        elif rng.random() < 0.01:
            parts.append(rng.choice(TEXTS))
        else:
            parts.append(f"[2026-01-05 12:00:{step % 60:02d}] step {step} loss {rng.random():.4f}{extra}\n")
    return "".join(parts).replace("\n", sep)


def _read(text: str) -> dict[str, object]:
    snap = snapshot_from_text(text, "big.log")
    out: dict[str, object] = json.loads(json.dumps(snap.to_dict(), default=str))
    return out


def _same_both_ways(text: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    fast = _read(text)
    with monkeypatch.context() as m:
        m.setattr(segments, "BIG", 10**9)  # every input takes the per-line path
        slow = _read(text)
    assert fast == slow
    return fast


@pytest.mark.parametrize("grep", [True, False])
@pytest.mark.parametrize(
    "seed,extra,sep",
    [(1, "", "\n"), (2, " ✘ ümlaut", "\n"), (3, "", "\r\n"), (4, " K\u212a", "\n"), (5, "", "\n\x0c")],
)
def test_big_path_reads_exactly_as_per_line(
    seed: int, extra: str, sep: str, grep: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not grep:
        monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    text = _log(seed, extra, sep)
    assert len(text.splitlines()) >= segments.BIG
    got = _same_both_ways(text, monkeypatch)
    rec = got["input_records"][0]  # type: ignore[index]
    assert rec["kind"] == "mixed"
    assert {s["kind"] for s in rec["segments"]} >= {"kernel_log", "text", "json", "smi_error", "prompt"}


def test_big_explain_same_as_per_line(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _log(7)
    fast = explain_text(text, "big.log").to_dict()
    with monkeypatch.context() as m:
        m.setattr(segments, "BIG", 10**9)
        slow = explain_text(text, "big.log").to_dict()
    for r in (fast, slow):
        r.pop("generated_at", None)
    assert json.dumps(fast, default=str, sort_keys=True) == json.dumps(slow, default=str, sort_keys=True)
    assert fast["findings"]


def test_classify_all_equals_classify() -> None:
    lines = _log(8, " ✘").splitlines()
    assert segments.classify_all(lines) == [segments.classify(ln) for ln in lines]


def test_line_hits_grep_python_and_brute_force_agree() -> None:
    from gpuclinic import textscan

    text = _log(9, " ✘ İ ümlaut")
    needles = frozenset({"nvrm", "xid", "error", "driver", "\u0130", "uuid: gpu-"})
    data = text.encode()
    want = [
        (k, ln) for k, ln in enumerate(data.split(b"\n")) if any(n.encode() in ln.lower() for n in needles)
    ]
    py = [(k, b) for k, _, b in textscan._python(data, needles)]
    assert py == want and any("\u0130".encode() in b for _, b in want)
    grep = textscan._grep(data, needles)
    if grep is not None:  # grep -F -i under LC_ALL=C: the same lines, offsets and bytes
        assert grep == textscan._python(data, needles)
    hits = textscan.line_hits(text, needles)
    assert hits is not None
    sub = hits.only(["xid", "\u0130"])
    assert [k for k, _, _ in sub.lines] == [
        k for k, ln in want if b"xid" in ln.lower() or "\u0130".encode() in ln
    ]
    assert textscan.line_hits(text, ["nvrm"]) == hits.only(["nvrm"])  # reused for the same text


def _ascii_log(seed: int) -> str:
    return _log(seed).encode("ascii", "replace").decode()  # grep -P alone decides every line


TRICKY = (
    "   \n[  12.345678] NVRM: Xid 79\n"  # a blank line before a kernel line: re's \s* would run on into it
    "  kern  :warn  : [ 5.1] pcieport 0000:00:01.0: AER\n"
    "user@node1:~$ nvidia-smi\n>>> import torch\n"
    '  {"MESSAGE": "x"}  ,\n'
    "__REALTIME_TIMESTAMP=1700000000\n"
    'DCGM_FI_DEV_XID_ERRORS{gpu="0"} 79\n# HELP x y\nfoo 1 2\n'
    "   temp1_input: 45.000\n\tnvidia 0000:3b:00.0: irq\n"
)


@pytest.mark.parametrize("ascii_only", [True, False])
def test_big_log_uses_grep_line_starts(ascii_only: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuclinic import textscan

    odd = "" if ascii_only else "\u00a0[ 1.0] NVRM: x\n\u2713 done\n"  # a few lines grep cannot judge
    text = (_ascii_log(10) if ascii_only else _log(10)) + TRICKY * 3 + odd
    assert textscan.line_starts(text, segments._LINE_START.pattern) is not None
    got = _same_both_ways(text, monkeypatch)
    rec = got["input_records"][0]  # type: ignore[index]
    assert {s["kind"] for s in rec["segments"]} >= {"kernel_log", "text", "json", "smi_error", "prompt"}


@pytest.mark.parametrize(
    "text", [_ascii_log(11), TRICKY, TRICKY.replace("\n", "\n\n") + "no newline at the end"]
)
def test_grep_line_starts_equal_re_on_each_line(text: str) -> None:
    """grep -P of the line-start pattern finds the lines where ``re`` matches it within the line."""
    from gpuclinic import textscan

    got = textscan.line_starts(text, segments._LINE_START.pattern)
    want = [k for k, ln in enumerate(text.split("\n")) if segments._LINE_START.match(ln)]
    assert got == want and want


@pytest.mark.parametrize("odd", ["\u00a0", "\u0663", "\x1f", "\u2003", "\u00e9"])  # re's \s, \d: not PCRE's
def test_grep_line_starts_add_every_line_the_engines_may_read_apart(odd: str) -> None:
    from gpuclinic import textscan

    text = TRICKY + f"{odd}[ 1.0] x\n[{odd}1.0] y\n" + odd * 3 + "\nplain line\n" + _log(12)
    got = textscan.line_starts(text, segments._LINE_START.pattern)
    lines = text.split("\n")
    want = [k for k, ln in enumerate(lines) if segments._LINE_START.match(ln)]
    odd_lines = [k for k, ln in enumerate(lines) if not ln.isascii() or any(c in ln for c in "\x1c\x1f")]
    assert got is not None and set(want) <= set(got) and set(got) - set(want) <= set(odd_lines)


def test_grep_line_starts_leave_a_mostly_non_ascii_text_to_re() -> None:
    from gpuclinic import textscan

    assert textscan.line_starts("训练 step 1 loss 0.5\n" * 5000, segments._LINE_START.pattern) is None


def test_odd_lines_counted_from_known_lines_equal_counted_from_the_start() -> None:
    from gpuclinic import textscan

    text = _log(13) + "\u00a0x\n" + TRICKY + "\x1fy\n"
    hits = textscan.line_hits(text, ["error", "nvrm"])
    assert hits is not None and hits.lines
    data = hits.data
    want = [k for k, ln in enumerate(text.split("\n")) if not ln.isascii() or "\x1f" in ln]
    anchors = [(k, off) for k, off, _ in hits.lines]
    assert oddbytes.odd_lines(data, anchors) == oddbytes.odd_lines(data, []) == want
