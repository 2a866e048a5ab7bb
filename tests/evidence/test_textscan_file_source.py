"""grep reads the log file itself instead of a copy of its bytes (``textscan.remember_file``), and a file
that changed after it was read is scanned from the copy: the lines found are always those of the text
that was read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuclinic import grepinput, textscan
from gpuclinic.explain import read_input
from gpuclinic.sources import segments


def _write(path: Path, n: int = 5000) -> None:
    lines = [f"step {i} loss 0.5" for i in range(n)]
    lines[10] = "NCCL WARN Cuda failure 'out of memory'"
    lines[2500] = "[ 12.3] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    path.write_text("\n".join(lines) + "\n")


def _grep_inputs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files grep was given (the log's path, or an anonymous copy)."""
    seen: list[str] = []
    real = grepinput.input_file

    def spy(data: bytes) -> object:
        f = real(data)
        seen.append(os.readlink(f"/proc/self/fd/{f.fileno()}"))
        return f

    monkeypatch.setattr(textscan, "_input", spy)
    return seen


def test_grep_reads_the_log_file_not_a_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "train.log"
    _write(log)
    seen = _grep_inputs(monkeypatch)
    text, _, _ = read_input(str(log))
    hits = textscan.line_hits(text, ["nccl", "xid"])
    starts = textscan.line_starts(text, segments._LINE_START.pattern)
    assert hits is not None and [k for k, _, _ in hits.lines] == [10, 2500]
    assert starts is not None and 2500 in starts
    assert seen and all(s == str(log) for s in seen)


def test_a_log_that_grew_after_it_was_read_is_scanned_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "train.log"
    _write(log)
    text, _, _ = read_input(str(log))
    with log.open("a") as f:  # the job is still writing: a new fault after our read
        f.write("[ 99.0] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error\n")
    seen = _grep_inputs(monkeypatch)
    hits = textscan.line_hits(text, ["xid"])
    assert hits is not None and [k for k, _, _ in hits.lines] == [2500]  # not line 5000: it was not read
    assert seen and all(s != str(log) for s in seen)  # the changed file was not given to grep


@pytest.mark.parametrize("ahead", [False, True])
def test_a_log_rewritten_while_grep_ran_falls_back_to_the_copy(
    ahead: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "train.log"
    _write(log)
    text, _, _ = read_input(str(log))
    real = grepinput.input_file

    def rewrite_then_open(data: bytes) -> object:
        f = real(data)
        # rewritten in place while grep reads it: the NCCL line moves from line 10 to line 0 (and the
        # mtime changes), so what grep finds there is no longer what was read
        with log.open("r+b") as w:
            w.write(b"NCCL WARN moved here\n")
        return f

    monkeypatch.setattr(textscan, "_input", rewrite_then_open)
    if ahead:  # explain's way: the scan starts before the text is split, and is waited for later
        textscan.start_line_hits(text, ["nccl"])
    hits = textscan.line_hits(text, ["nccl"])
    assert hits is not None and [k for k, _, _ in hits.lines] == [10]
