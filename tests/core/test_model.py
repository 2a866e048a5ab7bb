from __future__ import annotations

import json
from pathlib import Path

from gpuclinic.diagnose import build_report
from gpuclinic.facts.gpu import GpuFacts, NvLinkFacts
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.model import Family, Finding, GpuRef, Severity, Verdict
from gpuclinic.render import render_json, render_markdown


def test_normalize_bus_id_variants() -> None:
    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("PCI:0000:2b:00") == "0000:2b:00.0"
    assert normalize_bus_id("0000:c6:00") == "0000:c6:00.0"
    assert normalize_bus_id("3b:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("0008:01:00") == "0008:01:00.0"


def test_snapshot_roundtrip() -> None:
    snap = Snapshot(hostname="h", driver_version="550.54.15")
    snap.gpus.append(GpuFacts(index=0, name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:1b:00.0",
                              temperature_c=61.0, clock_event_reasons=["sw_power_cap"],
                              nvlinks=[NvLinkFacts(link=0, active=True, replay_errors=3)],
                              violation_ns={"power": 12}))
    snap.kernel_events.append(
        KernelEvent(kind="xid", line="NVRM: Xid ...", xid=79, pci_bus_id="0000:1b:00.0")
    )
    snap.skip("the kernel log", "permission denied")
    d = json.loads(snap.to_json())
    assert d["schema"] == "gpuclinic.snapshot/1"
    back = Snapshot.from_dict(d)
    assert back == snap


def test_snapshot_from_dict_tolerates_bad_shapes() -> None:
    back = Snapshot.from_dict(
        {"gpus": [{"index": 0, "temperature_c": "hot", "unknown_field": 1}], "hostname": 5}
    )
    assert back.gpus[0].temperature_c is None
    assert back.hostname is None


def test_verdicts_and_ranking() -> None:
    snap = Snapshot(
        gpus=[GpuFacts(index=0, pci_bus_id="0000:01:00.0"), GpuFacts(index=1, pci_bus_id="0000:02:00.0")]
    )
    fs = [
        Finding("thermal.throttle", Severity.WARNING, Family.HEAT, "hot", gpu=GpuRef(index=1)),
        Finding(
            "xid.79", Severity.CRITICAL, Family.GPU_FAULT, "fell off", gpu=GpuRef(pci_bus_id="PCI:0000:01:00")
        ),
        Finding("driver.persistence_off", Severity.INFO, Family.SOFTWARE, "info"),
    ]
    rep = build_report(snap, fs, [])
    assert rep.verdict is Verdict.DRAIN and rep.exit_code == 2
    assert [f.code for f in rep.findings] == ["xid.79", "thermal.throttle", "driver.persistence_off"]
    # the log-only bus id got attached to GPU 0
    assert rep.findings[0].gpu == GpuRef(index=0, pci_bus_id="0000:01:00.0", uuid=None)
    assert [gv.verdict for gv in rep.gpu_verdicts] == [Verdict.DRAIN, Verdict.WARNING]
    d = json.loads(render_json(rep))
    assert d["verdict"] == "drain" and d["gpus"][0]["findings"] == ["xid.79"]
    assert d["findings"][0]["gpu"]["index"] == 0
    md = render_markdown(rep)
    assert "`xid.79`" in md and "DRAIN" in md


def test_info_only_is_healthy() -> None:
    rep = build_report(Snapshot(), [Finding("x.y", Severity.INFO, Family.HOST, "fyi")], [])
    assert rep.verdict is Verdict.HEALTHY and rep.exit_code == 0


def test_finding_dict_roundtrip() -> None:
    f = Finding(
        "pcie.aer_corrected",
        Severity.WARNING,
        Family.PCIE_POWER,
        "t",
        ["e"],
        "r",
        GpuRef(0, "0000:01:00.0"),
        {"n": 2},
    )
    assert Finding.from_dict(f.to_dict()) == f


def test_same_code_same_gpu_merges_evidence() -> None:
    snap = Snapshot(gpus=[GpuFacts(index=0, pci_bus_id="0000:01:00.0")])
    fs = [
        Finding(
            "pcie.aer_corrected",
            Severity.WARNING,
            Family.PCIE_POWER,
            "from sysfs",
            ["aer_dev_correctable RxErr = 40"],
            gpu=GpuRef(index=0),
            data={"sysfs": 40},
        ),
        Finding(
            "pcie.aer_corrected",
            Severity.CRITICAL,
            Family.PCIE_POWER,
            "from kernel log",
            ["pcieport ... AER: Corrected"],
            gpu=GpuRef(pci_bus_id="0000:01:00.0"),
            data={"log": 3},
        ),
        Finding(
            "pcie.aer_corrected",
            Severity.WARNING,
            Family.PCIE_POWER,
            "other gpu",
            ["x"],
            gpu=GpuRef(pci_bus_id="0000:02:00.0"),
        ),
    ]
    rep = build_report(snap, fs, [])
    codes = [(f.code, f.gpu.pci_bus_id if f.gpu else None) for f in rep.findings]
    assert codes == [("pcie.aer_corrected", "0000:01:00.0"), ("pcie.aer_corrected", "0000:02:00.0")]
    top = rep.findings[0]
    assert top.severity is Severity.CRITICAL and top.title == "from kernel log"
    assert top.evidence == ["pcieport ... AER: Corrected", "aer_dev_correctable RxErr = 40"]
    assert top.data["sysfs"] == 40 and top.data["merged_from"] == ["from sysfs"]


def test_finding_and_incident_evidence_hold_each_line_once_in_order() -> None:
    from gpuclinic.model import Incident

    f = Finding(code="x", severity=Severity.WARNING, family=Family.GPU_FAULT, title="t",
                evidence=["b", "a", "b", "c", "a"])
    assert f.evidence == ["b", "a", "c"]
    assert Finding.from_dict(f.to_dict() | {"evidence": ["z", "z"]}).evidence == ["z"]
    i = Incident(id="x@node", code="x", severity=Severity.WARNING, family=Family.GPU_FAULT, title="t",
                 evidence=["k", "k", "j"])
    assert i.evidence == ["k", "j"]


def test_lost_gpu_with_a_repeated_unstamped_xid_line_shows_it_once(tmp_path: Path) -> None:
    """An nvidia-smi 'GPU is lost' dump with a kernel log pasted from two places (the same unstamped
    Xid 79 line twice): gpu.missing listed that line twice (checks/_hw.kernel_lines)."""
    from gpuclinic.diagnose import diagnose
    from gpuclinic.sources.evidence import load_evidence

    xid = "NVRM: Xid (PCI:0000:02:00): 79, pid=1234, GPU has fallen off the bus."
    log = tmp_path / "kern.log"
    log.write_text(f"{xid}\nNVRM: GPU 0000:02:00.0: GPU has fallen off the bus.\n{xid}\n")
    smi = Path(__file__).resolve().parents[1] / "fixtures" / "evidence" / "table-handle-gpu-lost.txt"
    report = diagnose(load_evidence([str(smi), str(log)]))
    missing = next(f for f in report.findings if f.code == "gpu.missing")
    assert missing.evidence.count(f"kernel: {xid}") == 1
    for f in report.findings:
        assert len(f.evidence) == len(set(f.evidence)), f.code
