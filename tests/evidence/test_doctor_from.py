"""doctor --from on real recorded evidence: the verdicts and codes a person would expect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.sources.evidence import load_evidence

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


def codes(*names: str) -> tuple[str, list[tuple[str, int | None]]]:
    report = diagnose(load_evidence([str(FX / n) for n in names]))
    assert report.verdict is not None
    return report.verdict.value, sorted((f.code, f.gpu.index if f.gpu else None) for f in report.findings)


@pytest.mark.parametrize(("names", "verdict", "expected"), [
    (["a100-sxm4-80gb-510-remap-pending.txt"], "warning", [("memory.row_remap_pending", 0)]),
    (["table-err-gsp-timeout-a100.txt"], "drain", [("gpu.missing", 5)]),
    (["table-handle-gpu-lost.txt"], "drain", [("gpu.missing", 0)]),
    (["table-handle-unknown-error-525.txt"], "drain", [("gpu.missing", 0)]),
    (["tesla-p100-510.xml"], "healthy", []),
    (["a100-sxm4-40gb-mig-510.xml"], "healthy", []),
    (["table-v100s-450-busy.txt"], "healthy", []),
    (["table-a40-550.txt"], "healthy", []),
    (["table-h100x8-550.txt"], "healthy", []),
    (["a10-535-remap-pending-full.txt"], "warning", [("memory.row_remap_pending", 0)]),
    (["h100-535-power-brake-gpu0-of-8.txt"], "drain", [("power.brake", 0)]),
    # the report's kern.log has AER + Xid 79 for a GPU at 02:00 that nvidia-smi no longer lists; the excerpt
    # has no epilogue ("End of NVIDIA bug report log file."), so it is said to be read in part
    (["nvidia-bug-report-excerpt.log.gz"], "drain", [
        ("evidence.partial", None), ("gpu.fallen_off_bus", None), ("memory.row_remap_pending", 0),
        ("pcie.aer_uncorrected", None),
        ("pcie.link_degraded", 0), ("xid.79", None)]),
])
def test_verdicts(names: list[str], verdict: str, expected: list[tuple[str, int | None]]) -> None:
    got_verdict, got = codes(*names)
    assert (got_verdict, got) == (verdict, expected)


def test_two_dumps_of_one_node_merge_into_one_gpu_list() -> None:
    snap = load_evidence([str(FX / "table-a40-550.txt"), str(FX / "table-handle-unknown-error-525.txt")])
    assert [g.index for g in snap.gpus] == [0, 1, 2, 3, 4]
    assert snap.gpus[4].lost and snap.gpus[4].pci_bus_id == "0000:65:00.0"


@pytest.mark.parametrize(
    ("name", "rc"),
    [
        ("tesla-p100-510.xml", 0),
        ("a100-sxm4-80gb-510-remap-pending.txt", 1),
        ("table-err-gsp-timeout-a100.txt", 2),
    ],
)
def test_cli_exit_codes(name: str, rc: int) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--from", str(FX / name)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == rc, r.stderr
    assert "Traceback" not in r.stderr


def test_power_brake_paste_merges_with_the_same_gpus_pci_excerpt() -> None:
    verdict, got = codes("v100-sxm2-32gb-power-brake-excerpt.txt", "v100-sxm2-32gb-pci-excerpt.txt")
    assert (verdict, got) == ("drain", [("power.brake", 0)])
    snap = load_evidence(
        [str(FX / "v100-sxm2-32gb-power-brake-excerpt.txt"), str(FX / "v100-sxm2-32gb-pci-excerpt.txt")]
    )
    (g,) = snap.gpus
    assert (g.name, g.pci_bus_id, g.pci_device_id) == ("Tesla V100-SXM2-32GB", "0000:1e:00.0", "0x1DB510DE")
    assert (
        g.clock_event_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]
        and g.clock_event_reasons_mask == 0x88
    )
    assert (g.sm_clock_mhz, g.mem_clock_mhz) == (382, 877)
