"""Findings from kernel log events: codes, severities, GPU mapping, context rules."""

from __future__ import annotations

from gpuclinic.checks import run_checks
from gpuclinic.facts.gpu import GpuFacts, PciDevice
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.runbooks import first_step, get, render_text
from gpuclinic.knowledge.xid import all_xids, lookup
from gpuclinic.model import Family, Finding, Severity
from gpuclinic.sources.kernellog import parse_lines

KCHECKS = ["xid", "kernel.fallen_off_bus", "kernel.init_failed", "kernel.gsp", "kernel.nvlink", "kernel.aer",
           "kernel.pcie_limited", "kernel.module"]


def snap_of(lines: list[str], gpus: list[GpuFacts] | None = None, **kw: object) -> Snapshot:
    s = Snapshot(origin="evidence", gpus=gpus or [], **kw)  # type: ignore[arg-type]
    s.kernel_events = list(parse_lines(lines, origin="test.log"))
    s.kernel_log_read = True
    return s


def findings(s: Snapshot) -> list[Finding]:
    fs, skipped = run_checks(s, only=KCHECKS)
    assert not [k for k in skipped if "failed" in k.why], skipped
    return fs


def by_code(fs: list[Finding], code: str) -> list[Finding]:
    return [f for f in fs if f.code == code]


def test_catalog_covers_all_173() -> None:
    xs = all_xids()
    assert [x.xid for x in xs] == list(range(1, 174))
    assert all(x.source and x.description and x.category for x in xs)
    x79 = lookup(79)
    assert x79 is not None and x79.severity == Severity.CRITICAL and x79.family == Family.PCIE_POWER
    assert x79.immediate_action == "RESTART_BM" and "reboot" in (x79.immediate_step or "")
    assert lookup(13).severity == Severity.WARNING and lookup(13).family == Family.SOFTWARE  # type: ignore[union-attr]
    assert lookup(48).severity == Severity.CRITICAL and lookup(48).family == Family.GPU_FAULT  # type: ignore[union-attr]
    assert lookup(63).severity == Severity.WARNING  # type: ignore[union-attr]
    assert lookup(999) is None


def test_xid79_with_gpu_mapping() -> None:
    g = GpuFacts(index=3, pci_bus_id="00000000:C6:00.0", uuid="GPU-aaaa")
    s = snap_of(
        [
            "[ 1.0] NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the "
            "bus."
        ],
        gpus=[g],
    )
    fs = findings(s)
    x = by_code(fs, "xid.79")[0]
    assert x.severity == Severity.CRITICAL and x.family == Family.PCIE_POWER
    assert (x.gpu.index, x.gpu.uuid) == (3, "GPU-aaaa")  # type: ignore[union-attr]
    assert x.data["count"] == 1 and x.data["pids"] == [1101234] and x.data["processes"] == ["nvc:[driver]"]
    assert x.data["nvidia_immediate_action"] == "RESTART_BM"
    assert x.evidence[0].startswith("[ 1.0] NVRM: Xid")
    assert x.remedy == first_step("xid.79", x.gpu) and "GPU 3" in x.remedy  # the runbook's, for this GPU
    fob = by_code(fs, "gpu.fallen_off_bus")[0]
    assert fob.severity == Severity.CRITICAL and fob.gpu.index == 3  # type: ignore[union-attr]


def test_uuid_map_used_when_no_nvml() -> None:
    s = snap_of(
        [
            "[ 1.0] NVRM: GPU at PCI:0000:3b:00: GPU-2bbcd8f2-4a2b-9c0e-6b1b-3b5e8c3c3d2e",
            "[ 1.1] NVRM: Xid (PCI:0000:3b:00): 94, pid=5, name=python3, Ch 00000008",
        ]
    )
    f = by_code(findings(s), "xid.94")[0]
    assert f.gpu.pci_bus_id == "0000:3b:00.0" and f.gpu.uuid == "GPU-2bbcd8f2-4a2b-9c0e-6b1b-3b5e8c3c3d2e"  # type: ignore[union-attr]
    assert f.severity == Severity.WARNING


def test_48_followed_by_63() -> None:
    s = snap_of(
        [
            "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=python, An uncorrectable double bit error",
            "[ 1.1] NVRM: Xid (PCI:0000:3b:00): 63, pid=77, name=python, Row Remapper: New row marked for "
            "remapping, reset gpu to activate.",
        ]
    )
    fs = findings(s)
    f48 = by_code(fs, "xid.48")[0]
    assert f48.severity == Severity.CRITICAL and f48.data["followed_by"] == [63]
    assert "reset it so the bad memory row is remapped" in f48.data["conclusion"]
    assert f48.remedy == first_step("xid.48", f48.gpu)
    assert by_code(fs, "xid.63")[0].severity == Severity.WARNING


def test_45_follows_its_cause() -> None:
    s = snap_of(
        [
            "[ 1.0] NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
            "previous "
            "Xid 149"
        ]
    )
    f = by_code(findings(s), "xid.45")[0]
    # the cause is named but its own line is not in the log: the fault is known, so it is not INFO
    assert f.data["caused_by"] == [149] and f.data["cause_not_logged"] == [149]
    assert f.severity == lookup(149).severity > Severity.INFO  # type: ignore[union-attr]
    with_cause = snap_of([
        "[ 0.9] NVRM: Xid (PCI:0000:dc:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 "
        "0x00000000 0x00000000 0x00000000 0x00000000)",
        "[ 1.0] NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous "
        "Xid 149",
    ])
    f = by_code(findings(with_cause), "xid.45")[0]
    assert f.severity == Severity.INFO and "cause_not_logged" not in f.data
    solo = by_code(
        findings(snap_of(["[ 1.0] NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=p, Ch 00000001"])), "xid.45"
    )
    assert solo[0].severity == Severity.WARNING


def test_13_repeated_on_one_gpu_points_at_hardware() -> None:
    base = (
        "NVRM: Xid (PCI:0000:cb:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception on (GPC 7, TPC "
        "7, "
        "SM 0): Illegal Instruction Parameter"
    )
    one = by_code(findings(snap_of([f"[ 1.0] {base.format(pid=1)}"])), "xid.13")[0]
    assert one.severity == Severity.WARNING and one.family == Family.SOFTWARE
    rep = by_code(findings(snap_of([f"[ {i}.0] {base.format(pid=100 + i)}" for i in range(1, 5)])), "xid.13")[
        0
    ]
    assert (
        rep.severity == Severity.CRITICAL and rep.data["suspect_hardware"] is True and rep.data["count"] == 4
    )
    assert "dcgmi diag -r 3" in rep.data["conclusion"]
    rb = get("xid.13")
    assert rb is not None and "dcgmi diag -r 3" in render_text(rb)  # the runbook's next step: suspect the GPU
    # the same on two GPUs: the application
    lines = [f"[ {i}.0] {base.format(pid=100 + i)}" for i in range(1, 5)]
    lines.append("[ 9.0] " + base.format(pid=9).replace("0000:cb:00", "0000:ca:00"))
    fs = by_code(findings(snap_of(lines)), "xid.13")
    assert {f.severity for f in fs} == {Severity.WARNING}


def test_previous_boot_is_downgraded() -> None:
    s = snap_of(
        [
            "[ 9000.0] NVRM: Xid (PCI:0000:c6:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            "[ 2.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05",
        ]
    )
    fs = findings(s)
    assert by_code(fs, "xid.79")[0].severity == Severity.WARNING
    assert by_code(fs, "xid.79")[0].data["previous_boot"] is True
    assert by_code(fs, "gpu.fallen_off_bus")[0].severity == Severity.WARNING


def test_154_recovery_action() -> None:
    s = snap_of(
        [
            "[ 1.0] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 "
            "(Drain and Reset)"
        ]
    )
    f = by_code(findings(s), "xid.154")[0]
    assert f.severity == Severity.CRITICAL and f.data["recovery_action"] == "Drain and Reset"


def test_gsp_error_alone_and_with_xid() -> None:
    alone = snap_of(
        [
            "[ 5.0] NVRM: Timeout after 45s of waiting for RPC response from GPU0 GSP! Expected function "
            "76 (GSP_RM_CONTROL) (0x20800a4c 0x4)."
        ]
    )
    fs = findings(alone)
    g = by_code(fs, "gsp.error")[0]
    assert g.severity == Severity.CRITICAL and "RPC timeout" in g.title
    with_xid = snap_of(
        [
            "[ 14.0] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
            "waiting for "
            "RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
            "[ 14.1] NVRM: GPU4 GSP RPC buffer contains function 103 (GSP_RM_ALLOC) and data "
            "0x0000000000002081.",
        ]
    )
    fs = findings(with_xid)
    g = by_code(fs, "gsp.error")[0]
    assert g.severity == Severity.CRITICAL and g.data["xids"] == [119] and g.data["count"] == 2
    x = by_code(fs, "xid.119")[0]
    assert x.severity == Severity.CRITICAL and any("GSP RPC buffer" in e for e in x.evidence)


def test_init_failed() -> None:
    s = snap_of(
        [
            "[ 15.0] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)",
            "[ 15.0] NVRM: rm_init_adapter failed for device bearing minor number 0",
            "[ 15.1] nvidia: probe of 0000:01:00.0 failed with error -1",
        ]
    )
    f = by_code(findings(s), "gpu.init_failed")
    assert len(f) == 1 and f[0].severity == Severity.CRITICAL and f[0].data["count"] == 3
    assert f[0].data["rm_codes"] == ["0x22:0x56:667"]


def test_nvlink_and_sxid() -> None:
    s = snap_of(
        [
            "[ 1.0] NVRM: Xid (PCI:0000:D8:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error "
            "detected on "
            "link 14(0x100000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
            "[ 2.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted "
            "PRIV error",
            "[ 3.0] nvidia-nvswitch3: SXid (PCI:0000:88:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
        ]
    )
    fs = by_code(findings(s), "nvlink.error")
    gpu = [f for f in fs if f.gpu is not None][0]
    assert gpu.severity == Severity.CRITICAL and gpu.data["links"] == [14] and gpu.data["xids"] == [74]
    sw = {f.data["sxids"][0]: f for f in fs if f.gpu is None}
    assert sw[12028].severity == Severity.WARNING and sw[20034].severity == Severity.CRITICAL


def test_aer_attribution_and_rate() -> None:
    gpu = GpuFacts(index=0, pci_bus_id="00000000:01:00.0")
    lines = []
    for i in range(120):
        lines += [
            f"[ {i * 30}.0] pcieport 0000:00:01.1: AER: Corrected error message received from 0000:00:01.1",
            f"[ {i * 30}.0] pcieport 0000:00:01.1: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
            "(Receiver ID)",
            f"[ {i * 30}.0] pcieport 0000:00:01.1:   device [1022:1483] error status/mask=00000001/00006000",
            f"[ {i * 30}.0] pcieport 0000:00:01.1:    [ 0] RxErr",
        ]
    s = snap_of(
        lines,
        gpus=[gpu],
        pci_devices=[PciDevice(bus_id="0000:01:00.0", class_code="0x030200", parent_bus_id="0000:00:01.1")],
    )
    f = by_code(findings(s), "pcie.aer_corrected")[0]
    assert f.gpu.index == 0 and f.data["where"] == "bridge_above_gpu"  # type: ignore[union-attr]
    assert (
        f.severity == Severity.WARNING and f.data["count"] == 120 and f.data["error_bits"] == {"RxErr": 120}
    )
    assert "/h" in f.title and f.data["rate_per_hour"] == 121.01
    few = snap_of(lines[:8], gpus=[gpu], pci_devices=s.pci_devices)
    assert by_code(findings(few), "pcie.aer_corrected")[0].severity == Severity.INFO


def test_aer_uncorrected_fatal_on_gpu() -> None:
    s = snap_of(
        [
            "[ 5.0] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error message received from 0000:3b:00.0",
            "[ 5.0] nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction "
            "Layer, "
            "(Receiver ID)",
            "[ 5.0] nvidia 0000:3b:00.0: AER:   device [10de:20b0] error status/mask=00040000/00000000",
            "[ 5.0] nvidia 0000:3b:00.0: AER:    [18] MalfTLP                (First)",
        ]
    )
    f = by_code(findings(s), "pcie.aer_uncorrected")[0]
    assert f.severity == Severity.CRITICAL and f.gpu.pci_bus_id == "0000:3b:00.0" and f.data["fatal"] is True  # type: ignore[union-attr]
    assert any("MalfTLP" in e for e in f.evidence)


def test_bandwidth_limited_width_vs_speed() -> None:
    gpu = GpuFacts(index=1, pci_bus_id="00000000:01:00.0")
    narrow = snap_of(
        [
            "[ 1.1] pci 0000:01:00.0: 63.008 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x8 "
            "link at 0000:00:01.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)"
        ],
        gpus=[gpu],
    )
    f = by_code(findings(narrow), "pcie.bandwidth_limited")[0]
    assert f.severity == Severity.WARNING and f.gpu.index == 1  # type: ignore[union-attr]
    slow = snap_of(
        [
            "[ 1.1] pci 0000:01:00.0: 32.000 Gb/s available PCIe bandwidth, limited by 2.5 GT/s PCIe x16 "
            "link at 0000:00:01.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)"
        ],
        gpus=[gpu],
    )
    assert by_code(findings(slow), "pcie.bandwidth_limited")[0].severity == Severity.INFO
    other = snap_of(
        [
            "[ 1.1] pci 0000:41:00.0: 32.000 Gb/s available PCIe bandwidth, limited by 2.5 GT/s PCIe x16 "
            "link at 0000:40:01.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)"
        ],
        gpus=[gpu],
    )
    assert by_code(findings(other), "pcie.bandwidth_limited") == []  # a device's slower slot: by design
    nic = snap_of(
        [
            "[ 9.8] mlx5_core 0000:b3:00.1: 126.024 Gb/s available PCIe bandwidth, limited by 16.0 GT/s PCIe "
            "x8 link at 0000:b2:00.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)"
        ],
        gpus=[gpu],
    )
    (f,) = by_code(findings(nic), "pcie.bandwidth_limited")  # any device trained narrow: a NIC halves RDMA
    assert f.severity == Severity.WARNING and f.gpu is None
    assert f.title.startswith("mlx5_core 0000:b3:00.1: PCIe link trained at x8 of x16")


def test_module_api_mismatch() -> None:
    s = snap_of(
        [
            "[ 17.0] NVRM: API mismatch: the client has the version 535.104.05, but",
            "[ 17.0] NVRM: this kernel module has the version 530.30.02.  Please",
        ]
    )
    f = by_code(findings(s), "driver.kernel_module")[0]
    assert f.severity == Severity.CRITICAL and f.family == Family.SOFTWARE
    assert "535.104.05" in f.title and "530.30.02" in f.title


def test_no_log_is_skipped_not_healthy() -> None:
    s = Snapshot(origin="live")
    fs, skipped = run_checks(s, only=KCHECKS)
    assert fs == [] and [k.what for k in skipped] == ["Xid errors in the kernel log"]


def test_unknown_future_xid_is_a_warning_not_a_crash() -> None:
    f = by_code(
        findings(snap_of(["[ 1.0] NVRM: Xid (PCI:0000:3b:00): 201, pid=1, name=p, something new"])), "xid.201"
    )
    assert f[0].severity == Severity.WARNING and "not in gpuclinic's catalog" in f[0].data["description"]


def test_app_xid43_is_a_warning() -> None:
    f = by_code(
        findings(snap_of(["[ 1.0] NVRM: Xid (PCI:0000:3b:00): 43, pid=1, name=p, Ch 00000010"])), "xid.43"
    )
    assert f[0].severity == Severity.WARNING and f[0].family == Family.SOFTWARE


def test_catalog_file_is_what_the_builder_writes() -> None:
    """The shipped JSON is reproducible from the research catalog copy shipped in tools/data."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    research = root / "tools" / "data" / "xid-catalog.research.json"
    spec = importlib.util.spec_from_file_location(
        "build_xid_catalog", root / "tools" / "build_xid_catalog.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    built = mod.build(json.loads(research.read_text()))
    shipped = json.loads((root / "src/gpuclinic/knowledge/data/xid_catalog.json").read_text())
    assert built == shipped


def test_every_catalogued_xid_has_steps() -> None:
    """Even the newest codes without published NVIDIA buckets get a remedy a person can follow."""
    assert [x.xid for x in all_xids() if not x.steps()] == []
    assert lookup(167).severity == Severity.CRITICAL and "reset" in lookup(167).steps()[0]  # type: ignore[union-attr]


def test_no_catalog_xid_reads_healthy_unless_purely_informational() -> None:
    """Every catalog Xid in a kernel log is a finding; only the 'informational' category may leave the node
    HEALTHY (NVIDIA's IGNORE bucket for a driver, NVLink, C2C or InfoROM fault is still a fault)."""
    from gpuclinic.diagnose import diagnose
    from gpuclinic.model import Verdict

    healthy_ok = {i.xid for i in all_xids() if i.category == "informational"}
    assert healthy_ok and healthy_ok <= {45, 106, 107, 154}
    wrong = []
    for info in all_xids():
        n = info.xid
        snap = Snapshot(origin="evidence")
        snap.kernel_events = list(
            parse_lines(
                [f"[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): {n}, pid=4242, name=python3, Ch 00000008"],
                "dmesg",
            )
        )
        snap.kernel_log_read = True
        report = diagnose(snap)
        codes = {f.code: f.severity for f in report.findings}
        verdict = Verdict.from_severity(max(codes.values(), default=None))
        if f"xid.{n}" not in codes or (verdict == Verdict.HEALTHY and n not in healthy_ok):
            wrong.append((n, info.category, codes.get(f"xid.{n}"), verdict))
    assert not wrong, wrong


def test_an_xid_the_current_catalog_lists_as_unused_is_titled_by_its_earlier_meaning() -> None:
    """Drivers still log Xid 61 (a GTX 660 on 384.11: ``NVRM: Xid (PCI:0000:01:00): 61, 1927(16e4)``);
    NVIDIA's current catalog lists it as "Unused", which told the reader nothing.  Codes with a current
    description keep it."""
    from gpuclinic.knowledge.xid import lookup

    i61, i79 = lookup(61), lookup(79)
    assert i61 is not None and i79 is not None
    assert i61.summary.startswith("Internal micro-controller breakpoint/warning (NVIDIA's earlier Xid table")
    assert "newer drivers" not in i61.summary
    assert i79.summary == i79.description.split(". ")[0].split(": ", 1)[0].rstrip(".")
    from gpuclinic.checks import run_checks
    from gpuclinic.sources.evidence_text import snapshot_from_text

    line = "[   975.844436] NVRM: Xid (PCI:0000:01:00): 61, 1927(16e4) 00000000 00000000\n"
    snap = snapshot_from_text(line)
    titles = [f.title for f in run_checks(snap)[0] if f.code == "xid.61"]
    assert titles and "Unused" not in titles[0] and "micro-controller breakpoint" in titles[0]
