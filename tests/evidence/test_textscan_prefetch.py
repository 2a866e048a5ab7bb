"""Scans started ahead (``textscan.start_line_hits`` / ``prefetch_line_starts``, started by explain before
it splits a big text) give exactly the lines a scan started when asked gives, and leave no grep running."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuclinic import grepinput, oddbytes, textscan
from gpuclinic.sources import segments


def _text() -> str:
    lines = [f"step {i} loss 0.5" for i in range(5000)]
    lines[10] = "NCCL WARN Cuda failure 'out of memory'"
    lines[2500] = "[ 12.3] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    lines[4999] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("grep", [True, False])
def test_scans_started_ahead_equal_scans_started_late(grep: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not grep:
        monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    needles = ["nccl", "xid", "cuda error"]
    late_text = _text()
    late = textscan.line_hits(late_text, needles)
    late_starts = textscan.line_starts(late_text, segments._LINE_START.pattern)
    text = _text()  # (another object: nothing of the first scan is reused)
    textscan.prefetch_line_starts(text, segments._LINE_START.pattern)
    textscan.start_line_hits(text, [*needles, "loss 0.5 extra"])
    assert textscan._PENDING[0] is not None or not grep
    early = textscan.line_hits(text, needles)  # a subset of the needles started: filtered from that scan
    assert early is not None and late is not None
    assert early.lines == late.lines and [k for k, _, _ in early.lines] == [10, 2500, 4999]
    assert textscan.start_line_starts(text, segments._LINE_START.pattern).result() == late_starts
    assert textscan._PENDING[0] is None and textscan._STARTS[0] is None


def test_cancel_stops_scans_nobody_asked_for() -> None:
    text = _text()
    textscan.prefetch_line_starts(text, segments._LINE_START.pattern)
    textscan.start_line_hits(text, ["nccl"])
    pending, starts = textscan._PENDING[0], textscan._STARTS[0]
    textscan.cancel_scans()
    assert textscan._PENDING[0] is None and textscan._STARTS[0] is None
    if pending is not None:  # (grep present) the process was stopped and waited for
        assert pending._proc.returncode is not None
    if starts is not None and starts._proc is not None:
        pytest.fail("a cancelled line-start scan still holds its grep")


def test_a_scan_started_for_another_text_is_not_used() -> None:
    other, text = _text(), _text()
    textscan.start_line_hits(other, ["nccl"])
    hits = textscan.line_hits(text, ["nccl"])
    assert hits is not None and [k for k, _, _ in hits.lines] == [10]
    assert textscan._PENDING[0] is None  # the other text's scan was stopped, not left running


def test_read_lines_takes_over_both_scans_started_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _text()
    segments.prefetch(text)
    ahead = textscan._STARTS[0]
    started: list[object] = []
    real = textscan.start_line_starts

    def spy(t: str, pattern: str) -> textscan.PendingLines:
        got = real(t, pattern)
        started.append(got)
        return got

    monkeypatch.setattr(textscan, "start_line_starts", spy)
    from gpuclinic.sources.evidence_text import detect, new_snapshot

    segments.read_lines(
        new_snapshot(), text.splitlines(), "t", detect=detect, apply_rest=lambda *a: None, text=text
    )
    assert ahead is not None and started == [ahead]  # the scan started ahead, not a second grep
    assert textscan._PENDING[0] is None and textscan._STARTS[0] is None


_PIECES = [
    "a",
    "loss 0.5",
    "",
    " ",
    "\n",
    "\n\n",
    "\r\n",
    "\r",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1e",
    "\x1f",
    "\x85",
    "\u2028",
    "\u2029",
    "é",
    "│",
    "训练",
    "\udcff",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=40))
def test_splitlines_equals_str_splitlines(parts: list[str]) -> None:
    text = "".join(parts)
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return
    textscan.remember(text, data)
    assert textscan.splitlines(text) == text.splitlines()
    assert textscan.splitlines(text + "x") == (text + "x").splitlines()  # (bytes not known: str's own)


def _odd_reference(data: bytes) -> list[int] | None:
    odd = data.translate(None, oddbytes.PLAIN)
    if len(odd) > len(data) // 1024 + 64:
        return None
    return [i for i, b in enumerate(data) if bytes((b,)) not in oddbytes.PLAIN]


@pytest.mark.parametrize(
    "where",
    [
        [],
        [0],
        [65535],
        [65536],
        [65535, 65536, 200_000],
        list(range(1000, 1300, 3)),
        list(range(0, 199_999, 700)),
    ],
)
@pytest.mark.parametrize("odd", [b"\xc3", b"\x1c", b"\x1f", b"\xff"])
def test_odd_bytes_found_by_chunk_equal_a_byte_by_byte_pass(where: list[int], odd: bytes) -> None:
    data = bytearray(b"step 1 loss 0.5\n" * 12_500)  # 200 000 bytes: four chunks
    for i in where:
        data[i : i + 1] = odd
    assert oddbytes.odd_bytes(bytes(data)) == _odd_reference(bytes(data))


def test_wait_returns_when_the_process_ends_and_times_out_like_popen_wait() -> None:
    import subprocess
    import sys
    import time

    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    t0 = time.monotonic()
    assert grepinput.wait(quick, 30) == 0
    assert time.monotonic() - t0 < 10
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            grepinput.wait(slow, 0.2)
    finally:
        slow.kill()
        slow.wait()
