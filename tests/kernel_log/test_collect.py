"""Live collection: which sources are read, precise reasons when they cannot be, de-duplication."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

import gpuclinic.sources.kernellog.collect as kernel_log
from gpuclinic.collect import CollectOptions
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.kernellog.scan import scan_path

CAT = shutil.which("cat") or "/bin/cat"
SLEEP = shutil.which("sleep") or "/bin/sleep"
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def fake_tool(bindir: Path, name: str, stdout: str, stderr: str = "", rc: int = 0) -> None:
    out = bindir / f"{name}.out"
    err = bindir / f"{name}.err"
    out.write_text(stdout)
    err.write_text(stderr)
    script = bindir / name
    script.write_text(f"#!/bin/sh\n{CAT} '{out}'\n{CAT} '{err}' >&2\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setattr(kernel_log, "SYSLOG_FILES", (str(tmp_path / "kern.log"), str(tmp_path / "syslog"),
                                                     str(tmp_path / "messages")))
    return tmp_path


def test_dmesg_restricted_and_no_journal(env: Path) -> None:
    fake_tool(env / "bin", "dmesg", "", "dmesg: read kernel buffer failed: Operation not permitted", 1)
    snap = Snapshot()
    kernel_log.collect(snap, CollectOptions())
    assert snap.kernel_log_read is False and snap.kernel_events == []
    whys = {s.what: s.why for s in snap.skipped}
    assert whys["kernel log via dmesg"].startswith("dmesg is restricted (kernel.dmesg_restrict=1)")
    assert "Operation not permitted" in whys["kernel log via dmesg"]
    assert whys["kernel log via journalctl -k -b"] == "journalctl is not installed"
    assert "--kernel-log FILE" in whys["the kernel log (Xid, AER, fallen-off-bus messages)"]


def test_journal_without_permission_is_not_a_read(env: Path) -> None:
    fake_tool(env / "bin", "journalctl", "-- No entries --\n",
              "Hint: You are currently not seeing messages from other users and the system.\n")
    snap = Snapshot()
    kernel_log.collect(snap, CollectOptions())
    assert snap.kernel_log_read is False
    assert "systemd-journal" in {s.what: s.why for s in snap.skipped}["kernel log via journalctl -k -b"]


def test_sources_merge_without_double_counting(env: Path) -> None:
    fake_tool(env / "bin", "dmesg", f"2024-03-04T10:11:12,000000+00:00 {XID}\n")
    fake_tool(env / "bin", "journalctl", f"2024-03-04T10:11:12+0000 node kernel: {XID}\n")
    (env / "kern.log").write_text(
        f"Mar  3 09:00:00 node kernel: [ 5.0] {XID}\nMar  4 10:11:12 node kernel: [ 9.0] {XID}\n")
    (env / "syslog").write_text(f"Mar  4 10:11:12 node kernel: [ 9.0] {XID}\n")
    os.chmod(env / "syslog", 0o000)
    extra = env / "saved.log"
    extra.write_text("[ 1.0] NVRM: Xid (PCI:0000:5e:00): 48, pid=2, name=p, DBE\n")
    snap = Snapshot()
    kernel_log.collect(snap, CollectOptions(kernel_logs=[str(extra), str(env / "missing.log")]))
    assert snap.kernel_log_read is True
    assert snap.kernel_log_sources[:2] == ["journalctl -k -b", "dmesg"]
    assert str(env / "kern.log") in snap.kernel_log_sources and str(extra) in snap.kernel_log_sources
    xid79 = [e for e in snap.kernel_events if e.xid == 79]
    assert len(xid79) == 2 and {e.origin for e in xid79} == {
        str(env / "kern.log")
    }  # kern.log has the history
    assert [e.xid for e in snap.kernel_events if e.xid == 48] == [48]
    whys = {s.what: s.why for s in snap.skipped}
    assert whys[f"kernel log {env / 'missing.log'}"] == f"{env / 'missing.log'} does not exist"
    if os.geteuid() != 0:  # root reads anything
        assert "permission denied" in whys[f"kernel log via {env / 'syslog'}"]


def test_command_timeout_keeps_what_was_read(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = env / "bin" / "journalctl"
    script.write_text(f"#!/bin/sh\necho '[ 1.0] {XID}'\nexec {SLEEP} 30\n")
    script.chmod(0o755)
    res = kernel_log._run_stream(["journalctl", "-k"], "journalctl -k", timeout_s=0.5)
    assert res.ok and [e.xid for e in res.events] == [79]
    assert res.why and "did not finish within" in res.why


def test_scan_path_tail_bytes(tmp_path: Path) -> None:
    p = tmp_path / "big.log"
    with open(p, "w") as fh:
        fh.write(f"[ 1.0] {XID}\n")
        fh.write("[ 2.0] noise line that pads the file\n" * 50000)
        fh.write("[ 3.0] NVRM: Xid (PCI:0000:5e:00): 48, pid=2, name=p, DBE\n")
    assert [e.xid for e in scan_path(p)] == [79, 48]
    assert [e.xid for e in scan_path(p, tail_bytes=4096)] == [48]
