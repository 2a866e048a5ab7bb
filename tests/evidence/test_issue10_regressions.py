"""Every example in issue 10's "Why": evidence that used to be dropped (or misread) is now read.

Each case is a text a person would paste or send; the fixtures are in tests/fixtures/evidence/issue10/
(SOURCES.md there names the public source of each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.diagnose import Report, diagnose
from gpuclinic.model import Severity
from gpuclinic.sources.evidence import load_evidence

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"
I10 = FX / "issue10"


def report(*names: str) -> Report:
    return diagnose(load_evidence([str(I10 / n) if (I10 / n).exists() else str(FX / n) for n in names]))


def codes(r: Report) -> set[str]:
    return {f.code for f in r.findings}


@pytest.mark.parametrize(("name", "expected", "verdict"), [
    # the driver's "A GPU crash dump has been created ... nvidia-bug-report.sh" lines, a shell prompt and an
    # nvidia-smi error before the dmesg lines: the Xid 79 must not be dropped
    ("xid79-crashdump-prompt.txt", {"xid.79", "gpu.fallen_off_bus"}, "drain"),
    ("dmesg-T-one-line-xid109.log", {"xid.109"}, "drain"),
    ("redacted-bus-xid145.log", {"xid.145"}, None),
    ("k8s-device-plugin-xid69.log", {"xid.69"}, None),
    ("dcgmi-health-c-xid.txt", {"xid.48"}, "drain"),
    ("dcgmi-diag-xid.txt", {"xid.79"}, "drain"),
    ("dcgm-exporter-xid-metric.txt", {"xid.94"}, None),
    ("nvsentinel-health-event.json", {"xid.145"}, None),
    ("journal-json-xid79.json", {"xid.79"}, "drain"),
    ("journal-export-xid79.txt", {"xid.79"}, "drain"),
    ("oom-killer-only.log", {"error.host.oom_killer"}, None),
    ("mixed-xid-and-oom.log", {"xid.13", "error.host.oom_killer"}, None),
    ("fabricmanager-nothing-to-do.log", {"driver.fabric_manager_missing"}, None),
    ("persistenced-failed.log", {"persistenced.failed"}, None),
    ("oops-nv-audio.log", {"driver.kernel_module"}, "drain"),
    ("amd-iommu-page-fault.log", {"pcie.iommu_fault"}, None),
    ("intel-dmar-fault.log", {"pcie.iommu_fault"}, None),
])
def test_fault_in_any_format_is_found(name: str, expected: set[str], verdict: str | None) -> None:
    r = report(name)
    assert expected <= codes(r), (name, sorted(codes(r)))
    assert r.verdict is not None and r.verdict.value != "healthy"
    if verdict is not None:
        assert r.verdict.value == verdict


def test_crash_excerpt_is_read_as_a_kernel_log_not_a_bug_report() -> None:
    snap = load_evidence([str(I10 / "xid79-crashdump-prompt.txt")])
    assert snap.kernel_log_read
    assert "the kernel log" not in {s.what for s in snap.skipped}
    assert snap.software is not None
    assert any("Unable to determine the device handle" in e for e in snap.software.nvidia_smi_errors)


def test_redacted_bus_id_keeps_the_xid_without_a_gpu() -> None:
    snap = load_evidence([str(I10 / "redacted-bus-xid145.log")])
    xids = [e for e in snap.kernel_events if e.kind == "xid"]
    assert [(e.xid, e.pci_bus_id) for e in xids] == [(145, None)]


def test_iommu_fault_names_the_gpu_address() -> None:
    r = report("amd-iommu-page-fault.log")
    f = next(f for f in r.findings if f.code == "pcie.iommu_fault")
    assert f.gpu is not None and f.gpu.pci_bus_id == "0000:81:00.0"


@pytest.mark.parametrize(("name", "version"), [
    ("driver-version-loading.log", "570.124.06"),
    ("modeset-only-version.log", "515.43.04"),
])
def test_driver_version_from_module_load_lines(name: str, version: str) -> None:
    snap = load_evidence([str(I10 / name)])
    assert snap.driver_version == version


def test_module_vs_library_mismatch_names_both_versions() -> None:
    r = report("nvml-mismatch-versions.txt")
    f = next(f for f in r.findings if f.code == "driver.library_mismatch")
    assert f.data["kernel_module"] == "535.104.05"
    assert "535.129.03" in f.data["user_space"]


def test_lspci_nn_counts_the_gpus() -> None:
    snap = load_evidence([str(FX / "lspci-nn-a100x8-azure.txt")])
    assert len(snap.gpus) == 8
    assert sum(1 for d in snap.pci_devices if d.is_gpu) == 8
    assert all(g.pci_bus_id for g in snap.gpus)


def test_lifetime_replay_counter_alone_is_not_a_warning() -> None:
    r = report("h100-535-healthy-replay120.txt")
    assert not [f for f in r.findings if f.code == "pcie.replay" and f.severity >= Severity.WARNING]
    assert r.verdict is not None and r.verdict.value == "healthy"


def test_report_lists_segments_and_unclaimed_lines() -> None:
    r = report("xid79-crashdump-prompt.txt")
    d = r.to_dict()
    recs = d["facts"]["input_records"]
    assert len(recs) == 1
    kinds = {s["kind"] for s in recs[0]["segments"]}
    assert "kernel_log" in kinds and "smi_error" in kinds
    assert recs[0]["unclaimed"] <= 2  # the two shell prompt lines


@pytest.mark.parametrize(("name", "driver", "gpu"), [
    ("windows-table-wddm-555.txt", "555.97", "NVIDIA GeForce RTX 4080 ..."),
    ("windows-table-tcc-wddm-552.txt", "552.22", "NVIDIA GeForce RTX 3080 ..."),
])
def test_windows_tables(name: str, driver: str, gpu: str) -> None:
    snap = load_evidence([str(I10 / name)])
    assert snap.driver_version == driver
    assert [(g.name, g.pci_bus_id) for g in snap.gpus] == [(gpu, "0000:01:00.0")]
    assert snap.input_records[0].kind == "smi_table" and snap.input_records[0].unclaimed == 0


def test_proc_driver_version_text_gives_the_module_version() -> None:
    from gpuclinic.sources.evidence import snapshot_from_text

    snap = snapshot_from_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
        "paste",
    )
    assert snap.driver_version == "535.104.05"
    assert snap.software is not None and snap.software.proc_driver_version == "535.104.05"


def test_lspci_vvv_alone_counts_the_gpu_and_judges_its_link() -> None:
    r = report("lspci-vvv-a100-downgraded.txt")
    g = r.snapshot.gpus[0]
    assert (g.pci_bus_id, g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) == (
        "0000:10:1c.0",
        1,
        4,
        8,
        16,
    )
    assert "pcie.link_degraded" in codes(r)


@pytest.mark.parametrize(
    ("later", "minutes", "severity"), [(220, 1, Severity.WARNING), (121, 10, Severity.INFO)]
)
def test_two_dumps_give_the_replay_rate(tmp_path: Path, later: int, minutes: int, severity: Severity) -> None:
    """Two -q dumps of one GPU, minutes apart: the lifetime counter becomes a rate, judged against DCGM's
    budget."""
    first = (I10 / "h100-535-healthy-replay120.txt").read_text()
    second = first.replace("Wed Jul 31 11:22:39 2024", f"Wed Jul 31 11:{22 + minutes:02d}:39 2024").replace(
        "Replays Since Reset               : 120", f"Replays Since Reset               : {later}"
    )
    assert second != first
    (tmp_path / "a.txt").write_text(first)
    (tmp_path / "b.txt").write_text(second)
    r = diagnose(load_evidence([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]))
    g = r.snapshot.gpus[0]
    assert g.pcie_replay_count == later and g.pcie_replay_rate_per_min == pytest.approx(
        (later - 120) / minutes
    )
    (f,) = [f for f in r.findings if f.code == "pcie.replay"]
    assert f.severity == severity
