"""dcgm-exporter ``/metrics`` pasted as evidence: DCGM field samples become the GPU facts of the field
schema (``knowledge/data/gpu_fields.json``), so the same checks judge them as they judge ``nvidia-smi -q``.
Before, a scrape was "not recognised" by doctor and NO KNOWN CAUSE (exit 0) in explain, whatever it held."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import dcgm_metrics
from gpuclinic.sources.evidence import load_evidence, snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"
LBL = 'UUID="GPU-aaa",device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'


def _line(name: str, gpu: int, value: str, extra: str = "") -> str:
    return f'{name}{{gpu="{gpu}",{LBL.format(i=gpu).replace("aaa", "a" * 3 + str(gpu))}{extra}}} {value}'


def _codes(text: str) -> dict[str, str]:
    report = diagnose(snapshot_from_text(text, "scrape"))
    return {f.code: f.severity.name.lower() for f in report.findings}


def test_samples_fill_the_schema_facts_and_blanks_are_no_reading() -> None:
    dump, used = dcgm_metrics.parse(enumerate([
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        _line("DCGM_FI_DEV_GPU_TEMP", 0, "41", ',DCGM_FI_DRIVER_VERSION="550.54.15"'),
        _line("DCGM_FI_DEV_MEMORY_TEMP", 0, "9223372036854775794"),  # DCGM_INT64_NOT_SUPPORTED
        _line("DCGM_FI_DEV_FB_USED", 0, "1057"),
        _line("DCGM_FI_DEV_POWER_USAGE", 0, "23.528000"),
        _line("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0, "0.5"),
        "node_cpu_seconds_total{cpu=\"0\"} 1",
    ], start=1))
    (g,) = dump.gpus
    assert (g.index, g.uuid, g.name, g.temperature_c) == (0, "GPU-aaa0", "NVIDIA H100 80GB HBM3", 41.0)
    assert g.memory_temperature_c is None
    assert g.memory_used_bytes == 1057 * 1024**2
    assert dump.driver_version == "550.54.15"
    assert used == {1, 2, 3, 4}  # power usage and the profiling metric are not fields the checks read


def test_memory_faults_in_a_scrape_drain_their_gpus() -> None:
    text = "\n".join([
        "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter",
        _line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0, "4"),
        _line("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1, "1"),
        _line("DCGM_FI_DEV_RETIRED_PENDING", 2, "1"),
        _line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 3, "0"),
    ]) + "\n"
    codes = _codes(text)
    assert codes["memory.ecc_uncorrectable"] == "critical"
    assert codes["memory.row_remap_failed"] == "critical"
    assert "memory.retired_pages_pending" in codes
    healthy = _line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 3, "0") + "\n"
    assert not [c for c, s in _codes(healthy).items() if s in ("warning", "critical")]


def test_throttle_mask_and_clock_event_counts_are_the_nvml_reasons() -> None:
    brake = _line("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0, "136") + "\n"  # HW slowdown + power brake
    assert "power.brake" in _codes(brake)
    idle = _line("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 0, "1") + "\n"
    assert not [c for c, s in _codes(idle).items() if s in ("warning", "critical")]
    window = ',clock_event="hw_thermal",window_size_in_ms="300000"'
    counted = _line("DCGM_EXP_CLOCK_EVENTS_COUNT", 0, "1", window)
    assert "thermal.throttle" in _codes(counted + "\n")
    zero = _line("DCGM_EXP_CLOCK_EVENTS_COUNT", 0, "0", ',clock_event="hw_thermal"')
    assert "thermal.throttle" not in _codes(zero + "\n")


def test_real_scrapes_are_read_whole() -> None:
    """dcgm-exporter issue 317 (A30 MIG, every Xid 0) and PR 239 (Xid 42 in the xid label)."""
    for name, want in (
        ("metrics_xid_errors_a30_mig_zero_dcgmexp_317.txt", set()),
        ("metrics_xid42_active_label_t400_dcgmexp_239.txt", {"xid.42"}),
        ("metrics_clock_events_hw_thermal_t400_dcgmexp_261.txt", {"thermal.throttle"}),
    ):
        path = CORPUS / name
        snap = load_evidence([str(path)])
        (rec,) = snap.input_records
        assert rec.unclaimed == 0, (name, rec.unread)
        got = {f.code for f in diagnose(snap).findings if f.severity.name.lower() in ("warning", "critical")}
        assert got == want, name
        explained = {f.code for f in explain_text(path.read_text(), name).findings}
        assert want <= explained, name
