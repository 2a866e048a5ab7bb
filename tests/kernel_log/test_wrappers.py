"""Kernel lines inside other wrappers (issue 10): journal export, docker/CRI container logs, redacted bus
ids."""

from __future__ import annotations

import pytest

from gpuclinic.sources.kernellog import is_kernel_line, parse_lines, split_prefix

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "line",
    [
        f"MESSAGE={XID}",
        '{"log":"[ 4254.197860] ' + XID + '\\n","stream":"stdout","time":"2024-03-04T10:11:12.1Z"}',
        f"2024-03-04T10:11:12.123456789Z stdout F [ 4254.197860] {XID}",
        f"[ 4254.197860] {XID}",
        f"kern  :err   : [ 4254.197860] {XID}",
    ],
)
def test_wrapped_xid_lines_parse_with_pid_and_bus(line: str) -> None:
    assert is_kernel_line(line)
    (ev,) = [e for e in parse_lines([line]) if e.kind == "xid"]
    assert (ev.xid, ev.pci_bus_id, ev.pid, ev.process) == (79, "0000:3b:00.0", 1234, "python3")
    assert split_prefix(line)[0].startswith("NVRM: Xid")


@pytest.mark.parametrize("bus", ["PCI:...", "PCI:XXXX:XX:XX", "<redacted>", "PCI:xxxx:xx:xx.x"])
def test_redacted_bus_id_keeps_the_xid(bus: str) -> None:
    (ev,) = list(parse_lines([f"[ 1.0] NVRM: Xid ({bus}): 48, pid=7, name=train, DBE detected"]))
    assert (ev.kind, ev.xid, ev.pci_bus_id, ev.pid, ev.process) == ("xid", 48, None, 7, "train")
    assert ev.detail.get("bus_redacted") is True


@pytest.mark.parametrize(
    ("line", "version"),
    [
        (
            "[    5.3] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 01:41:48 UTC "
            "2025",
            "570.124.06",
        ),
        (
            "[    5.3] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  515.43.04  Release Build",
            "515.43.04",
        ),
        (
            "[    5.3] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  "
            "570.124.06  Wed",
            "570.124.06",
        ),
        (
            "[  463.3] nvidia-modeset: Loading NVIDIA UNIX Open Kernel Mode Setting Driver for x86_64  "
            "515.43.04  Release",
            "515.43.04",
        ),
    ],
)
def test_driver_version_lines(line: str, version: str) -> None:
    (ev,) = list(parse_lines([line]))
    assert ev.kind == "module" and ev.detail["driver_version"] == version


@pytest.mark.parametrize(
    ("line", "time", "host"),
    [
        (f"<3>1 2024-03-04T10:11:12.123456+00:00 gpu-node-7 kernel - - - {XID}",
         "2024-03-04T10:11:12.123456+00:00", "gpu-node-7"),
        (f'<4>1 2024-03-04T10:11:13Z - kernel - - [meta sequenceId="7"] {XID}',
         "2024-03-04T10:11:13+00:00", None),
    ],
)
def test_rfc5424_syslog_lines_keep_their_time_and_host(line: str, time: str, host: str | None) -> None:
    """RFC 5424 (rsyslog/syslog-ng forwarders): the time and host were dropped with the <PRI> only."""
    assert is_kernel_line(line)
    msg, prefix = split_prefix(line)
    assert msg.startswith("NVRM: Xid") and (prefix.time, prefix.host) == (time, host)
    (ev,) = [e for e in parse_lines([line]) if e.kind == "xid"]
    assert (ev.xid, ev.time) == (79, time)
