"""More DCGM output read from real pastes: ``dcgmi discovery -l`` lists the GPUs (was "not recognised"), a
diag table excerpt without its metadata rows is read and ``Fail - All`` is a failed test (was left
unread), and nv-hostengine's health line "clocks event due to thermal violation in GPU N" is a thermal
slowdown (was NO KNOWN CAUSE)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.sources import dcgm_discovery
from gpuclinic.sources.evidence import load_evidence, snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _read(name: str) -> tuple[dict[str, str], int]:
    snap = load_evidence([str(CORPUS / name)])
    (rec,) = snap.input_records
    codes = {f.code: f.severity.name.lower() for f in diagnose(snap).findings}
    return codes, rec.unclaimed


def test_discovery_lists_gpus_with_bus_and_uuid() -> None:
    lines = (CORPUS / "dcgmi_discovery_name_null_h100_dcgm_229.txt").read_text().splitlines()
    gpus, found = dcgm_discovery.parse(lines)
    assert found == 4
    assert [(g.index, g.pci_bus_id, g.uuid) for g in gpus] == [
        (0, "0000:4c:00.0", "GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de"),
        (1, "0000:5d:00.0", "GPU-75c4ee16-a840-6f6c-9a7b-5ed8f41598b8"),
    ]
    assert gpus[0].name is None and "NULL" in gpus[0].unreadable["name"]
    codes, unclaimed = _read("dcgmi_discovery_name_null_h100_dcgm_229.txt")
    assert unclaimed == 0 and not [c for c, s in codes.items() if s in ("warning", "critical")]


def test_diag_excerpt_is_read_and_fail_all_fails() -> None:
    codes, unclaimed = _read("dcgm_diag_memory_fail_ctx_busy_godcgm_52.txt")
    assert codes.get("dcgm.diag_fail") == "critical" and unclaimed == 0
    only_all = "dcgmi diag -r 3\n| Targeted Stress           | Fail - All         |\n"
    assert "dcgm.diag_fail" in {f.code for f in diagnose(snapshot_from_text(only_all, "t")).findings}


def test_hostengine_thermal_health_line_is_a_thermal_slowdown() -> None:
    codes, unclaimed = _read("dcgm_hostengine_health_thermal_warning_dcgm_270.txt")
    assert codes == {"thermal.throttle": "warning"} and unclaimed == 0


# DCGM 4.x prints one row per GPU under each test (dcgmi/Diag.cpp HelperDisplayEntityResults): the
# real 4.2.3 table of NVIDIA/DCGM#253 has "GPU0: Pass" rows; a "GPU1: Fail" row is a failed test (was HEALTHY)
DCGM4_FAIL = """\
| DCGM Version              | 4.2.3                                          |
| Driver Version Detected   | 570.148.08                                     |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Pass                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Pass                                     |
+-----  Hardware  ----------+------------------------------------------------+
| memory                    | Fail                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Fail                                     |
"""


def test_dcgm4_per_gpu_fail_row_is_a_failed_test() -> None:
    rep = diagnose(snapshot_from_text(DCGM4_FAIL, "t"))
    (f,) = [f for f in rep.findings if f.code == "dcgm.diag_fail"]
    assert "GPU1: Fail" in f.evidence[0]


def test_dcgm4_pass_rows_stay_healthy() -> None:
    codes, unclaimed = _read("dcgm_diag_pod_4x_570_dcgm_253.txt")
    assert "dcgm.diag_fail" not in codes
