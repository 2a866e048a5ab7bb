"""Kernel log parsing: every prefix format, every message kind, exact fields."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import pytest

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog import (
    looks_like_kernel_log,
    parse_lines,
    scan_path,
    split_prefix,
)
from gpuclinic.sources.kernellog.collect import merge_sources

XID79 = "NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."


def one(text: str, **kw: object) -> KernelEvent:
    evs = list(parse_lines(text.splitlines(), **kw))  # type: ignore[arg-type]
    assert len(evs) == 1, evs
    return evs[0]


@pytest.mark.parametrize(
    ("line", "time", "uptime"),
    [
        (f"[ 1234.567890] {XID79}", None, 1234.56789),
        (f"[Mon Mar  4 10:11:12 2024] {XID79}", "2024-03-04T10:11:12", None),
        (f"[Mon Mar 14 10:11:12 2024] {XID79}", "2024-03-14T10:11:12", None),
        (f"2024-03-04T10:11:12,123456+01:00 {XID79}", "2024-03-04T10:11:12.123456+01:00", None),
        (f"2024-03-04T10:11:12+0000 gpu-node-7 kernel: {XID79}", "2024-03-04T10:11:12+00:00", None),
        (
            f"2024-03-04T10:11:12.654321+00:00 gpu-node-7 kernel: [ 55.000001] {XID79}",
            "2024-03-04T10:11:12.654321+00:00",
            55.000001,
        ),
        (f"Mon 2024-03-04 10:11:12 UTC gpu-node-7 kernel: {XID79}", "2024-03-04T10:11:12+00:00", None),
        (f"kern  :err   : [  543.200000] {XID79}", None, 543.2),
        (f"kern  :warn  : [Mon Mar  4 10:11:12 2024] {XID79}", "2024-03-04T10:11:12", None),
        (f"<3>[  543.200000] {XID79}", None, 543.2),
        (f"3,1234,543200000,-;{XID79}", None, 543.2),
        (f"[  543.200000 <    0.000123>] {XID79}", None, 543.2),  # dmesg -d
        (f"[  543.200000][ T1234] {XID79}", None, 543.2),  # CONFIG_PRINTK_CALLER
        (f"[  +0.000123] {XID79}", None, None),  # dmesg --time-format delta
        (f"[Mar 4 10:11] {XID79}", None, None),  # dmesg --time-format reltime
        (f"[  543.200000] gpu-node-7 kernel: {XID79}", None, 543.2),  # journalctl -o short-monotonic
        (
            "192.168.11.119: kern: warning: [2026-04-22T21:27:51.291660856Z]: " + XID79,
            "2026-04-22T21:27:51.291660+00:00",
            None,
        ),  # Talos
        (
            '{"__REALTIME_TIMESTAMP":"1709547072123456","_SOURCE_MONOTONIC_TIMESTAMP":"543200000",'
            '"_TRANSPORT":"kernel","_HOSTNAME":"gpu-node-7","MESSAGE":"' + XID79 + '"}',
            "2024-03-04T10:11:12.123456+00:00",
            543.2,
        ),  # journalctl -o json
        (XID79, None, None),
        (
            f"\x1b[32m[  543.200000] \x1b[0m\x1b[33mNVRM\x1b[0m: {XID79[6:]}",
            None,
            543.2,
        ),  # dmesg --color=always
    ],
)
def test_prefix_formats(line: str, time: str | None, uptime: float | None) -> None:
    ev = one(line)
    assert (ev.kind, ev.xid, ev.pci_bus_id, ev.pid, ev.process) == (
        "xid",
        79,
        "0000:c6:00.0",
        1101234,
        "nvc:[driver]",
    )
    assert ev.time == time
    assert ev.uptime_s == uptime


def test_syslog_time_needs_year() -> None:
    line = f"Mar  4 10:11:12 gpu-node-7 kernel: [ 99.100000] {XID79}"
    ev = one(line)
    assert (
        ev.time is None and ev.detail["time_text"] == "Mar  4 10:11:12" and ev.detail["host"] == "gpu-node-7"
    )
    assert one(line, year=2024).time == "2024-03-04T10:11:12"
    # journal short-precise
    ev = one(f"Mar 04 10:11:12.123456 gpu-node-7 kernel: {XID79}", year=2024)
    assert ev.time == "2024-03-04T10:11:12.123456"


def test_xid_variants() -> None:
    ev = one(
        "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on "
        "(GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
    )
    assert (ev.xid, ev.pid, ev.process) == (13, None, None)
    assert ev.detail["text"].startswith("Graphics SM Warp Exception")
    ev = one("NVRM: Xid (0000:03:00): 14, Channel 00000001")
    assert (ev.xid, ev.pci_bus_id, ev.pid) == (14, "0000:03:00.0", None)
    ev = one(
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, "
        "D-RST: No"
    )
    assert (ev.xid, ev.pid, ev.detail["gpu_instance"]) == (94, 7194, "05")
    ev = one(
        "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"
    )
    assert (ev.xid, ev.process, ev.detail["caused_by_xid"]) == (45, "python3", 149)
    ev = one(
        "NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 "
        "0x00000000 0x00000000 0x00000000 0x00000000)"
    )
    assert ev.pci_bus_id == "0008:01:00.0"
    assert (ev.detail["unit"], ev.detail["fatal"], ev.detail["link"]) == ("NETIR_LINK_EVT", True, 1)
    ev = one(
        "NVRM: Xid (PCI:0000:D8:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on "
        "link 14(0x100000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"
    )
    assert (ev.pci_bus_id, ev.xid, ev.detail["link"]) == ("0000:d8:00.0", 74, 14)


def test_fallen_off_bus_multiline_and_single() -> None:
    evs = list(
        parse_lines(
            [
                "[ 10.000000] NVRM: The NVIDIA GPU 0000:b3:00.0",
                "[ 10.000000] NVRM: (PCI ID: 10de:26b5) installed in this system has",
                "[ 10.000000] NVRM: fallen off the bus and is not responding to commands.",
                "[ 11.000000] NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
            ]
        )
    )
    assert [(e.kind, e.pci_bus_id) for e in evs] == [
        ("fallen_off_bus", "0000:b3:00.0"),
        ("fallen_off_bus", "0000:2b:00.0"),
    ]
    assert evs[0].detail["pci_id"] == "10de:26b5"


def test_glued_lines_from_a_bug_report() -> None:
    text = (
        "[ 10.000000] NVRM: GPU at PCI:0000:3b:00: GPU-2bbcd8f2-4a2b-9c0e-6b1b-3b5e8c3c3d2e [ 10.100000] "
        "NVRM: "
        "Xid (PCI:0000:3b:00): 48, pid=77, name=python, An uncorrectable double bit error (DBE) has been "
        "detected "
        "on GPU in the framebuffer at partition 6, subpartition 0. [ 10.200000] NVRM: Xid (PCI:0000:3b:00): "
        "63, "
        "pid=77, name=python, Row Remapper: New row marked for remapping, reset gpu to activate."
    )
    evs = list(parse_lines([text]))
    assert [(e.kind, e.xid) for e in evs] == [("uuid_map", None), ("xid", 48), ("xid", 63)]
    assert evs[0].detail["uuid"] == "GPU-2bbcd8f2-4a2b-9c0e-6b1b-3b5e8c3c3d2e"
    assert evs[2].uptime_s == 10.2


def test_init_gsp_sxid_module() -> None:
    evs = list(
        parse_lines(
            [
                "[ 14.0] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
                "waiting for "
                "RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
                "[ 14.1] NVRM: GPU4 GSP RPC buffer contains function 103 (GSP_RM_ALLOC) and data "
                "0x0000000000002081.",
                "[ 15.0] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)",
                "[ 15.0] NVRM: rm_init_adapter failed for device bearing minor number 0",
                "[ 15.1] nvidia: probe of 0000:01:00.0 failed with error -1",
                "[ 16.0] nvidia-nvswitch3: SXid (PCI:0000:88:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
                "[ 16.0] nvidia-nvswitch3: SXid (PCI:0000:88:00.0): 20034, Severity 1 Engine instance 30 "
                "Sub-engine "
                "instance 00",
                "[ 17.0] NVRM: API mismatch: the client has the version 535.104.05, but",
                "[ 17.0] NVRM: this kernel module has the version 530.30.02.  Please",
                "[ 18.0] nvidia: Unknown symbol drm_gem_object_free (err -2)",
                "[ 19.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC "
                "2023",
            ]
        )
    )
    kinds = [(e.kind, e.pci_bus_id) for e in evs]
    assert kinds == [
        ("xid", "0000:9b:00.0"),
        ("gsp", "0000:9b:00.0"),
        ("init_failed", "0000:01:00.0"),
        ("init_failed", None),
        ("init_failed", "0000:01:00.0"),
        ("sxid", "0000:88:00.0"),
        ("module", None),
        ("module", None),
        ("module", None),
    ]
    assert evs[2].detail["code"] == "0x22:0x56:667"
    assert evs[3].detail["minor"] == 0
    assert evs[4].detail["error"] == -1
    assert evs[5].detail == {
        "sxid": 20034,
        "text": "Fatal, Link 30 LTSSM Fault Up",
        "fatal": True,
        "link": 30,
        "nvswitch": 3,
    }
    assert evs[6].detail["client_version"] == "535.104.05" and evs[6].detail["kernel_version"] == "530.30.02"
    assert evs[7].detail["module"] == "unknown_symbol" and evs[7].detail["symbol"] == "drm_gem_object_free"
    assert evs[8].detail["driver_version"] == "535.104.05"


def test_gsp_timeout_without_xid() -> None:
    ev = one(
        "[ 5.0] NVRM: Timeout after 45s of waiting for RPC response from GPU0 GSP! Expected function 76 "
        "(GSP_RM_CONTROL) (0x20800a4c 0x4)."
    )
    assert ev.kind == "gsp" and ev.detail["gsp"] == "rpc_timeout" and ev.detail["timeout_s"] == 45
    assert ev.detail["gpu_instance"] == 0 and ev.detail["function"] == "76 (GSP_RM_CONTROL)"


def test_aer_modern_kernel() -> None:
    evs = list(
        parse_lines(
            [
                "[ 12.0] pcieport 0000:00:01.1: AER: Corrected error message received from 0000:01:00.0",
                "[ 12.0] nvidia 0000:01:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, "
                "(Receiver ID)",
                "[ 12.0] nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
                "[ 12.0] nvidia 0000:01:00.0:    [ 0] RxErr                  (First)",
                "[ 13.0] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: "
                "0000:00:03.0",
                "[ 13.0] pcieport 0000:00:03.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), "
                "type=Transaction Layer, "
                "(Requester ID)",
                "[ 13.0] pcieport 0000:00:03.0: AER:   device [8086:2f08] error status/mask=00004000/00000000",  # noqa: E501
                "[ 13.0] pcieport 0000:00:03.0: AER:    [14] CmpltTO                (First)",
                "[ 13.5] pcieport 0000:00:03.0: AER: device recovery failed",
            ]
        )
    )
    assert [e.kind for e in evs] == ["aer", "aer", "aer"]
    a, b, c = evs
    assert a.pci_bus_id == "0000:01:00.0"
    assert {
        k: a.detail[k]
        for k in ("severity", "type", "agent", "reporter", "device", "vendor_device", "bits", "nvidia")
    } == {
        "severity": "corrected",
        "type": "Physical Layer",
        "agent": "Receiver ID",
        "reporter": "0000:00:01.1",
        "device": "0000:01:00.0",
        "vendor_device": "10de:2330",
        "bits": ["RxErr"],
        "nvidia": True,
    }
    assert (b.detail["severity"], b.detail["type"], b.detail["bits"], b.detail["multiple"]) == (
        "fatal",
        "Transaction Layer",
        ["CmpltTO"],
        True,
    )
    assert b.detail["nvidia"] is False
    assert c.detail == {"severity": "recovery", "recovery": "failed", "device": "0000:00:03.0"}


def test_aer_old_kernel_and_firmware_first() -> None:
    evs = list(
        parse_lines(
            [
                "[ 1.0] pcieport 0000:00:02.0: AER: Corrected error received: id=0010",
                "[ 1.0] pcieport 0000:00:02.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
                "id=0010(Transmitter ID)",
                "[ 1.0] pcieport 0000:00:02.0:   device [8086:2f04] error status/mask=00001000/00002000",
                "[ 1.0] pcieport 0000:00:02.0:    [12] Timeout               ",
                "[ 2.0] {1}[Hardware Error]: event severity: corrected",
                "[ 2.0] pcieport 0000:00:03.0: aer_status: 0x00000040, aer_mask: 0x00002000",
                "[ 2.0] pcieport 0000:00:03.0:    [ 6] BadTLP                ",
                "[ 2.0] pcieport 0000:00:03.0: aer_layer=Data Link Layer, aer_agent=Receiver ID",
            ]
        )
    )
    assert len(evs) == 2
    assert (
        evs[0].detail["severity"],
        evs[0].detail["type"],
        evs[0].detail["agent"],
        evs[0].detail["bits"],
        evs[0].detail["requester_id"],
    ) == ("corrected", "Data Link Layer", "Transmitter ID", ["Timeout"], "0010")
    assert (
        evs[1].detail["severity"],
        evs[1].detail["type"],
        evs[1].detail["agent"],
        evs[1].detail["bits"],
    ) == ("corrected", "Data Link Layer", "Receiver ID", ["BadTLP"])


def test_pcie_limited() -> None:
    evs = list(
        parse_lines(
            [
                "[ 1.0] pci 0000:01:00.0: [10de:2330] type 00 class 0x030200 PCIe Endpoint",
                "[ 1.1] pci 0000:01:00.0: 63.008 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x8 "
                "link at "
                "0000:00:01.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)",
            ]
        )
    )
    assert len(evs) == 1
    d = evs[0].detail
    assert (d["width"], d["capable_width"], d["speed_gts"], d["limited_at"], d["nvidia"]) == (
        8,
        16,
        8.0,
        "0000:00:01.0",
        True,
    )


def test_reboot_detected_from_uptime() -> None:
    evs = list(parse_lines([f"[ 5000.0] {XID79}", f"[ 3.0] {XID79}"]))
    assert "boot" not in evs[0].detail and evs[1].detail["boot"] == 1


def test_noise_is_ignored() -> None:
    lines = [
        "[ 1.0] eth0: renamed from veth1",
        "[ 2.0] nvidia-nvlink: Nvlink Core is being initialized",
        "[ 3.0] audit: type=1400 AER-free line",
        "[ 4.0] NVRM: nvidia-bug-report.sh hint",
    ]
    assert list(parse_lines(lines)) == []


def test_scan_path_compressed(tmp_path: Path) -> None:
    text = f"[ 1.0] {XID79}\n[ 2.0] eth0: up\n".encode()
    for name, data in (
        ("a.log", text),
        ("b.gz", gzip.compress(text)),
        ("c.xz", lzma.compress(text)),
        ("kern.log.1", gzip.compress(text)),
    ):
        p = tmp_path / name
        p.write_bytes(data)
        evs = scan_path(p)
        assert [(e.kind, e.xid, e.origin) for e in evs] == [("xid", 79, str(p))]


def test_scan_path_equals_parse_lines(tmp_path: Path) -> None:
    """The chunked keyword scan finds exactly what the line parser finds, across chunk boundaries."""
    from gpuclinic.sources import kernellog as kl

    lines = []
    for i in range(3000):
        lines.append(f"[ {i}.000000] systemd[1]: noise line number {i} " + "x" * (i % 50))
        if i % 97 == 0:
            lines.append(
                f"[ {i}.100000] NVRM: Xid (PCI:0000:{i % 256:02x}:00): 31, pid={i}, name=p{i}, MMU Fault"
            )
        if i % 211 == 0:
            lines += [
                f"[ {i}.2] pcieport 0000:00:01.0: AER: Corrected error message received from 0000:01:00.0",
                f"[ {i}.2] nvidia 0000:01:00.0: PCIe Bus Error: severity=Correctable, type=Data Link Layer, "
                "(Transmitter ID)",
                f"[ {i}.2] nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000080/0000e000",
                f"[ {i}.2] nvidia 0000:01:00.0:    [ 7] BadDLLP",
            ]
    p = tmp_path / "big.log"
    p.write_text("\n".join(lines) + "\n")
    expected = [(e.kind, e.xid, e.pid, e.detail.get("bits")) for e in parse_lines(lines)]
    with open(p, "rb") as fh:
        got_lines = list(kl.iter_candidate_lines(fh, chunk_size=4096))
    got = [(e.kind, e.xid, e.pid, e.detail.get("bits")) for e in parse_lines(got_lines)]
    assert got == expected
    assert sum(1 for k in expected if k[0] == "aer") == len(range(0, 3000, 211))
    assert all(k[3] == ["BadDLLP"] for k in expected if k[0] == "aer")


def test_merge_sources_dedupes() -> None:
    dmesg = list(parse_lines([f"[ 1.0] {XID79}", f"[ 2.0] {XID79}"], origin="dmesg"))
    kern = list(
        parse_lines(
            [
                f"Mar  4 10:11:12 h kernel: [ 1.0] {XID79}",
                f"Mar  4 10:11:13 h kernel: [ 2.0] {XID79}",
                f"Mar  4 10:11:14 h kernel: [ 3.0] {XID79}",
            ],
            origin="kern.log",
            year=2024,
        )
    )
    merged = merge_sources([dmesg, kern])
    assert len(merged) == 3 and {e.origin for e in merged} == {"kern.log"}
    assert len(merge_sources([dmesg, dmesg[:1]])) == 2


@pytest.mark.parametrize(
    "text",
    [
        "[    0.000000] Linux version 6.5.0\n[    0.000000] Command line: BOOT_IMAGE=/vmlinuz\n[    0.1] "
        "x86/fpu: ok\n",
        "Mar  4 10:11:12 host kernel: [ 1.0] usb 1-1: new device\nMar  4 10:11:13 host kernel: [ 1.1] a\n"
        "Mar  4 10:11:14 host kernel: [ 1.2] b\n",
        XID79 + "\n",
    ],
)
def test_looks_like_kernel_log_true(text: str) -> None:
    assert looks_like_kernel_log(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello world\n",
        'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\n',
        "==============NVSMI LOG==============\nTimestamp : Mon\nDriver Version : 535.104.05\n",
        "epoch 1 loss 0.5\nepoch 2 loss 0.4\nepoch 3 loss 0.3\n",
    ],
)
def test_looks_like_kernel_log_false(text: str) -> None:
    assert not looks_like_kernel_log(text)


def test_split_prefix_leaves_message() -> None:
    msg, p = split_prefix("kern  :err   : [  543.200000] NVRM: hello")
    assert msg == "NVRM: hello" and p.uptime == 543.2
