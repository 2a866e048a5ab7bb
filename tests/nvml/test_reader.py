"""NvmlReader against the fake NVML: every value path and every error path, call by call."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace

import pynvml
import pytest
from fake_pynvml import FakeGpu, FakeNvml, err

from gpuclinic.collect import CollectOptions
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import nvml
from gpuclinic.sources.nvml import NvmlReader, NvmlUnavailable, decode_reasons

Make = Callable[..., FakeNvml]


def test_reads_every_field_of_a_healthy_h100(install_fake: Make) -> None:
    fake = install_fake(2)
    with NvmlReader() as r:
        gpus, versions = r.read_all()
    assert versions == nvml.Versions("550.54.15", "12.550.54.15", "12.4")
    assert fake.inits == 1 and fake.shutdowns == 1
    g = gpus[1]
    assert g.index == 1
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert g.uuid and g.uuid.startswith("GPU-")
    assert g.pci_bus_id == "0000:2a:00.0"
    assert g.pci_device_id == "0x233010DE"
    assert g.vbios == "96.00.74.00.0D"
    assert (g.architecture, g.compute_capability) == ("Hopper", "9.0")
    assert (g.temperature_c, g.memory_temperature_c) == (61.0, 68.0)
    assert (g.shutdown_temp_c, g.slowdown_temp_c, g.max_operating_temp_c, g.memory_max_operating_temp_c) == (
        92.0, 89.0, 87.0, 95.0)
    assert g.fan_percent is None and "fan_percent" not in g.unreadable  # NotSupported is not news
    assert g.power_draw_w == pytest.approx(655.123)
    assert (g.power_limit_w, g.power_default_limit_w, g.power_enforced_limit_w, g.power_max_limit_w) == (
        700.0, 700.0, 700.0, 700.0)
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.mem_clock_mhz, g.mem_clock_max_mhz) == (
        1980,
        1980,
        2619,
        2619,
    )
    assert g.clock_event_reasons == [] and g.clock_event_reasons_mask == 0
    assert set(g.violation_ns) == {
        "power",
        "thermal",
        "sync_boost",
        "board_limit",
        "low_utilization",
        "reliability",
        "total_app_clocks",
        "total_base_clocks",
    }
    assert g.performance_state == "P0"
    assert (g.utilization_gpu_pct, g.utilization_memory_pct) == (98.0, 61.0)
    assert g.memory_total_bytes == 85_520_809_984
    assert g.ecc_mode_current is True and g.ecc_volatile_uncorrected == 0 and g.ecc_aggregate_corrected == 0
    assert g.remapped_rows_pending is False and g.remapped_rows_failure is False
    assert g.retired_pages_sbe is None  # Hopper: page retirement is not read
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_gen_gpu_max, g.pcie_width, g.pcie_width_max) == (
        5,
        5,
        5,
        16,
        16,
    )
    assert g.pcie_replay_count == 0 and g.pcie_tx_kbps == 1_200_000
    assert len(g.nvlinks) == 18 and all(link.active for link in g.nvlinks)
    assert g.nvlinks[0].remote_pci_bus_id == "0000:05:00.0" and g.nvlinks[0].version == 4
    assert g.persistence_mode is True and g.compute_mode == "Default" and g.mig_mode_current is False
    assert g.recovery_action == "none"
    assert [p.pid for p in g.processes] == [4243] and g.processes[0].kind == "compute"
    assert g.unreadable == {} and g.lost is False


def test_reasons_decoded_with_fallback_to_throttle_api(install_fake: Make) -> None:
    fake = install_fake(1, missing={"nvmlDeviceGetCurrentClocksEventReasons"})
    fake.gpu(0).set("nvmlDeviceGetCurrentClocksThrottleReasons", 0x4 | 0x40)
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.clock_event_reasons == ["sw_power_cap", "hw_thermal_slowdown"]
    assert "clock_event_reasons" not in g.unreadable


def test_reasons_fallback_when_driver_lacks_new_symbol(install_fake: Make) -> None:
    fake = install_fake(1)
    fake.gpu(0).set("nvmlDeviceGetCurrentClocksEventReasons", err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
    fake.gpu(0).set("nvmlDeviceGetCurrentClocksThrottleReasons", 0x80 | 0x8)
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.clock_event_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]


def test_decode_reasons_unknown_bits() -> None:
    assert decode_reasons(0x1 | 0x100 | 0x400) == ["idle", "display_clocks", "bit_0x400"]
    assert decode_reasons(0) == []


@pytest.mark.parametrize(
    ("code", "expect"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found: no NVIDIA driver installed?"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "versions differ"),
        (pynvml.NVML_ERROR_UNKNOWN, "unknown error"),
        (pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML failed to initialise"),
    ],
)
def test_init_errors_give_precise_reasons(install_fake: Make, code: int, expect: str) -> None:
    install_fake(1, init_error=code)
    with pytest.raises(NvmlUnavailable) as ei:
        NvmlReader().open()
    assert str(ei.value).startswith(expect) or expect in str(ei.value)
    snap = Snapshot()
    nvml.collect(snap, CollectOptions())
    assert snap.nvml_available is False and snap.gpus == []
    assert [s.what for s in snap.skipped] == [nvml.WHAT]
    assert expect in snap.skipped[0].why


def test_init_hang_is_time_boxed(install_fake: Make) -> None:
    install_fake(1, init_hang=True)
    t0 = time.monotonic()
    with pytest.raises(NvmlUnavailable, match="unresponsive: nvmlInit did not return within 0.2s"):
        NvmlReader(call_timeout_s=0.2).open()
    assert time.monotonic() - t0 < 2


def test_missing_pynvml_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py is not installed"):
        NvmlReader().open()


def test_count_error(install_fake: Make) -> None:
    install_fake(1, count_error=pynvml.NVML_ERROR_UNKNOWN)
    snap = Snapshot()
    nvml.collect(snap, CollectOptions())
    assert snap.nvml_available is False
    assert "could not count GPUs" in snap.skipped[0].why


def test_gpu_lost_on_handle(install_fake: Make) -> None:
    fake = install_fake(3)
    fake.gpu(1).set("nvmlDeviceGetHandleByIndex", err(pynvml.NVML_ERROR_GPU_IS_LOST))
    with NvmlReader() as r:
        gpus, _ = r.read_all()
    assert [g.lost for g in gpus] == [False, True, False]
    assert "fallen off the bus" in (gpus[1].lost_reason or "")
    assert gpus[2].name == "NVIDIA H100 80GB HBM3"


def test_gpu_lost_mid_read_stops_reading_that_gpu(install_fake: Make) -> None:
    fake = install_fake(2)
    fake.gpu(0).lose_after = 12
    with NvmlReader() as r:
        gpus, _ = r.read_all()
    g = gpus[0]
    assert g.lost and "GPU is lost" in (g.lost_reason or "")
    assert len(fake.gpu(0).calls) == 12  # no call after the loss
    assert g.name is not None and g.processes == []
    assert not gpus[1].lost and gpus[1].processes


def test_gpu_lost_inside_field_values(install_fake: Make) -> None:
    fake = install_fake(1)
    fake.gpu(0).set("nvmlDeviceGetFieldValues", {82: err(pynvml.NVML_ERROR_GPU_IS_LOST), 230: 0})
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.lost and g.memory_temperature_c is None


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
        (pynvml.NVML_ERROR_UNKNOWN, "unknown error"),
        (pynvml.NVML_ERROR_INSUFFICIENT_POWER, "insufficient external power"),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "function not found"),
        (pynvml.NVML_ERROR_CORRUPTED_INFOROM, "InfoROM"),
        (pynvml.NVML_ERROR_RESET_REQUIRED, "requires a reset"),
        (pynvml.NVML_ERROR_TIMEOUT, "timed out"),
        (pynvml.NVML_ERROR_IRQ_ISSUE, "NVML error 11"),
    ],
)
def test_per_call_errors_are_recorded_and_reading_goes_on(install_fake: Make, code: int, needle: str) -> None:
    fake = install_fake(1)
    fake.gpu(0).set("nvmlDeviceGetRemappedRows", err(code))
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert needle.lower() in g.unreadable["remapped_rows"].lower()
    assert g.remapped_rows_pending is None
    assert g.pcie_gen == 5 and g.processes  # later reads still happened


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT]
)
def test_not_supported_noise_is_not_recorded(install_fake: Make, code: int) -> None:
    fake = install_fake(1)
    for f in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetViolationStatus"):
        fake.gpu(0).set(f, err(code))
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.unreadable == {}
    assert g.remapped_rows_pending is None and g.pcie_replay_count is None and g.violation_ns == {}


def test_missing_functions_in_old_binding(install_fake: Make) -> None:
    install_fake(
        1,
        missing={
            "nvmlDeviceGetRemappedRows",
            "nvmlDeviceGetArchitecture",
            "nvmlSystemGetCudaDriverVersion_v2",
            "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        },
    )
    with NvmlReader() as r:
        gpus, versions = r.read_all()
    g = gpus[0]
    assert versions.cuda_driver == "12.4"  # fell back to the v1 call
    assert "not in this nvidia-ml-py" in g.unreadable["remapped_rows"]
    assert g.architecture is None and g.pcie_gen_gpu_max is None
    assert g.pcie_gen == 5


def test_hung_call_marks_gpu_unresponsive_and_others_are_read(install_fake: Make) -> None:
    fake = install_fake(3)
    fake.gpu(1).hang.add("nvmlDeviceGetPowerUsage")
    t0 = time.monotonic()
    with NvmlReader(call_timeout_s=0.3) as r:
        gpus, _ = r.read_all()
    assert time.monotonic() - t0 < 3
    assert gpus[1].lost and (gpus[1].lost_reason or "").startswith("unresponsive: nvmlDeviceGetPowerUsage")
    assert not gpus[0].lost and not gpus[2].lost and gpus[2].power_draw_w is not None
    assert fake.shutdowns == 0  # never shut NVML down under a stuck call


def test_wedged_driver_stops_after_max_hangs(install_fake: Make) -> None:
    fake = install_fake(4)
    for g in fake.gpus:
        g.hang.add("nvmlDeviceGetName")
    t0 = time.monotonic()
    with NvmlReader(call_timeout_s=0.2, max_hangs=2, parallel=False) as r:
        gpus, _ = r.read_all()
        assert time.monotonic() - t0 < 2  # two timeouts, not four
        assert all(g.lost for g in gpus)
        assert "driver wedged" in (gpus[3].lost_reason or "")
        assert fake.gpu(3).calls == []
        calls = [len(g.calls) for g in fake.gpus]
        again = r.sample()  # later samples do not touch the wedged driver either
        assert [len(g.calls) for g in fake.gpus] == calls
    assert all(g.lost and (g.lost_reason or "").startswith("unresponsive") for g in again)
    assert "still hung" in (again[0].lost_reason or "") and "driver wedged" in (again[3].lost_reason or "")


def test_hung_gpu_recovers_when_its_call_returns(install_fake: Make) -> None:
    fake = install_fake(3)
    fake.gpu(1).hang.add("nvmlDeviceGetUtilizationRates")
    with NvmlReader(call_timeout_s=0.2) as r:
        first = r.sample()
        assert first[1].lost and not first[0].lost and not first[2].lost
        second = r.sample()  # still stuck: no new call piles onto it, identity still reported
        assert "still hung" in (second[1].lost_reason or "") and second[1].name == "NVIDIA H100 80GB HBM3"
        assert not second[0].lost and not second[2].lost  # one wedged GPU does not blind the others
        fake.gpu(1).hang.clear()
        fake.release.set()  # the stuck call returns (with an error) and the worker is free again
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and r._stuck_count():
            time.sleep(0.01)
        third = r.sample()
    assert not third[1].lost and third[1].utilization_gpu_pct == 98.0


def test_wedged_driver_in_parallel_costs_one_timeout(install_fake: Make) -> None:
    fake = install_fake(8)
    for g in fake.gpus:
        g.hang.add("nvmlDeviceGetName")
    t0 = time.monotonic()
    with NvmlReader(call_timeout_s=0.3) as r:
        gpus, _ = r.read_all()
    assert time.monotonic() - t0 < 0.3 * 3
    assert all(g.lost and (g.lost_reason or "").startswith("unresponsive") for g in gpus)


def _slow_1000(counter: object) -> int:
    time.sleep(0.1)
    return 1000


def test_gpus_are_read_in_parallel(install_fake: Make) -> None:
    """Slow per-GPU calls (PCIe throughput samples ~20 ms in NVML) overlap across GPUs."""
    fake = install_fake(8)
    for g in fake.gpus:
        g.set("nvmlDeviceGetPcieThroughput", _slow_1000)
    t0 = time.monotonic()
    with NvmlReader() as r:
        gpus, _ = r.read_all()
    assert time.monotonic() - t0 < 0.2 * 8 / 2  # sequential would be >= 1.6 s
    assert [g.index for g in gpus] == list(range(8)) and all(g.pcie_tx_kbps == 1000 for g in gpus)


def test_pre_ampere_reads_retired_pages_not_remaps(install_fake: Make) -> None:
    v100 = FakeGpu(
        0,
        values={
            "nvmlDeviceGetName": "Tesla V100-SXM2-32GB",
            "nvmlDeviceGetArchitecture": 5,
            "nvmlDeviceGetRetiredPages": {0: 3, 1: 1},
            "nvmlDeviceGetRetiredPagesPendingStatus": 1,
            "nvmlDeviceGetRemappedRows": err(pynvml.NVML_ERROR_UNKNOWN),
            "nvmlDeviceGetNvLinkState": err(pynvml.NVML_ERROR_NOT_SUPPORTED),
        },
    )
    install_fake([v100])
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (3, 1, True)
    assert "remapped_rows" not in g.unreadable  # not even asked
    assert g.nvlinks == []


def test_ecc_off_skips_counters(install_fake: Make) -> None:
    fake = install_fake(1)
    fake.gpu(0).set("nvmlDeviceGetEccMode", [0, 1])
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.ecc_mode_current is False and g.ecc_mode_pending is True
    assert "nvmlDeviceGetTotalEccErrors" not in fake.gpu(0).calls


def test_nvlink_inactive_and_errors(install_fake: Make) -> None:
    fake = install_fake(1)
    state = {link: 1 for link in range(18)}
    state[3] = 0
    fake.gpu(0).set("nvmlDeviceGetNvLinkState", state)
    fake.gpu(0).set("nvmlDeviceGetNvLinkErrorCounter", lambda link, c: 7 if (link, c) == (5, 0) else 0)
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.nvlinks[3].active is False and g.nvlinks[3].remote_pci_bus_id is None
    assert g.nvlinks[5].replay_errors == 7 and g.nvlinks[5].crc_flit_errors == 0


def test_recovery_action_and_memory_temp_zero(install_fake: Make) -> None:
    fake = install_fake(1)
    fake.gpu(0).set("nvmlDeviceGetFieldValues", {82: 0, 230: 4})
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.recovery_action == "drain_and_reset"
    assert g.memory_temperature_c is None  # 0 C from a board without an HBM sensor


def test_processes_named_via_psutil(install_fake: Make) -> None:
    import os

    fake = install_fake(1)
    fake.gpu(0).set(
        "nvmlDeviceGetComputeRunningProcesses",
        [
            SimpleNamespace(pid=os.getpid(), usedGpuMemory=1 << 30),
            SimpleNamespace(pid=2**22 + 7, usedGpuMemory=None),
        ],
    )
    fake.gpu(0).set(
        "nvmlDeviceGetGraphicsRunningProcesses", [SimpleNamespace(pid=os.getpid(), usedGpuMemory=5)]
    )
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert [(p.pid, p.kind) for p in g.processes] == [
        (os.getpid(), "compute"),
        (2**22 + 7, "compute"),
        (os.getpid(), "graphics"),
    ]
    assert g.processes[0].name and "python" in g.processes[0].name.lower()
    assert g.processes[1].name is None and g.processes[1].used_memory_bytes is None


def test_sample_is_fast_subset_and_reuses_static_facts(install_fake: Make) -> None:
    fake = install_fake(2)
    with NvmlReader() as r:
        first = r.sample()
        calls_first = len(fake.gpu(0).calls)
        fake.gpu(0).set("nvmlDeviceGetTemperature", 75)
        second = r.sample()
        calls_second = len(fake.gpu(0).calls) - calls_first
    assert second[0].temperature_c == 75 and first[0].temperature_c == 61
    assert second[0].name == "NVIDIA H100 80GB HBM3" and second[0].slowdown_temp_c == 89
    assert "nvmlDeviceGetName" not in fake.gpu(0).calls[calls_first:]
    assert "nvmlDeviceGetPcieThroughput" not in fake.gpu(0).calls  # 20 ms NVML sampling: doctor only
    assert "nvmlDeviceGetNvLinkState" not in fake.gpu(0).calls
    assert calls_second < 30
    assert set(second[0].violation_ns) == {"power", "thermal"}
    assert second[0].ecc_volatile_corrected == 0 and second[0].pcie_replay_count == 0


def test_sample_after_gpu_lost_keeps_reporting_lost(install_fake: Make) -> None:
    fake = install_fake(2)
    with NvmlReader() as r:
        assert not r.sample()[1].lost
        fake.gpu(1).set("nvmlDeviceGetTemperature", err(pynvml.NVML_ERROR_GPU_IS_LOST))
        s = r.sample()
        assert s[1].lost and s[1].name == "NVIDIA H100 80GB HBM3"
        fake.gpu(1).set("nvmlDeviceGetHandleByIndex", err(pynvml.NVML_ERROR_GPU_IS_LOST))
        assert r.sample()[1].lost


def test_collect_fills_snapshot(install_fake: Make) -> None:
    install_fake(8)
    snap = Snapshot()
    nvml.collect(snap, CollectOptions())
    assert snap.nvml_available is True and len(snap.gpus) == 8
    assert (snap.driver_version, snap.nvml_version, snap.cuda_driver_version) == (
        "550.54.15",
        "12.550.54.15",
        "12.4",
    )
    assert snap.skipped == []


def test_collect_with_no_gpus(install_fake: Make) -> None:
    install_fake(0)
    snap = Snapshot()
    nvml.collect(snap, CollectOptions())
    assert snap.nvml_available is True and snap.gpus == []
    assert any("no GPUs" in n for n in snap.notes)


def test_bytes_from_old_bindings_are_decoded(install_fake: Make) -> None:
    fake = install_fake(1, driver=b"470.223.02")
    fake.gpu(0).set("nvmlDeviceGetName", b"Tesla T4").set("nvmlDeviceGetUUID", b"GPU-1")
    with NvmlReader() as r:
        gpus, versions = r.read_all()
    assert versions.driver == "470.223.02" and gpus[0].name == "Tesla T4" and gpus[0].uuid == "GPU-1"


@pytest.mark.parametrize(
    ("code", "lost"),
    [
        (pynvml.NVML_ERROR_UNKNOWN, True),
        (pynvml.NVML_ERROR_NO_PERMISSION, False),
        (pynvml.NVML_ERROR_INSUFFICIENT_POWER, True),
    ],
)
def test_handle_failure(install_fake: Make, code: int, lost: bool) -> None:
    """ "Unable to determine the device handle for GPU ...: Unknown Error" means the GPU is gone."""
    fake = install_fake(2)
    fake.gpu(0).set("nvmlDeviceGetHandleByIndex", err(code))
    with NvmlReader() as r:
        gpus, _ = r.read_all()
    assert gpus[0].lost is lost and "handle" in gpus[0].unreadable
    assert gpus[0].name is None and gpus[1].name is not None
    if lost:
        assert "cannot get a handle" in (gpus[0].lost_reason or "")


def test_temperature_falls_back_to_temperature_v(install_fake: Make) -> None:
    fake = install_fake(1)
    fake.gpu(0).set("nvmlDeviceGetTemperature", err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
    fake.gpu(0).set("nvmlDeviceGetTemperatureV", 77)
    with NvmlReader() as r:
        g = r.read_all()[0][0]
    assert g.temperature_c == 77.0 and "temperature_c" not in g.unreadable
