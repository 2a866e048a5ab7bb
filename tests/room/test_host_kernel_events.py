"""Host hardware lines of the kernel log that were "NO KNOWN CAUSE": corrected machine checks, CPU thermal
throttling, and the driver's GPU crash-dump notice.
Real texts: tests/fixtures/realworld/corpus (SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.explain import explain_text
from gpuclinic.model import Family, Severity

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _codes(text: str) -> list[tuple[str, Severity]]:
    return [(f.code, f.severity) for f in explain_text(text).findings if f.severity > Severity.INFO]


def test_machine_checks_alone_are_a_host_warning() -> None:
    text = (CORPUS / "host_mce_logged_one_line_repeats_rasdaemon_95.txt").read_text()
    assert _codes(text) == [("room.sel.mce_logged", Severity.WARNING)]


def test_a_machine_check_decoded_as_a_dimm_error_is_that_error_only() -> None:
    """The EDAC line says what the machine check was: one finding, the uncorrected DIMM error."""
    text = (CORPUS / "host_mce_cmci_storm_edac_ue_gpu_node_lwa_117.txt").read_text()
    assert _codes(text) == [("room.sel.memory_uncorrectable", Severity.CRITICAL)]


def test_cpu_thermal_throttling_is_heat() -> None:
    rep = explain_text((CORPUS / "host_cpu_thermal_throttle_and_normal_clr_15.txt").read_text())
    (f,) = [f for f in rep.findings if f.severity > Severity.INFO]
    assert (f.code, f.severity, f.family) == ("room.sel.cpu_thermal_throttle", Severity.WARNING, Family.HEAT)
    assert f.data["count"] == 6  # the six throttled lines, not the `temperature/speed normal` ones


def test_gpu_crash_dump_alone_warns_and_gives_way_to_the_xid_it_follows() -> None:
    alone = "[ 99.1] NVRM: A GPU crash dump has been created. If possible, please run"
    assert _codes(alone) == [("error.nvrm.crash_dump", Severity.WARNING)]
    with_xid = (CORPUS / "xid79_crash_dump_smi_handle_unknown_akash_209.txt").read_text()
    codes = [c for c, _ in _codes(with_xid)]
    assert "xid.79" in codes and "error.nvrm.crash_dump" not in codes
