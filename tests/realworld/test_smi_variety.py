"""nvidia-smi output variety seen in real captures: 610+ header names, terminal escapes, MIG listings.

Fixtures are in ``tests/fixtures/realworld/corpus`` (SOURCES.md names each public source).  Each test pins
what was misread before its fix, through the same readers ``doctor --from`` and ``explain`` use.
"""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Verdict
from gpuclinic.sources import smi_table, smi_text
from gpuclinic.sources.evidence import detect, load_evidence, snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def snap_of(name: str) -> Snapshot:
    return snapshot_from_text((CORPUS / name).read_text(), name)


def test_610_q_header_drops_the_deprecation_note() -> None:
    """610 prints "Driver Version : 610.57.04 [Deprecated; ... Use KMD Version instead]": the version only."""
    text = (CORPUS / "q_610_kmd_version_deprecated_rtx2080s_gpuexporter.txt").read_text()
    dump = smi_text.parse(text)
    assert (dump.driver_version, dump.cuda_version) == ("610.57.04", "13.3")
    s = snap_of("q_610_kmd_version_deprecated_rtx2080s_gpuexporter.txt")
    assert (s.driver_version, s.cuda_driver_version, len(s.gpus)) == ("610.57.04", "13.3", 1)


def test_610_q_kmd_lines_alone_give_the_version() -> None:
    """A paste of only the new lines (``KMD Version`` / ``CUDA UMD Version``) still names the driver."""
    text = (
        "==============NVSMI LOG==============\n\nKMD Version                  : 610.57.04\n"
        "CUDA UMD Version             : 13.3\n\nAttached GPUs                : 1\nGPU 00000000:0C:00.0\n"
        "    Product Name             : NVIDIA GeForce RTX 2080 SUPER\n"
    )
    dump = smi_text.parse(text)
    assert (dump.driver_version, dump.cuda_version) == ("610.57.04", "13.3")


def test_610_table_header_kmd_and_umd_version() -> None:
    """The 610 table header says "KMD Version:" and "CUDA UMD Version:" (no "Driver Version:")."""
    text = (CORPUS / "table_610_kmd_umd_version_wddm_rtx2080s_gpuexporter.txt").read_text()
    assert smi_table.has_table(text)
    dump = smi_table.parse(text)
    assert (dump.driver_version, dump.cuda_version) == ("610.62", "13.3")
    (g,) = dump.gpus
    assert g.name and g.name.startswith("NVIDIA GeForce RTX 2080")
    s = snap_of("table_610_kmd_umd_version_wddm_rtx2080s_gpuexporter.txt")
    assert s.driver_version == "610.62" and diagnose(s).verdict == Verdict.HEALTHY


def test_topo_matrix_with_terminal_underline_escapes() -> None:
    """``topo -m`` captured from a terminal underlines its header (ESC[4m..ESC[0m): still a topology matrix,
    not an unrecognised input."""
    path = CORPUS / "topo_m_ansi_underline_header_h100_590_gpuexporter.txt"
    text = path.read_text()
    assert "\x1b[4m" in text
    assert detect(text) == "smi_topo"
    s = load_evidence([str(path)])
    notes = [n for n in s.notes if "topo -m" in n or "CPU affinity" in n]
    assert any("nvidia-smi topo -m: 1 GPU(s)" in n for n in notes)
    assert any("GPU0 CPUs 0-19 (NUMA 0)" in n for n in notes)
    # the same paste with only the ESC bytes lost ("[4mGPU0 ...[0m")
    s2 = snapshot_from_text(text.replace("\x1b", ""), "stripped")
    assert any("CPUs 0-19" in n for n in s2.notes)


def test_smi_l_with_mig_devices_is_one_gpu() -> None:
    s = snap_of("smi_L_mig_devices_h100_590_gpuexporter.txt")
    assert len(s.gpus) == 1 and diagnose(s).verdict == Verdict.HEALTHY
