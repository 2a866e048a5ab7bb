"""The long-text prefilter of knowledge.signatures.match must find exactly what a full scan finds,
with the same line numbers, whether grep is there or not (issue 14: explain on a 19 MB log)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpuclinic.knowledge import signatures as S
from gpuclinic.regex_literal import leading_literal, leading_literals

ERRORS = Path(__file__).resolve().parents[1] / "fixtures" / "software" / "errors"
KERNEL = Path(__file__).resolve().parents[1] / "fixtures" / "kernel_log"


def _long_log(seed: int, non_ascii: bool) -> str:
    rng = random.Random(seed)
    texts = [
        p.read_text(errors="replace") for p in sorted(ERRORS.glob("*.txt")) + sorted(KERNEL.glob("*.log"))
    ]
    parts: list[str] = []
    size = 0
    while size < S.PREFILTER_MIN * 3:
        if rng.random() < 0.05:
            t = rng.choice(texts)
        else:
            t = "".join(
                f"[{rng.randint(0, 99999)}] step {rng.randint(0, 10**6)} loss {rng.random():.4f}"
                + (" 训练 ümlaut" if non_ascii and rng.random() < 0.3 else "")
                + "\n"
                for _ in range(rng.randint(50, 400))
            )
        parts.append(t)
        size += len(t)
    return "".join(parts)


def _full(text: str) -> list[dict[str, object]]:
    return [m.to_dict() for m in S._match(text, text.lower(), 10_000)]


def _reference(text: str) -> dict[str, tuple[int, int, str]]:
    """Signature id -> (first line, number of lines, first line's text) with the table's own patterns
    only: no prefilter, no rewritten "[^\\n]*" patterns."""
    lower = text.lower()
    out: dict[str, tuple[int, int, str]] = {}
    for sig in S.signatures():
        if not any(n in lower for n in sig.needles):
            continue
        starts = sorted(m.start() for rx in sig.patterns for m in rx.finditer(text))
        if starts:
            lines = {text.count("\n", 0, p) + 1 for p in starts}
            first = text.count("\n", 0, starts[0]) + 1
            out[sig.id] = (first, len(lines), text.split("\n")[first - 1].strip()[: S.MAX_LINE])
    return out


@pytest.mark.parametrize("grep", [True, False])
@pytest.mark.parametrize("seed,non_ascii", [(1, False), (2, True), (3, True)])
def test_prefilter_finds_what_a_full_scan_finds(
    grep: bool, seed: int, non_ascii: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not grep:
        monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    text = _long_log(seed, non_ascii)
    assert len(text) >= S.PREFILTER_MIN
    got = [m.to_dict() for m in S.match(text)]
    assert got, "the fixtures hold errors: something must match"
    assert got == _full(text)
    ref = _reference(text)
    for m in got:
        assert (m["line_no"], m["count"], m["matched_line"]) == ref[str(m["id"])], m["id"]
    # the line numbers point at the matched line of the whole text
    lines = text.split("\n")
    for m in got:
        assert str(m["matched_line"])[:60] in lines[int(str(m["line_no"])) - 1], m


def test_a_long_log_without_any_trigger_matches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "step 1 loss 0.5\n" * (S.PREFILTER_MIN // 8)
    assert S.match(text) == []
    monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    assert S.match(text) == []


def test_every_needle_contains_a_trigger() -> None:
    """What the prefilter's correctness rests on."""
    trig = S._triggers()
    for sig in S.signatures():
        for n in sig.needles:
            assert any(t in n for t in trig), (sig.id, n)


@pytest.mark.parametrize("seed,non_ascii,fold", [(4, False, False), (5, True, False), (6, True, True)])
def test_needles_on_the_trigger_lines_answer_as_on_the_whole_text(
    seed: int, non_ascii: bool, fold: bool
) -> None:
    """The shortcut of _match_spans (needles tested on the trigger lines only) against the path it
    replaces (every needle on the candidate text lower-cased): the same needles present, the same
    matches; a text with a character str.lower() turns into ASCII (the Kelvin sign) takes the old path."""
    from gpuclinic import textscan

    text = _long_log(seed, non_ascii)
    if fold:
        text = text.replace("Killed", "\u212aILLED", 1) + "killed by signal 9 \u212a\n"
    found = textscan.line_hits(text, S._triggers())
    assert found is not None
    spans = textscan.line_spans(found.data, [(ln, off) for ln, off, _ in found.lines], S.CONTEXT_LINES)
    sub = b"".join(found.data[s:e] for s, e, _ in spans).decode("utf-8", "surrogateescape")
    hit_lines = [b for _, _, b in found.lines]
    short, lines = S._needle_text(sub, hit_lines)
    assert (short == sub.lower()) is fold
    assert (lines is None) is fold
    if lines is not None:  # a literal holding a trigger is in the trigger lines iff it is in the text
        lits = {
            a
            for sig in S.signatures()
            for lit, alts in zip(S._starts(sig.regexes), S._alt_starts(sig.regexes), strict=True)
            for a in ((lit,) if lit else alts or ())
        }
        held = [a for a in lits if S._holds_trigger(a)]
        assert len(held) > 300 and any(a in sub for a in held)
        assert [a for a in held if (a in sub) != (a in lines)] == []
    assert len(short) < len(sub) or fold
    whole, part = S._needle_test(sub.lower()), S._needle_test(short)
    for sig in S.signatures():
        for n in sig.needles:
            assert whole(n) == part(n), (sig.id, n)
    got = [m.to_dict() for m in S._match_spans(found.data, spans, 10_000, hit_lines)]
    assert got and got == [m.to_dict() for m in S._match_spans(found.data, spans, 10_000)]


def test_the_literal_jump_finds_what_finditer_finds() -> None:
    """``_finditer`` (str.find to each occurrence of the pattern's leading literal, then rx.match there)
    against ``rx.finditer`` for every signature pattern (and its fast form), over every error fixture and
    a long mixed log, plus the cases where a match depends on what precedes it (\\b, lookbehind, ^)."""
    texts = [p.read_text(errors="replace") for p in sorted(ERRORS.glob("*.txt"))] + [_long_log(7, True)]
    texts.append("xNCCL error a\nNCCL error b NCCL error c\n\u2502 CUDA error: x\naKilled\nKilled\n")
    texts.append("Error 802 returned802 code=802x\nToo many open files too many open files\n unexpected EOF\n"
                 "unexpected EOF\nApplyLayer x unexpected EOF\nError pulling image: unexpected EOF\n")
    # a lookbehind or an optional group first: the match starts at what follows, or at the group
    texts.append("xState: Down\n State: Down\nState: Armed\nPortState: Initializing\n"
                 "Reset TDR occurred on GPUID:1\nResetting TDR occurred on GPUID 2 GpuRcReset TDR occurred "
                 "on GPUID 3\nTDR occurred on GPUID 4\nIgnoring visible gpu device (device: 0, name: K80) "
                 "with Cuda compute capability 3.7. The minimum required Cuda capability is 5.0.\n"
                 "with Cuda compute capability 3.5. x\n")
    jumped = 0
    for sig in S.signatures():
        for src, lit in zip(sig.regexes, S._starts(sig.regexes), strict=True):
            # (the literals are the fast form's where there is one, as _occurrences searches it)
            fast, rx = S._fast_pattern(src), S._pattern(src)
            own = leading_literal(src)
            cases = [(fast or rx, lit, S._alt_starts(sig.regexes)[sig.regexes.index(src)])]
            if fast is not None:
                cases.append((rx, own, None if own else leading_literals(src)))
            for pat, start, alts in cases:
                jumped += bool(start or alts)
                for text in texts:
                    want = [(m.span(), m.group()) for m in pat.finditer(text)]
                    got = [(m.span(), m.group()) for m in S._finditer(pat, text, _at(text, start, alts))]
                    assert got == want, (sig.id, src)
    assert jumped > 100
    word = S._pattern(S._literal_first(r"\bKilled\b"))
    assert [m.start() for m in S._finditer(word, "aKilled Killed", _at("aKilled Killed", "Killed"))] == [8]
    behind, text = S._pattern(r"error(?<=r error)"), "r error xerror error"
    starts = [m.start() for m in behind.finditer(text)]
    assert [m.start() for m in S._finditer(behind, text, _at(text, "error"))] == starts == [2, 15]


def _at(text: str, lit: str | None, alts: tuple[str, ...] | None = None) -> dict[str, int]:
    """What ``_occurrences`` hands ``_finditer``: each leading literal's first occurrence."""
    return {a: text.find(a) for a in ((lit,) if lit else alts or ())}


def test_leading_literals_of_patterns_without_one() -> None:
    """The alternatives ``_finditer_any`` jumps between; None wherever a match may start otherwise."""
    assert leading_literals(r"(?:Error|returned|code=) ?802\b") == ("Error", "returned", "code=")
    assert leading_literals(r"[Tt]oo many open files") == ("Too many open files", "too many open files")
    assert leading_literals(r"(?m)^unexpected EOF[ \t]*$") == ("unexpected EOF",)
    assert leading_literals(r"(?<![A-Za-z])State: Down\b") == ("State: Down",)  # zero-width first
    assert leading_literals(r"(?=abc)abcd") == ("abcd",)
    assert leading_literals(r"(?:GpuRcReset |Resetting |Reset )?TDR occurred") == (
        "GpuRcReset ", "Resetting ", "Reset ", "TDR occurred"
    )
    lazy = r"(?:Ignoring (?:visible )?gpu \([^)]*\) )??with Cuda"
    assert leading_literals(lazy) == ("Ignoring ", "with Cuda")
    for p in (r"(?:a|b)?x", r"(?:ab|cd)x|y", r"(?:a.b|cd)x", r"[Tt]?oo", r"(?m)^[*_]*Killed", r"[Tt]\d",
              r"(?:abc|\d+)?xyz", r"(?:abc)?\d+", r"(?<!a)\d+", r"(?:abc)*xyz", r"(?:ab[)]c)?x(", r"(?:abc"):
        assert leading_literals(p) is None, p
    assert sum(a is not None for sig in S.signatures() for a in S._alt_starts(sig.regexes)) >= 5


# the signatures with a pattern no literal leads: each such pattern is a regex scan of every position of the
# candidate text; a new one is a choice to make here (a leading literal, or one pattern per literal, is
# usually possible: the Slurm "down*" rows were a lookbehind tried everywhere, ~60 M instructions on the
# 19 MB bench log, until each state became a pattern led by " down*", " idle*" ...)
_UNLED = {
    "apt.nvidia_unmet_dependencies",
    "torchrun.sigkill",
    "k8s.insufficient_gpu",
    "download.gated_repo",
    "download.server_error",
    "k8s.gpu_operand_failing",
}


def test_patterns_without_a_leading_literal_are_the_listed_ones() -> None:
    unled = {
        sig.id
        for sig in S.signatures()
        for lit, alts in zip(S._starts(sig.regexes), S._alt_starts(sig.regexes), strict=True)
        if not lit and not alts
    }
    assert unled == _UNLED
