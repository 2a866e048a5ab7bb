"""Property tests: sysfs parsers and hardware checks never raise on odd input."""

from __future__ import annotations

from pathlib import Path

from hw_checks import HARDWARE_CHECKS as CHECKS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclinic.checks import run_checks
from gpuclinic.facts.gpu import GpuFacts, NvLinkFacts, PciDevice
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import pci


@given(st.text(max_size=200))
def test_parse_speed_width_never_raise(s: str) -> None:
    v = pci.parse_speed(s)
    assert v is None or v >= 0
    w = pci.parse_width(s)
    assert w is None or 0 < w <= 32


@given(st.text(max_size=2000))
def test_parse_aer_never_raises(s: str) -> None:
    assert all(isinstance(v, int) for v in pci.parse_aer(s).values())


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_read_devices_survives_garbage_files(tmp_path: Path, junk: bytes) -> None:
    d = tmp_path / "devices" / "0000:3b:00.0"
    d.mkdir(parents=True, exist_ok=True)
    (d / "vendor").write_text("0x10de\n")
    (d / "class").write_text("0x030200\n")
    for name in ("current_link_speed", "max_link_width", "numa_node", "aer_dev_correctable", "aer_dev_fatal"):
        (d / name).write_bytes(junk)
    devs = pci.read_devices(tmp_path / "devices")
    assert len(devs) == 1 and devs[0].bus_id == "0000:3b:00.0"


opt_f = st.none() | st.floats(min_value=-1e6, max_value=1e9, allow_nan=False)
opt_i = st.none() | st.integers(min_value=-5, max_value=10**9)
opt_b = st.none() | st.booleans()
reasons = st.lists(
    st.sampled_from(
        [
            "idle",
            "sw_power_cap",
            "hw_slowdown",
            "sw_thermal_slowdown",
            "hw_thermal_slowdown",
            "hw_power_brake_slowdown",
            "bit_0x400",
        ]
    ),
    max_size=4,
)


@st.composite
def gpus(draw: st.DrawFn, index: int) -> GpuFacts:
    g = GpuFacts(index=index, pci_bus_id=f"0000:{0x18 + index:02x}:00.0")
    for f in (
        "temperature_c",
        "memory_temperature_c",
        "slowdown_temp_c",
        "shutdown_temp_c",
        "max_operating_temp_c",
        "memory_max_operating_temp_c",
        "power_draw_w",
        "power_limit_w",
        "power_default_limit_w",
        "power_enforced_limit_w",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "utilization_gpu_pct",
    ):
        setattr(g, f, draw(opt_f))
    for f in (
        "ecc_volatile_corrected",
        "ecc_volatile_uncorrected",
        "ecc_aggregate_uncorrected",
        "remapped_rows_uncorrectable",
        "retired_pages_sbe",
        "retired_pages_dbe",
        "pcie_gen",
        "pcie_gen_max",
        "pcie_gen_gpu_max",
        "pcie_width",
        "pcie_width_max",
        "pcie_replay_count",
    ):
        setattr(g, f, draw(opt_i))
    for f in ("remapped_rows_pending", "remapped_rows_failure", "retired_pages_pending", "mig_mode_current"):
        setattr(g, f, draw(opt_b))
    g.clock_event_reasons = draw(reasons)
    g.lost = draw(st.booleans())
    g.lost_reason = draw(st.none() | st.sampled_from(["unresponsive: x", "GPU is lost", "nvidia-smi: ERR!"]))
    g.recovery_action = draw(st.none() | st.sampled_from(["none", "gpu_reset", "drain_p2p", "unknown(9)"]))
    g.nvlinks = [
        NvLinkFacts(link=i, active=draw(opt_b), replay_errors=draw(opt_i), crc_flit_errors=draw(opt_i))
        for i in range(draw(st.integers(0, 3)))
    ]
    g.violation_ns = draw(st.dictionaries(st.sampled_from(["power", "thermal"]), st.integers(0, 10**15)))
    return g


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_checks_never_break_on_odd_facts(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 5))
    snap = Snapshot(
        nvml_available=data.draw(opt_b),
        pci_read=data.draw(st.booleans()),
        expect_gpus=data.draw(st.none() | st.integers(0, 9)),
    )
    snap.gpus = [data.draw(gpus(i)) for i in range(n)]
    snap.pci_devices = [
        PciDevice(
            bus_id="0000:c1:00.0",
            class_code="0x030200",
            driver=data.draw(st.none() | st.sampled_from(["nvidia", "vfio-pci"])),
            aer_fatal={"TOTAL_ERR_FATAL": data.draw(st.integers(0, 3))},
        )
    ]
    findings, skipped = run_checks(snap, only=CHECKS)
    assert not [s for s in skipped if "failed" in s.why], skipped
    for f in findings:
        assert f.code and f.title and f.evidence and f.remedy
