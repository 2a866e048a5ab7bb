"""Hardware checks at their thresholds: one step below stays quiet, the threshold itself fires."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hw_checks import HARDWARE_CHECKS as MY_CHECKS

from gpuclinic.checks import load_all, run_checks
from gpuclinic.facts.gpu import GpuFacts, PciDevice
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import ContainerFacts
from gpuclinic.knowledge.runbooks import first_step, get
from gpuclinic.model import Finding, Severity
from gpuclinic.sources.scenarios import load_scenario


def node(
    edit: Callable[[GpuFacts], None] | None = None,
    idx: int = 3,
    all_gpus: Callable[[GpuFacts], None] | None = None,
) -> Snapshot:
    snap = load_scenario("healthy-8xh100-load")
    if all_gpus:
        for g in snap.gpus:
            all_gpus(g)
    if edit:
        edit(snap.gpus[idx])
    return snap


def findings(snap: Snapshot, code_prefix: str = "") -> list[Finding]:
    fs, skipped = run_checks(snap, only=MY_CHECKS)
    assert not [s for s in skipped if "failed" in s.why], skipped
    return [f for f in fs if f.code.startswith(code_prefix)]


def one(snap: Snapshot, code: str) -> Finding:
    fs = findings(snap, code)
    assert len(fs) == 1, [(f.code, f.severity, f.title) for f in fs]
    return fs[0]


def none(snap: Snapshot, code: str) -> None:
    fs = findings(snap, code)
    assert fs == [], [(f.code, f.severity, f.title) for f in fs]


def setter(**kw: object) -> Callable[[GpuFacts], None]:
    def f(g: GpuFacts) -> None:
        for k, v in kw.items():
            setattr(g, k, v)

    return f


def test_all_my_checks_registered() -> None:
    assert set(MY_CHECKS) <= set(load_all())


def test_healthy_node_is_silent() -> None:
    assert findings(node()) == []


# -- thermal ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("temp", "sev"),
    [
        (83, None),
        (84, Severity.WARNING),
        (87, Severity.WARNING),
        (88.9, Severity.WARNING),
        (89, Severity.CRITICAL),
        (95, Severity.CRITICAL),
    ],
)
def test_gpu_temperature_against_its_own_slowdown(temp: float, sev: Severity | None) -> None:
    snap = node(setter(temperature_c=temp))
    if sev is None:
        none(snap, "thermal.slowdown")
    else:
        f = one(snap, "thermal.slowdown")
        assert f.severity == sev and f.gpu and f.gpu.index == 3
        assert f"temperature.gpu = {temp:.0f} °C" in f.evidence[0] and "slowdown 89 °C" in f.evidence[1]


def test_own_threshold_beats_generic_numbers() -> None:
    # A GPU whose slowdown is 100 C is fine at 90; a generic 85 C rule would cry wolf.
    snap = node(
        setter(temperature_c=90, slowdown_temp_c=100.0, max_operating_temp_c=98.0, shutdown_temp_c=105.0)
    )
    none(snap, "thermal.slowdown")


@pytest.mark.parametrize(("temp", "sev"), [(84, None), (85, Severity.WARNING), (95, Severity.CRITICAL)])
def test_generic_fallback_without_thresholds(temp: float, sev: Severity | None) -> None:
    snap = node(
        setter(temperature_c=temp, slowdown_temp_c=None, max_operating_temp_c=None, shutdown_temp_c=None)
    )
    fs = findings(snap, "thermal.slowdown")
    assert [f.severity for f in fs] == ([] if sev is None else [sev])


@pytest.mark.parametrize(("temp", "sev"), [(89, None), (90, Severity.WARNING), (95, Severity.CRITICAL)])
def test_hbm_temperature_against_mem_max(temp: float, sev: Severity | None) -> None:
    snap = node(setter(memory_temperature_c=temp))
    fs = findings(snap, "thermal.slowdown")
    assert [f.severity for f in fs] == ([] if sev is None else [sev])
    if fs:
        assert fs[0].data["sensor"] == "hbm" and "memory max operating 95 °C" in fs[0].evidence[1]


@pytest.mark.parametrize(
    ("reasons", "sev"),
    [
        (["sw_thermal_slowdown"], Severity.WARNING),
        (["hw_thermal_slowdown"], Severity.CRITICAL),
        (["idle"], None),
        (["sw_power_cap"], None),
        ([], None),
    ],
)
def test_thermal_throttle_reasons(reasons: list[str], sev: Severity | None) -> None:
    snap = node(setter(clock_event_reasons=reasons, violation_ns={"thermal": 2_500_000_000}))
    fs = findings(snap, "thermal.throttle")
    assert [f.severity for f in fs] == ([] if sev is None else [sev])
    if fs:
        assert "thermal violation time = 2.5 s" in "\n".join(fs[0].evidence)


# -- memory ----------------------------------------------------------------------------------------


def test_volatile_dbe_is_critical_aggregate_only_warning() -> None:
    none(node(setter(ecc_volatile_uncorrected=0, ecc_aggregate_uncorrected=0)), "memory.ecc_uncorrectable")
    f = one(node(setter(ecc_volatile_uncorrected=1, ecc_aggregate_uncorrected=4)), "memory.ecc_uncorrectable")
    assert f.severity == Severity.CRITICAL and f.evidence[0].startswith(
        "ecc.errors.uncorrected.volatile.total = 1"
    )
    f = one(node(setter(ecc_volatile_uncorrected=0, ecc_aggregate_uncorrected=3)), "memory.ecc_uncorrectable")
    assert f.severity == Severity.WARNING and f.data == {"volatile": 0, "aggregate": 3}


@pytest.mark.parametrize(("count", "fires"), [(999, False), (1000, True)])
def test_corrected_errors_absolute_threshold(count: int, fires: bool) -> None:
    snap = node(all_gpus=setter(ecc_volatile_corrected=count))
    assert len(findings(snap, "memory.ecc_correctable_rate")) == (8 if fires else 0)


@pytest.mark.parametrize(("count", "fires"), [(99, False), (100, True)])
def test_corrected_errors_peer_outlier(count: int, fires: bool) -> None:
    snap = node(setter(ecc_volatile_corrected=count))
    fs = findings(snap, "memory.ecc_correctable_rate")
    assert len(fs) == (1 if fires else 0)
    if fs:
        assert fs[0].severity == Severity.WARNING and "node median" in fs[0].evidence[1]


def test_row_remap_pending_failed_and_spares() -> None:
    f = one(node(setter(remapped_rows_pending=True, remapped_rows_correctable=1)), "memory.row_remap")
    assert (f.code, f.severity) == ("memory.row_remap_pending", Severity.WARNING)
    assert f.remedy == first_step(f.code, f.gpu) and "-i 3" in f.remedy  # the GPU's own index in the command
    f = one(node(setter(remapped_rows_pending=True, remapped_rows_failure=True)), "memory.row_remap")
    assert (f.code, f.severity) == ("memory.row_remap_failed", Severity.CRITICAL)
    rb = get(f.code)
    assert f.remedy == first_step(f.code, f.gpu) and rb is not None and "RMA" in rb.title
    none(node(setter(remapped_rows_uncorrectable=459)), "memory.row_remap")
    f = one(node(setter(remapped_rows_uncorrectable=460)), "memory.row_remap")
    assert (f.code, f.severity) == ("memory.row_remap_spares_low", Severity.WARNING)


def test_retired_pages_thresholds() -> None:
    f = one(
        node(setter(retired_pages_pending=True, retired_pages_sbe=1, retired_pages_dbe=0)), "memory.retired"
    )
    assert (f.code, f.severity) == ("memory.retired_pages_pending", Severity.WARNING)
    none(node(setter(retired_pages_sbe=47, retired_pages_dbe=15)), "memory.retired")
    assert (
        one(node(setter(retired_pages_sbe=48, retired_pages_dbe=15)), "memory.retired").code
        == "memory.retired_pages"
    )
    assert (
        one(node(setter(retired_pages_sbe=0, retired_pages_dbe=16)), "memory.retired").severity
        == Severity.CRITICAL
    )


def test_memory_kernel_evidence_only_memory_xids() -> None:
    from gpuclinic.facts.kernel import KernelEvent

    snap = load_scenario("uncorrectable-ecc")
    snap.kernel_events.insert(
        0,
        KernelEvent(
            kind="xid",
            xid=13,
            pci_bus_id="0000:3a:00.0",
            line="NVRM: Xid (PCI:0000:3a:00): 13, Graphics Exception",
        ),
    )
    f = next(x for x in findings(snap, "memory.ecc_uncorrectable"))
    lines = [e for e in f.evidence if e.startswith("kernel:")]
    assert len(lines) == 2 and any("): 94," in x for x in lines) and not any("): 13," in x for x in lines)


# -- power -----------------------------------------------------------------------------------------


def test_power_brake() -> None:
    f = one(node(setter(clock_event_reasons=["hw_slowdown", "hw_power_brake_slowdown"])), "power.brake")
    assert f.severity == Severity.CRITICAL and "ipmitool" in f.remedy
    f = one(node(setter(clock_event_reasons=["hw_slowdown"])), "power.brake")
    assert f.severity == Severity.WARNING and "not thermal" in f.evidence[1]
    none(node(setter(clock_event_reasons=["hw_slowdown", "hw_thermal_slowdown"])), "power.brake")
    none(node(setter(clock_event_reasons=["hw_slowdown"], temperature_c=90)), "power.brake")


@pytest.mark.parametrize(
    ("limit", "util", "sev"), [(665.0, 98, None), (664.0, 98, Severity.WARNING), (664.0, 0, Severity.INFO)]
)
def test_lowered_power_limit(limit: float, util: float, sev: Severity | None) -> None:
    snap = node(
        setter(power_enforced_limit_w=limit, power_limit_w=limit, utilization_gpu_pct=util, processes=[])
    )
    fs = findings(snap, "power.cap")
    assert [f.severity for f in fs] == ([] if sev is None else [sev])
    if fs:
        assert fs[0].remedy == first_step("power.cap", fs[0].gpu) and fs[0].data["default_w"] == 700.0


def test_power_cap_at_default_limit_is_info_only_when_busy() -> None:
    f = one(node(setter(clock_event_reasons=["sw_power_cap"])), "power.cap")
    assert f.severity == Severity.INFO
    none(node(setter(clock_event_reasons=["sw_power_cap"], utilization_gpu_pct=3, processes=[])), "power.cap")


def test_insufficient_external_power() -> None:
    snap = node(
        lambda g: g.unreadable.update(
            power_draw_w="insufficient external power: a GPU power cable is not connected or a PSU failed"
        )
    )
    assert one(snap, "power.insufficient").severity == Severity.CRITICAL


# -- pcie ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gen", "width", "util", "sev"),
    [
        (5, 16, 98, None),
        (5, 8, 98, Severity.WARNING),
        (4, 16, 98, Severity.WARNING),
        (5, 4, 98, Severity.CRITICAL),
        (3, 16, 98, Severity.CRITICAL),
        (1, 16, 0, Severity.INFO),
        (5, 8, 0, Severity.WARNING),
        (2, 8, 0, Severity.WARNING),
    ],
)
def test_link_degraded_busy_vs_idle(gen: int, width: int, util: float, sev: Severity | None) -> None:
    snap = node(
        setter(pcie_gen=gen, pcie_width=width, utilization_gpu_pct=util, processes=[] if util == 0 else None)
    )
    if util == 0:
        snap.gpus[3].processes = []
    fs = findings(snap, "pcie.link_degraded")
    assert [f.severity for f in fs] == ([] if sev is None else [sev])
    if fs:
        assert fs[0].data["busy"] is (util > 0)
        assert (
            fs[0]
            .evidence[0]
            .startswith(f"pcie.link.gen.current = {gen} (max 5), pcie.link.width.current = x{width}")
        )


@pytest.mark.parametrize(
    ("pstate", "width", "sev"),
    [("P8", 16, Severity.INFO), ("P2", 16, Severity.CRITICAL), ("P8", 8, Severity.CRITICAL)],
)
def test_lower_gen_in_a_low_power_pstate_is_power_saving(pstate: str, width: int, sev: Severity) -> None:
    # a desktop RTX 4090 at P8 with a 34% utilisation sample and its link at Gen1 (Diffusion-Benchmark
    # README); a narrow link is never explained by the P-state
    snap = node(setter(pcie_gen=1, pcie_width=width, utilization_gpu_pct=34, performance_state=pstate))
    fs = findings(snap, "pcie.link_degraded")
    assert {f.severity for f in fs} == {sev}
    assert all(f.data.get("busy", False) is (sev == Severity.CRITICAL) for f in fs if f.gpu is not None)


def test_platform_limited_link_is_info() -> None:
    f = one(node(setter(pcie_gen=4, pcie_gen_max=4, pcie_gen_gpu_max=5)), "pcie.link_degraded")
    assert f.severity == Severity.INFO and f.data["reason"] == "platform_limited"


def test_idle_node_gives_one_grouped_info() -> None:
    f = one(load_scenario("idle-pcie-downclock"), "pcie.link_degraded")
    assert f.severity == Severity.INFO and f.gpu is None and f.data["gpus"] == list(range(8))
    assert f.evidence[0].startswith("GPU 0, 1, 2, 3, 4, 5, 6, 7: ")


@pytest.mark.parametrize(("n", "fires"), [(99, False), (100, True)])
def test_pcie_replay(n: int, fires: bool) -> None:
    fs = findings(node(setter(pcie_replay_count=n)), "pcie.replay")
    assert len(fs) == (1 if fires else 0)
    if fs:
        assert "Gen5 x16 link: 31 replays per minute" in fs[0].evidence[1]


# -- nvlink ----------------------------------------------------------------------------------------


def test_nvlink_down_and_counters() -> None:
    def down(g: GpuFacts) -> None:
        g.nvlinks[2].active = False

    f = one(node(down), "nvlink.error")
    assert f.severity == Severity.CRITICAL and f.data["down"] == [2] and "17 of 18 active" in f.evidence[0]

    def counters(rep: int, crc: int) -> Callable[[GpuFacts], None]:
        def e(g: GpuFacts) -> None:
            g.nvlinks[7].replay_errors = rep
            g.nvlinks[7].crc_flit_errors = crc

        return e

    none(node(counters(0, 99)), "nvlink.error")
    f = one(node(counters(0, 100)), "nvlink.error")
    assert f.severity == Severity.WARNING and "nvlink 7 error counters: crc flit+data = 100" in f.evidence[0]
    assert one(node(counters(1, 0)), "nvlink.error").severity == Severity.WARNING


def test_nvlink_ignored_in_mig_mode_and_without_links() -> None:
    def mig_down(g: GpuFacts) -> None:
        g.mig_mode_current = True
        g.nvlinks[0].active = False

    none(node(mig_down), "nvlink.error")
    none(node(all_gpus=setter(nvlinks=[])), "nvlink.error")


# -- perf ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("clock", "fires"), [(1683.0, False), (1682.0, True)])
def test_straggler_clock_boundary(clock: float, fires: bool) -> None:
    fs = findings(node(setter(sm_clock_mhz=clock)), "perf.straggler")
    assert len(fs) == (1 if fires else 0)
    if fs:
        assert fs[0].data["median_sm_clock_mhz"] == 1980.0 and "vs node median 1980 MHz" in fs[0].evidence[0]


def test_straggler_needs_peers_and_load() -> None:
    snap = node(setter(sm_clock_mhz=900.0))
    for g in snap.gpus[2:]:
        g.utilization_gpu_pct, g.processes = 0, []
    none(snap, "perf.straggler")  # only 2 busy GPUs: no meaningful median


def test_straggler_power_fallback_without_clocks() -> None:
    snap = node(all_gpus=setter(sm_clock_mhz=None))
    snap.gpus[3].power_draw_w = 400.0
    f = one(snap, "perf.straggler")
    assert "power.draw = 400 W vs node median" in f.evidence[0]


# -- presence --------------------------------------------------------------------------------------


def test_lost_gpu_is_missing_with_pci_and_kernel_evidence() -> None:
    snap = load_scenario("fallen-off-bus")
    f = one(snap, "gpu.missing")
    assert f.severity == Severity.CRITICAL and f.gpu and f.gpu.pci_bus_id == "0000:9a:00.0"
    assert any(e.startswith("PCI: 0000:9a:00.0 still listed") for e in f.evidence)
    assert any("Xid (PCI:0000:9a:00): 79" in e for e in f.evidence)


def test_unresponsive_is_its_own_code() -> None:
    snap = load_scenario("gsp-timeout")
    none(snap, "gpu.missing")
    f = one(snap, "gpu.unresponsive")
    assert f.severity == Severity.CRITICAL and "did not return within 5s" in f.evidence[0]


@pytest.mark.parametrize(
    ("driver", "in_container", "sev", "reason"),
    [
        ("nvidia", False, Severity.CRITICAL, "pci_only"),
        (None, False, Severity.WARNING, "other_driver"),
        ("nouveau", False, Severity.WARNING, "other_driver"),
        ("vfio-pci", False, Severity.INFO, "vfio"),
        ("nvidia", True, Severity.INFO, "not_in_container"),
    ],
)
def test_gpu_on_pci_but_not_in_nvml(
    driver: str | None, in_container: bool, sev: Severity, reason: str
) -> None:
    snap = node()
    snap.pci_devices.append(
        PciDevice(bus_id="0000:c1:00.0", device_id="0x2330", class_code="0x030200", driver=driver)
    )
    if in_container:
        snap.container = ContainerFacts(in_container=True)
    f = one(snap, "gpu.missing")
    assert (f.severity, f.data["reason"]) == (sev, reason) and f.gpu and f.gpu.pci_bus_id == "0000:c1:00.0"


def test_pci_comparison_needs_working_nvml() -> None:
    snap = node()
    snap.nvml_available = False
    snap.pci_devices.append(PciDevice(bus_id="0000:c1:00.0", class_code="0x030200", driver="nvidia"))
    none(snap, "gpu.missing")


@pytest.mark.parametrize(("expect", "fires"), [(8, False), (9, True)])
def test_expect_gpus(expect: int, fires: bool) -> None:
    snap = node()
    snap.expect_gpus = expect
    fs = findings(snap, "gpu.missing")
    assert len(fs) == (1 if fires else 0)
    if fs:
        assert fs[0].gpu is None and fs[0].data == {"usable": 8, "expected": 9}


def test_presence_skipped_without_any_gpu_facts() -> None:
    _, skipped = run_checks(Snapshot(origin="evidence"), only=["gpu.presence"])
    assert skipped and "no GPU readings" in skipped[0].why


@pytest.mark.parametrize(
    ("action", "sev"),
    [
        ("none", None),
        ("drain_p2p", Severity.WARNING),
        ("gpu_reset", Severity.CRITICAL),
        ("node_reboot", Severity.CRITICAL),
        ("unknown(9)", Severity.CRITICAL),
    ],
)
def test_recovery_action(action: str, sev: Severity | None) -> None:
    fs = findings(node(setter(recovery_action=action)), "gpu.recovery_action")
    assert [f.severity for f in fs] == ([] if sev is None else [sev])


def test_reset_required_and_inforom_from_nvml_errors() -> None:
    snap = node(
        lambda g: g.unreadable.update(
            remapped_rows="GPU requires a reset",
            serial="corrupted InfoROM",
            ecc_aggregate_corrected="corrupted InfoROM",
        )
    )
    f = one(snap, "gpu.recovery_action")
    assert f.severity == Severity.CRITICAL and f.data["action"] == "reset_required"
    assert f.remedy == first_step("gpu.recovery_action", f.gpu) and "GPU 3" in f.remedy
    f = one(snap, "gpu.inforom")
    assert f.severity == Severity.WARNING and f.evidence == [
        "NVML_ERROR_CORRUPTED_INFOROM on: ecc_aggregate_corrected, serial"
    ]


# -- sysfs AER counters ----------------------------------------------------------------------------


def _aer(bus: str, **kw: dict[str, int]) -> Snapshot:
    snap = node()
    d = next(x for x in snap.pci_devices if x.bus_id == bus)
    for k, v in kw.items():
        setattr(d, k, v)
    return snap


@pytest.mark.parametrize(("n", "fires"), [(99, False), (100, True)])
def test_aer_corrected_counter(n: int, fires: bool) -> None:
    fs = findings(
        _aer("0000:5d:00.0", aer_corrected={"RxErr": n, "BadTLP": 0, "TOTAL_ERR_COR": n}), "pcie.aer"
    )
    assert len(fs) == (1 if fires else 0)
    if fs:
        assert fs[0].code == "pcie.aer_corrected" and fs[0].severity == Severity.WARNING
        assert fs[0].evidence[0] == f"sysfs 0000:5d:00.0/aer_dev_correctable: TOTAL_ERR_COR = {n} (RxErr {n})"


def test_aer_uncorrected_on_bridge_is_attributed_to_the_gpu_below() -> None:
    snap = _aer("0000:99:00.0", aer_fatal={"SDES": 1, "TOTAL_ERR_FATAL": 1})
    f = one(snap, "pcie.aer")
    assert (f.code, f.severity) == ("pcie.aer_uncorrected", Severity.CRITICAL)
    assert f.gpu and f.gpu.pci_bus_id == "0000:9a:00.0" and "bridge/switch port above it" in f.title
    assert "(SDES 1)" in f.evidence[0]
    snap = _aer("0000:9a:00.0", aer_nonfatal={"CmpltTO": 2, "TOTAL_ERR_NONFATAL": 2})
    assert one(snap, "pcie.aer").severity == Severity.WARNING


def test_aer_counters_defer_to_kernel_log_lines() -> None:
    from gpuclinic.facts.kernel import KernelEvent

    snap = _aer("0000:99:00.0", aer_fatal={"SDES": 1, "TOTAL_ERR_FATAL": 1})
    snap.kernel_events.append(
        KernelEvent(
            kind="aer",
            line="pcieport 0000:99:00.0: AER: ...",
            pci_bus_id="0000:99:00.0",
            detail={"severity": "fatal", "device": "0000:99:00.0"},
        )
    )
    fs, _ = run_checks(snap, only=["pcie.aer_counters"])
    assert fs == []


def test_median_helper() -> None:
    from gpuclinic.checks._hw import median

    assert median([]) is None and median([3.0]) == 3.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5 and median([5.0, 1.0, 3.0]) == 3.0


@pytest.mark.parametrize(
    ("reason", "title"),
    [
        (
            "GPU is lost (NVML_ERROR_GPU_IS_LOST during nvmlDeviceGetName); it has fallen off the bus",
            "fallen off the bus",
        ),
        ("nvidia-smi: Unable to determine the device handle: Unknown Error", "cannot get a handle"),
        ("nvidia-smi printed ERR! for most of the GPU's readings (GPU not responding)", "is not responding"),
    ],
)
def test_lost_gpu_title_says_what_was_seen(reason: str, title: str) -> None:
    f = one(node(setter(lost=True, lost_reason=reason)), "gpu.missing")
    assert title in f.title and f.evidence[0] == reason and f.severity == Severity.CRITICAL


@pytest.mark.parametrize(("temp", "sev"), [(51, None), (52, Severity.WARNING), (56, Severity.WARNING)])
def test_near_a_max_operating_limit_far_under_slowdown(temp: float, sev: Severity | None) -> None:
    """A laptop MX330's platform sets max operating at 57 °C under a 97 °C slowdown (intel/thermal_daemon#300:
    it throttled at 56 °C, idle): near that limit the GPU holds its clocks down.  Where max operating sits
    within the margin of slowdown (an H100's 87 under 89 °C), the slowdown rule alone speaks (above)."""
    snap = node(
        setter(temperature_c=temp, slowdown_temp_c=97.0, max_operating_temp_c=57.0, shutdown_temp_c=102.0)
    )
    fs = findings(snap, "thermal.slowdown")
    assert [f.severity for f in fs] == ([] if sev is None else [sev])
    if fs:
        assert "max operating temperature" in fs[0].title
