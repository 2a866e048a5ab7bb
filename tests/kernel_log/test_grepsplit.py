"""Two greps taking turns over the stripes of a big log give exactly one grep's (and the memmem scan's) lines
and events."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.sources.kernellog import grepscan, grepsplit, scan_path
from gpuclinic.sources.kernellog.grepscan import iter_grep_candidates
from gpuclinic.sources.kernellog.scan import _open_binary, iter_candidate_lines

GREP = shutil.which("grep")
pytestmark = pytest.mark.skipif(GREP is None or not hasattr(os, "splice"), reason="grep or os.splice missing")

NOISE = "Mar  4 10:11:12 gpu-node-7 systemd[1]: Started Session 7 of User ubuntu."
AER = [
    "Mar  4 10:11:13 gpu-node-7 kernel: [ 100.2] pcieport 0000:00:01.1: AER: Corrected error message "
    "received from 0000:3b:00.0",
    "Mar  4 10:11:13 gpu-node-7 kernel: [ 100.3] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Correctable, "
    "type=Physical Layer, (Receiver ID)",
    "Mar  4 10:11:13 gpu-node-7 kernel: [ 100.4] nvidia 0000:3b:00.0:   device [10de:2330] error "
    "status/mask=00000001/0000e000",
    "Mar  4 10:11:13 gpu-node-7 kernel: [ 100.5] nvidia 0000:3b:00.0:    [ 0] RxErr                  (First)",
]
XID = (
    "Mar  4 10:11:14 gpu-node-7 kernel: [ 101.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, "
    "GPU has fallen off the bus."
)


def _straddling_log(tmp: Path) -> tuple[Path, int, int]:
    """Xid and AER records all through the file, one AER record across the middle: (path, its start, end)."""
    half = [NOISE] * 400 + [XID] + [NOISE] * 300 + AER + [NOISE] * 300
    lines = half + [NOISE] * 3 + AER + [NOISE] * 3 + half[::-1]
    p = tmp / "kern.log"
    p.write_text("\n".join(lines) + "\n")
    start = len(("\n".join([*half, *[NOISE] * 3]) + "\n").encode())
    return p, start, start + len("\n".join(AER).encode())


def _memmem(path: Path) -> list[str]:
    with _open_binary(str(path)) as fh:
        return list(iter_candidate_lines(fh))


def _events(path: Path) -> list[dict[str, Any]]:
    return [dataclasses.asdict(e) for e in scan_path(path)]


@pytest.fixture
def split_on(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Split every file (these are small) and count the splits that really ran."""
    ran: list[int] = []
    real: Callable[..., Any] = grepsplit.start

    def spy(path: str, argv: list[str], size: int) -> Any:
        out = real(path, argv, size)
        if out is not None:
            ran.append(size)
        return out

    monkeypatch.setattr(grepsplit, "usable", lambda size: True)
    monkeypatch.setattr(grepsplit, "start", spy)
    return ran


def _scan_both_ways(p: Path, monkeypatch: pytest.MonkeyPatch, split_on: list[int]) -> list[str]:
    """The split scan's candidate lines; asserts they, and its events, equal the memmem scan's."""
    assert GREP is not None
    got = list(iter_grep_candidates(str(p), GREP))
    assert split_on == [p.stat().st_size]
    assert got == _memmem(p)
    with_split = _events(p)
    monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    assert with_split == _events(p)
    monkeypatch.delenv("GPUCLINIC_NO_GREP")
    return got


@pytest.mark.parametrize("stripe", [1000, 333, 97, 1])
def test_stripes_give_the_lines_and_events_of_one_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split_on: list[int], stripe: int
) -> None:
    """Stripes about an AER record's size down to one line each: a record's lines come from both greps."""
    monkeypatch.setattr(grepsplit, "STRIPE_BYTES", stripe)
    p, start, end = _straddling_log(tmp_path)
    with open(p, "rb") as fh:
        ranges = grepsplit.stripes(fh.fileno(), p.stat().st_size)
    assert len(ranges) > 4 and ranges[0][0] == 0 and ranges[-1][1] == p.stat().st_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # no gap, no overlap
    data = p.read_bytes()
    assert all(data[lo - 1 : lo] == b"\n" for lo, _ in ranges[1:])  # every stripe starts a line
    assert any(start < lo < end for lo, _ in ranges)  # a cut falls inside the middle AER record
    got = _scan_both_ways(p, monkeypatch, split_on)
    assert sum("RxErr" in ln for ln in got) == 3
    events = _events(p)
    aers = [e for e in events if e["kind"] == "aer" and e["detail"].get("bits") == ["RxErr"]]
    assert aers and len([e for e in events if e["kind"] == "xid"]) == 2


@pytest.mark.parametrize("ending", ["", "\n"])
def test_crlf_lines_and_a_last_line_without_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split_on: list[int], ending: str
) -> None:
    monkeypatch.setattr(grepsplit, "STRIPE_BYTES", 700)
    lines = ([NOISE] * 20 + AER + [NOISE] * 5 + [XID]) * 6
    p = tmp_path / "kern.log"
    p.write_bytes(("\r\n".join(lines) + ending).encode())
    got = _scan_both_ways(p, monkeypatch, split_on)
    assert got[-1] == XID and sum("NVRM" in ln for ln in got) == 6 and not any("\r" in ln for ln in got)


def test_a_file_within_one_stripe_is_not_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p, _, _ = _straddling_log(tmp_path)
    with open(p, "rb") as fh:
        assert grepsplit.stripes(fh.fileno(), p.stat().st_size, 1 << 30) == [(0, p.stat().st_size)]
    assert grepsplit.start(str(p), [str(GREP), "-a", "-b", "-e", "NVRM"], p.stat().st_size) is None


def test_a_line_longer_than_the_newline_search_lengthens_its_stripe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grepsplit, "_NEWLINE_SEARCH", 500)
    p = tmp_path / "kern.log"
    p.write_text(NOISE + "\n" + "x" * 3000 + "\n" + NOISE + "\n" + NOISE + "\n")
    with open(p, "rb") as fh:
        ranges = grepsplit.stripes(fh.fileno(), p.stat().st_size, 100)
    long_end = len(NOISE) + 1 + 3001
    assert all(not (len(NOISE) + 1 < lo < long_end) for lo, _ in ranges)  # no cut inside the long line
    assert ranges[0][0] == 0 and ranges[-1][1] == p.stat().st_size


def test_a_failed_feed_falls_back_to_the_memmem_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split_on: list[int]
) -> None:
    monkeypatch.setattr(grepsplit, "STRIPE_BYTES", 4096)
    p, _, _ = _straddling_log(tmp_path)

    def broken(*args: object, **kwargs: object) -> int:
        raise OSError("splice refused")

    monkeypatch.setattr(os, "splice", broken)
    assert GREP is not None
    with pytest.raises(grepscan.GrepFallback, match="splice refused"):
        list(iter_grep_candidates(str(p), GREP))
    got = _events(p)  # no stripe is missed: the scan starts over without grep
    monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    assert got == _events(p) and len([e for e in got if e["kind"] == "xid"]) == 2


def test_only_big_files_on_several_cores_are_split() -> None:
    assert not grepsplit.usable(grepsplit.SPLIT_MIN_BYTES - 1)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert grepsplit.usable(grepsplit.SPLIT_MIN_BYTES) == (cores > 1)


def test_a_scan_stopped_early_reaps_both_greps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split_on: list[int]
) -> None:
    spawned: list[grepscan._Spawned] = []
    real = grepscan._Spawned.__init__

    def spy(self: grepscan._Spawned, argv: list[str], stdin_fd: int | None = None) -> None:
        real(self, argv, stdin_fd)
        spawned.append(self)

    monkeypatch.setattr(grepscan._Spawned, "__init__", spy)
    monkeypatch.setattr(grepsplit, "STRIPE_BYTES", 4096)
    p, _, _ = _straddling_log(tmp_path)
    assert GREP is not None
    it = iter_grep_candidates(str(p), GREP)
    assert "Xid" in next(it)
    it.close()  # the caller gave up after one line
    assert len(spawned) == 2 and all(s.returncode is not None for s in spawned)
    assert all(s.stdout.closed for s in spawned)


def test_a_grep_that_cannot_start_leaves_nothing_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split_on: list[int]
) -> None:
    """The second grep fails to start: the first is reaped, no pipe is left open, and the scan (which then
    finds no grep on PATH) gives the memmem scan's events."""
    monkeypatch.setattr(grepsplit, "STRIPE_BYTES", 4096)
    p, _, _ = _straddling_log(tmp_path)
    spawned: list[grepscan._Spawned] = []
    real = grepscan._Spawned.__init__

    def second_fails(self: grepscan._Spawned, argv: list[str], stdin_fd: int | None = None) -> None:
        if spawned:
            raise grepscan.GrepFallback("no second grep")
        real(self, argv, stdin_fd)
        spawned.append(self)

    monkeypatch.setattr(grepscan._Spawned, "__init__", second_fails)
    fds = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()
    assert GREP is not None
    with pytest.raises(grepscan.GrepFallback, match="no second grep"):
        list(iter_grep_candidates(str(p), GREP))
    assert len(spawned) == 1 and spawned[0].returncode is not None and spawned[0].stdout.closed
    if fds:
        assert set(os.listdir("/proc/self/fd")) <= fds
    monkeypatch.setenv("PATH", str(tmp_path))  # no grep at all: the memmem scan
    assert grepscan.grep_binary() is None
    got = _events(p)
    monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    assert got == _events(p) and len([e for e in got if e["kind"] == "xid"]) == 2
