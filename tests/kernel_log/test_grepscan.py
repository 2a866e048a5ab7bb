"""The grep prefilter gives exactly what the memmem scan gives; big logs still meet every signature."""

from __future__ import annotations

import dataclasses
import gzip
import random
import shutil
from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.room import event_classes
from gpuclinic.sources import evidence
from gpuclinic.sources.evidence import load_evidence
from gpuclinic.sources.kernellog import grepscan, scan_path
from gpuclinic.sources.kernellog.grepscan import iter_grep_candidates, iter_keyword_lines
from gpuclinic.sources.kernellog.scan import _open_binary, iter_candidate_lines

FX = Path(__file__).resolve().parents[1] / "fixtures"
GREP = shutil.which("grep")
needs_grep = pytest.mark.skipif(GREP is None, reason="grep not installed")


def _memmem(path: Path) -> list[str]:
    with _open_binary(str(path)) as fh:
        return list(iter_candidate_lines(fh))


def _events(path: Path) -> list[dict[str, object]]:
    return [dataclasses.asdict(e) for e in scan_path(path)]


def _plain_fixtures() -> list[Path]:
    return sorted(
        p for p in FX.rglob("*") if p.is_file() and grepscan.is_plain(str(p)) and p.stat().st_size < 8 << 20
    )


NOISE = [
    "systemd[1]: Started Session 7 of User ubuntu.",
    "sshd[88]: Accepted publickey for ubuntu",
    "kernel: [  12.5] PCIe bandwidth is fine here",
    "kernel: [  12.6] e1000e: AERial view of nothing",
]
SIGNAL = [
    "kernel: [ 100.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.",
    "kernel: [ 100.2] pcieport 0000:00:01.1: AER: Corrected error message received from 0000:3b:00.0",
    "kernel: [ 100.3] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, "
    "(Receiver ID)",
    "kernel: [ 100.4] nvidia 0000:3b:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
    "kernel: [ 100.5] nvidia 0000:3b:00.0:    [ 0] RxErr                  (First)",
    "kernel: [ 100.6] pci 0000:3b:00.0: 63.012 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x8 "
    "link at "
    "0000:00:01.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)",
    "kernel: [ 100.7] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress",
]


def _generated(tmp: Path, lines: int = 20_000, *, crlf: bool = False, tail_newline: bool = True) -> Path:
    rnd = random.Random(7)
    out: list[str] = []
    for _ in range(lines):
        if rnd.random() < 0.02:
            k = rnd.randrange(len(SIGNAL))
            out.extend(SIGNAL[k : k + rnd.randrange(1, 5)])
        else:
            out.append(rnd.choice(NOISE))
    nl = "\r\n" if crlf else "\n"
    p = tmp / f"gen{'-crlf' if crlf else ''}{'' if tail_newline else '-cut'}.log"
    p.write_text(nl.join(out) + (nl if tail_newline else ""))
    return p


@needs_grep
def test_grep_candidates_equal_memmem_on_every_fixture() -> None:
    assert GREP is not None
    files = _plain_fixtures()
    assert len(files) > 100
    for p in files:
        try:
            got = list(iter_grep_candidates(str(p), GREP))
        except grepscan.GrepFallback:
            continue  # scan_path then uses the memmem scan itself
        assert got == _memmem(p), p


@needs_grep
@pytest.mark.parametrize(("crlf", "tail"), [(False, True), (True, True), (False, False)])
def test_grep_and_memmem_give_the_same_events_on_a_generated_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crlf: bool, tail: bool
) -> None:
    p = _generated(tmp_path, crlf=crlf, tail_newline=tail)
    assert GREP is not None
    assert list(iter_grep_candidates(str(p), GREP)) == _memmem(p)
    with_grep = _events(p)
    monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    without = _events(p)
    assert with_grep == without
    kinds = {e["kind"] for e in with_grep}
    assert {"xid", "aer", "pcie_limited", "sxid"} <= kinds, kinds


@needs_grep
def test_overlong_line_falls_back_to_the_windowed_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "long.log"
    p.write_text(
        "x" * 9000 + " NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, fallen off\n" + SIGNAL[0] + "\n"
    )
    assert GREP is not None
    with pytest.raises(grepscan.GrepFallback):
        list(iter_grep_candidates(str(p), GREP))
    got = _events(p)
    monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    assert got == _events(p) and len([e for e in got if e["kind"] == "xid"]) == 2


def test_no_grep_on_path_uses_memmem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _generated(tmp_path, 3000)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert grepscan.grep_binary() is None
    assert any(e["kind"] == "xid" for e in _events(p))


# ---- logs too big to segment still meet every signature


SIGS = load_data("evidence_signatures.json")["signatures"]
ERROR_LINES = [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
    "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600325 milliseconds before timing out.",
    "Out of memory: Killed process 4242 (python3) total-vm:123456kB, anon-rss:1234kB",
]


def _planted(tmp: Path, name: str = "big.log") -> Path:
    lines = [f"[ {i}.000000] systemd[1]: Started Session {i} of User ubuntu." for i in range(2000)]
    for k, sig in enumerate(SIGS):
        lines.insert(50 + 37 * k, str(sig["example"]))
    for k, ln in enumerate(ERROR_LINES):
        lines.insert(1500 + 11 * k, f"[ {k}.5] {ln}" if k == 2 else ln)
    lines.insert(10, SIGNAL[0])
    p = tmp / name
    p.write_text("\n".join(lines) + "\n")
    return p


def _codes(paths: list[str]) -> tuple[set[str], object]:
    snap = load_evidence(paths)
    return {f.code for f in diagnose(snap).findings}, snap


@pytest.mark.parametrize("grep", [True, False])
@pytest.mark.parametrize("gz", [False, True])
def test_streamed_log_finds_every_signature_like_the_segmented_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grep: bool, gz: bool
) -> None:
    p = _planted(tmp_path)
    if gz:
        g = tmp_path / "big.log.gz"
        g.write_bytes(gzip.compress(p.read_bytes()))
        p = g
    if not grep:
        monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    segmented, _ = _codes([str(p)])
    monkeypatch.setattr(evidence, "SEGMENT_LIMIT", 1024)
    streamed, snap = _codes([str(p)])
    assert snap.input_records[0].streamed  # type: ignore[attr-defined]
    want = {
        f"xid.{s['example_xid']}" if "example_xid" in s else s.get("example_code") or s["code"] for s in SIGS
    }
    want |= {"error.cuda.illegal_address", "error.nccl.watchdog_timeout", "error.host.oom_killer"}
    # an event class another planted event explains gives way to it (a machine check decoded as an EDAC line)
    want -= {
        f"room.sel.{ec.kind}"
        for ec in event_classes()
        if any(f"room.sel.{k}" in want for k in ec.explained_by)
    }
    assert want <= streamed, want - streamed
    assert streamed == segmented, streamed ^ segmented
    xid79 = [e for e in snap.kernel_events if e.xid == 79]  # type: ignore[attr-defined]
    assert len(xid79) == 1  # the kernel scan and the Xid safety net do not both count it
    lines = {s.lineno for s in snap.signals if s.code == "driver.fabric_manager_missing"}  # type: ignore[attr-defined]
    assert lines and all(isinstance(n, int) and n > 0 for n in lines)


@pytest.mark.parametrize("grep", [True, False])
def test_keyword_lines_are_numbered_and_case_insensitive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grep: bool
) -> None:
    if not grep:
        monkeypatch.setenv("GPUCLINIC_NO_GREP", "1")
    p = tmp_path / "k.log"
    p.write_text("a\nFailed to initialize NVML: Unknown Error\nb\nnothing\nCUDA ERROR: boom and cuda error\n")
    assert list(iter_keyword_lines(str(p), ["failed to initialize nvml", "cuda error"])) == [
        (2, "Failed to initialize NVML: Unknown Error"),
        (5, "CUDA ERROR: boom and cuda error"),
    ]


@needs_grep
def test_keywords_reach_grep_as_literals(tmp_path: Path) -> None:
    import subprocess

    word = "a.b[c](d)*+?{1}|^$\\x"
    p = tmp_path / "w.txt"
    p.write_text(f"zz {word} zz\naxb[c](d)*+?{{1}}|^$\\x\nnothing\n")
    assert GREP is not None
    out = subprocess.run(
        [GREP, "-a", "-n", "-E", "-e", grepscan._ere_literal(word), str(p)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert out.splitlines() == [f"1:zz {word} zz"]


def test_keyword_lines_from_a_compressed_log_and_a_grep_that_fails_half_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "".join(f"line {i}\n" if i % 3 else f"{i}: CUDA error: boom\n" for i in range(30))
    want = [(i + 1, f"{i}: CUDA error: boom") for i in range(0, 30, 3)]
    gz = tmp_path / "k.log.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    if GREP is not None:
        assert list(iter_keyword_lines(str(gz), ["cuda error"])) == want  # decompressed into grep's stdin
    # a "grep" that prints two right lines, then fails: the Python scan goes on from the third, no repeats
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "grep"
    fake.write_text("#!/bin/sh\nprintf '1:0: CUDA error: boom\\n4:3: CUDA error: boom\\n'\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    plain = tmp_path / "k.log"
    plain.write_text(text)
    assert list(iter_keyword_lines(str(plain), ["cuda error"])) == want
