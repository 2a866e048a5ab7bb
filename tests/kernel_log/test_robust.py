"""Bad input never raises; follow() sees appended and rotated lines."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog import looks_like_kernel_log, parse_lines, scan_path
from gpuclinic.sources.kernellog.follow import follow

REAL = [
    "[ 1234.567890] NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the "
    "bus.",
    "[ 12.0] pcieport 0000:00:01.1: AER: Corrected error message received from 0000:01:00.0",
    "[ 12.0] nvidia 0000:01:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, (Receiver ID)",
    "[ 12.0] nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
    "[ 12.0] nvidia 0000:01:00.0:    [ 0] RxErr                  (First)",
    "[ 10.0] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "[ 10.0] NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "Mar  4 10:11:12 host kernel: [ 99.1] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, x",
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress",
    "NVRM: API mismatch: the client has the version 535.104.05, but",
]

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    st.lists(
        st.one_of(
            st.text(max_size=300),
            st.sampled_from(REAL),
            st.sampled_from(REAL).flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n])),
        ),
        max_size=40,
    )
)
def test_random_and_truncated_lines(lines: list[str]) -> None:
    evs = list(parse_lines(lines))
    assert all(isinstance(e, KernelEvent) for e in evs)
    looks_like_kernel_log("\n".join(lines))


@SETTINGS
@given(st.binary(max_size=20000))
def test_binary_garbage_file(tmp_path_factory: object, data: bytes) -> None:
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpuclinic-hyp-{os.getpid()}"
    d.mkdir(exist_ok=True)
    p = d / "garbage.bin"
    p.write_bytes(data + b"\n" + REAL[0].encode() + b"\n" + data)
    evs = scan_path(p)
    assert any(e.xid == 79 for e in evs)
    looks_like_kernel_log(data.decode("utf-8", "replace"))


def test_ten_megabyte_line(tmp_path: Path) -> None:
    big = "A" * (10 << 20)
    line = big + " " + REAL[0] + " " + big
    evs = list(parse_lines([line]))
    assert [e.xid for e in evs] == [79]
    p = tmp_path / "long.log"
    with open(p, "w") as fh:
        fh.write(line + "\n" + REAL[0] + "\n")
    assert [e.xid for e in scan_path(p)] == [79, 79]


def test_hostile_json_record() -> None:
    nested = '{"MESSAGE": ' + "[" * 3000 + "]" * 3000 + ', "x": "NVRM: Xid"}'
    assert (
        list(
            parse_lines([nested, '{"MESSAGE": 5, "NVRM": 1}', '{"MESSAGE": [999999999999, -1], "x": "NVRM"}'])
        )
        == []
    )


def test_ten_megabyte_line_without_newline(tmp_path: Path) -> None:
    p = tmp_path / "nonl.log"
    p.write_bytes(b"\x00\xff" * (5 << 20) + REAL[0].encode())
    assert [e.xid for e in scan_path(p)] == [79]


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    import gzip
    import random

    rnd = random.Random(1)
    noise = "\n".join(f"[ {i}.0] noise {rnd.random()}" for i in range(20000))
    blob = gzip.compress((REAL[0] + "\n" + noise + "\n" + REAL[0] + "\n").encode())
    p = tmp_path / "cut.gz"
    p.write_bytes(blob[: len(blob) // 2])
    assert [e.xid for e in scan_path(p)] == [79]
    p.write_bytes(blob[:5])  # only a gzip header start: read as plain bytes, no exception
    assert scan_path(p) == []


def test_not_a_kernel_log(tmp_path: Path) -> None:
    text = "\n".join(f"2024-03-04 10:11:{i:02d} INFO trainer step={i} loss=0.{i}" for i in range(50))
    assert not looks_like_kernel_log(text)
    assert not looks_like_kernel_log(
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2bbcd8f2-4a2b-9c0e-6b1b-3b5e8c3c3d2e)\n"
    )


def _collect(gen: object, out: list[KernelEvent]) -> None:
    for ev in gen:  # type: ignore[attr-defined]
        out.append(ev)


def _wait_for(out: list[KernelEvent], n: int, timeout: float = 10.0) -> None:
    t0 = time.monotonic()
    while len(out) < n and time.monotonic() - t0 < timeout:
        time.sleep(0.05)


def test_follow_appends_and_rotation(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:01:00): 31, pid=1, name=old, before following\n")
    stop = threading.Event()
    out: list[KernelEvent] = []
    t = threading.Thread(target=_collect, args=(follow([str(log)], stop, from_end=True, poll_s=0.05), out))
    t.start()
    try:
        time.sleep(0.3)
        with open(log, "a") as fh:
            fh.write("[ 2.0] NVRM: Xid (PCI:0000:01:00): 13, pid=2, name=new, Graphics Exception\n")
            fh.flush()
        _wait_for(out, 1)
        assert [e.xid for e in out] == [13]
        # rotate: rename the old file away and start a new one, as logrotate does
        os.rename(log, tmp_path / "kern.log.1")
        log.write_text(
            "[ 3.0] NVRM: Xid (PCI:0000:02:00): 79, pid=3, name=rot, GPU has fallen off the bus.\n"
        )
        _wait_for(out, 2)
        assert [e.xid for e in out] == [13, 79]
        # truncate in place (copytruncate)
        log.write_text("[ 4.0] NVRM: Xid (PCI:0000:03:00): 48, pid=4, name=tr, DBE\n")
        _wait_for(out, 3)
        assert [e.xid for e in out] == [13, 79, 48]
        # an AER record is complete once the log goes quiet
        with open(log, "a") as fh:
            fh.write(
                "[ 5.0] nvidia 0000:01:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, "
                "(Receiver ID)\n[ 5.0] nvidia 0000:01:00.0:    [ 0] RxErr\n"
            )
        _wait_for(out, 4)
        assert out[-1].kind == "aer" and out[-1].detail["bits"] == ["RxErr"]
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()


def test_follow_kmsg_records() -> None:
    """/dev/kmsg format (prio,seq,usec,flags;message plus metadata lines), read from a pipe."""
    from gpuclinic.sources.kernellog.follow import _follow_kmsg

    r, w = os.pipe()
    os.set_blocking(r, False)
    stop = threading.Event()
    out: list[KernelEvent] = []
    t = threading.Thread(target=_collect, args=(_follow_kmsg(r, stop, False, 0.05), out))
    t.start()
    try:
        os.write(
            w,
            b"3,1234,5432100000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p, GPU has fallen off the "
            b"bus.\n"
            b" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n",
        )
        os.write(w, b"6,1235,5432200000,-;eth0: link up\n")
        _wait_for(out, 1)
        assert [(e.xid, e.uptime_s, e.pci_bus_id) for e in out] == [(79, 5432.1, "0000:3b:00.0")]
    finally:
        stop.set()
        t.join(5)
        os.close(w)
        os.close(r)


def test_follow_command_stream(tmp_path: Path) -> None:
    """journalctl -k -f style: lines arrive from a running command."""
    import shutil

    from gpuclinic.sources.kernellog.follow import _follow_command

    script = tmp_path / "fakejournal"
    script.write_text(
        "#!/bin/sh\necho '2024-03-04T10:11:12+0000 node kernel: NVRM: Xid (PCI:0000:3b:00): 48, "
        f"pid=2, name=p, DBE'\nexec {shutil.which('sleep') or '/bin/sleep'} 30\n"
    )
    script.chmod(0o755)
    stop = threading.Event()
    out: list[KernelEvent] = []
    t = threading.Thread(target=_collect, args=(_follow_command([str(script)], stop, 0.05), out))
    t.start()
    try:
        _wait_for(out, 1)
        assert [(e.xid, e.time) for e in out] == [(48, "2024-03-04T10:11:12+00:00")]
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()
