"""dcgmi diag tables: a `Fail - GPU: N` row and the Deployment row-remap error become findings; Pass rows
and a healthy table stay quiet."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.sources import evidence

HEALTHY = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.1                                          |
| Driver Version Detected   | 535.129.03                                     |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Pass                                           |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
| Targeted Power            | Pass - GPUs: 0, 2, 3                           |
+---------------------------+------------------------------------------------+
"""


def _signals(tmp_path: Path, text: str) -> list[tuple[str, str, int | None, str | None]]:
    p = tmp_path / "diag.txt"
    p.write_text(text)
    snap = evidence.load_evidence([str(p)])
    return [(s.code, s.severity, s.lineno, (s.data or {}).get("gpu")) for s in snap.signals]


def test_fail_row_names_the_gpu(tmp_path: Path) -> None:
    text = HEALTHY.replace(
        "| Targeted Power            | Pass - GPUs: 0, 2, 3                           |\n",
        "| Targeted Power            | Pass - GPUs: 0, 2, 3                           |\n"
        "|                           | Fail - GPU: 1                                  |\n",
    )
    assert _signals(tmp_path, text) == [("dcgm.diag_fail", "critical", 12, "1")]


def test_row_remap_pending_error_row(tmp_path: Path) -> None:
    text = HEALTHY.replace(
        "| software                  | Pass                                           |\n",
        "| Error                     | GPU 3 has uncorrectable memory errors and row  |\n"
        "|                           |  remappings are pending                        |\n",
    )
    assert _signals(tmp_path, text) == [("memory.row_remap_pending", "warning", 8, "3")]


def test_healthy_table_is_quiet(tmp_path: Path) -> None:
    assert _signals(tmp_path, HEALTHY) == []


def test_thermal_violation_warning_row_is_a_thermal_warning(tmp_path: Path) -> None:
    text = HEALTHY.replace(
        "| GPU Memory                | Pass - All                                     |\n",
        "| GPU Memory                | Pass - All                                     |\n"
        "| Warning                   | GPU 2 Thermal violations totaling 13.3 second  |\n"
        "|                           | s started at 9.7 seconds into the test for GP  |\n",
    )
    assert _signals(tmp_path, text) == [("thermal.throttle", "warning", 11, "2")]
