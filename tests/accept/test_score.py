"""The scorecard's judgement against hand-computed numbers (no GPU, no child process)."""

from __future__ import annotations

import math

import pytest

from gpuclinic.accept.burn import BurnMonitor, score_burn, simulate
from gpuclinic.accept.host import DiskResult, score_disk, score_shm
from gpuclinic.accept.model import BurnSeries, Item
from gpuclinic.accept.score import Measurements, score_gpu_perf, score_matmul, score_pcie
from gpuclinic.accept.simulate import ScenarioBurn, measurements
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.sources.scenarios import load_scenario


def _one(items: list[Item], iid: str, gpu: str) -> Item:
    (it,) = [i for i in items if i.id == iid and i.gpu == gpu]
    return it


def _h100(i: int, **kw: object) -> GpuFacts:
    g = GpuFacts(
        index=i, name="NVIDIA H100 80GB HBM3", pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16
    )
    for k, v in kw.items():
        setattr(g, k, v)
    return g


def test_power_capped_gpu_fails_matmul_against_its_peers() -> None:
    # scenario "straggler": GPU 6 capped at 400 W runs 1365 of 1980 MHz under load.
    snap = load_scenario("straggler")
    m = measurements(snap.gpus)
    # hand: 989.5 TFLOPS (H100 SXM dense bf16) x 0.80 efficiency = 791.6; GPU 6 x 1365/1980 = 545.73
    assert m.matmul[("0", "bf16")] == pytest.approx(791.6)
    assert m.matmul[("6", "bf16")] == pytest.approx(791.6 * 1365 / 1980)
    items = score_matmul(snap.gpus, m)
    bad = _one(items, "gpu.matmul.bf16", "6")
    assert bad.status == "fail"
    assert bad.measured == 545.7 and bad.expected == 791.6  # judged against the peer median
    assert bad.basis == "peer median (8 GPUs)"
    assert "69% of the median of 8 identical GPUs" in bad.why  # 545.73 / 791.6 = 0.689 < 0.85
    assert "55% of H100 SXM dense bf16 peak" in bad.why  # 545.73 / 989.5 = 0.552: a warn on its own
    good = _one(items, "gpu.matmul.bf16", "0")
    assert good.status == "pass" and good.expected == 989.5 and "H100 SXM" in good.basis
    assert "nvidia.com" in good.source
    # every H100 dtype is covered: bf16, fp16, tf32, fp8
    assert {i.id for i in items} == {f"gpu.matmul.{d}" for d in ("bf16", "fp16", "tf32", "fp8")}


def test_peer_comparison_needs_three_gpus_and_catches_a_whole_slow_node_by_spec() -> None:
    gpus = [_h100(0), _h100(1)]
    m = Measurements(matmul={("0", "bf16"): 800.0, ("1", "bf16"): 500.0})
    items = score_matmul(gpus, m)
    # two GPUs cannot outvote each other: only the spec judges; 500 / 989.5 = 50.5% -> warn (< 60%, >= 40%)
    it = _one(items, "gpu.matmul.bf16", "1")
    assert it.status == "warn" and it.expected == 989.5
    m = Measurements(matmul={(str(i), "bf16"): 380.0 for i in range(4)})
    gpus = [_h100(i) for i in range(4)]
    # all four equally slow: peers agree, the spec does not (380 / 989.5 = 38% < 40%)
    assert {i.status for i in score_matmul(gpus, m) if i.id == "gpu.matmul.bf16"} == {"fail"}


def test_x8_link_fails_host_device_bandwidth() -> None:
    snap = load_scenario("pcie-x8-under-load")
    m = measurements(snap.gpus)
    # Gen5 lane: 32 GT/s x 128/130 / 8 = 3.938 GB/s; x16 = 63.0 GB/s per direction; x8 at 80% = 25.2
    lane5 = 32 * 128 / 130 / 8
    assert m.pcie[("6", "h2d")] == pytest.approx(lane5 * 8 * 0.8)
    items = score_pcie(snap.gpus, m)
    for d in ("h2d", "d2h"):
        bad = _one(items, f"gpu.pcie.{d}", "6")
        assert bad.status == "fail"  # 25.2 / 63.0 = 40% < 45%
        assert bad.measured == 25.2 and bad.expected == 63.0
        assert "now Gen5 x8" in bad.why and "Gen5 x16" in bad.basis
        ok = _one(items, f"gpu.pcie.{d}", "0")
        assert ok.status == "pass" and ok.measured == 50.4  # 80% of 63.0


def test_gen3_link_on_a_gen4_gpu_fails_and_a_measured_healthy_link_passes() -> None:
    g = GpuFacts(
        index=0, name="NVIDIA A100-SXM4-80GB", pcie_gen=3, pcie_gen_max=4, pcie_width=16, pcie_width_max=16
    )
    lane4 = 16 * 128 / 130 / 8  # 1.969 GB/s -> x16 = 31.5
    items = score_pcie([g], Measurements(pcie={("0", "h2d"): 12.6, ("0", "d2h"): 26.0}))
    h2d, d2h = _one(items, "gpu.pcie.h2d", "0"), _one(items, "gpu.pcie.d2h", "0")
    assert h2d.expected == round(lane4 * 16, 1) == 31.5
    assert h2d.status == "fail"  # 12.6 / 31.5 = 40%
    assert d2h.status == "pass"  # 26.0 / 31.5 = 83%
    items = score_pcie([g], Measurements(pcie={("0", "h2d"): 17.0}))
    assert _one(items, "gpu.pcie.h2d", "0").status == "warn"  # 17.0 / 31.5 = 54%: between 45% and 60%
    assert _one(items, "gpu.pcie.d2h", "0").status == "skipped"


@pytest.mark.parametrize(
    ("mbs", "status"), [(150.0, "warn"), (199.9, "warn"), (200.0, "pass"), (40.0, "fail"), (2500.0, "pass")]
)
def test_disk_below_200_mbs_warns(mbs: float, status: str) -> None:
    (seq, rnd) = score_disk(DiskResult(seq_mbs=mbs, rand_iops=900.0, tool="fio", note="O_DIRECT"), "/data")
    assert seq.id == "host.disk.seq" and seq.status == status and seq.expected == 200
    assert rnd.measured == 900 and rnd.status == "pass"


def test_small_shm_warns() -> None:
    assert score_shm(64 * 2**20).status == "warn"  # docker's default 64 MB
    assert score_shm(16 * 2**30).status == "pass"
    assert score_shm(None).status == "skipped"


def test_nvlink_down_fails_link_state_and_lowers_peer_bandwidth() -> None:
    snap = load_scenario("nvlink-error")
    m = measurements(snap.gpus)
    items = score_gpu_perf(snap.gpus, m)
    st = _one(items, "gpu.nvlink", "1")
    assert st.status == "fail" and st.measured == "17/18" and "link(s) 3 down" in st.why
    assert _one(items, "gpu.nvlink", "0").status == "pass"
    # pair 0-1 limited by GPU 1's 17 of 18 links: 900 / 2 x 17/18 x 0.85
    assert m.p2p["0-1"][0] == pytest.approx(450 * 17 / 18 * 0.85)
    ar = _one(items, "gpu.allreduce", "all")
    assert ar.expected == round(450 * 17 / 18, 1) and ar.status == "pass"


def test_overheating_gpu_stops_the_burn_after_minutes() -> None:
    snap = load_scenario("overheating")
    gpus = snap.gpus
    sb = ScenarioBurn(gpus)
    mon = BurnMonitor({g.index: str(g.index) for g in gpus}, {str(g.index): g for g in gpus})
    simulate(mon, sb.sample, lambda i, s: None, 300)
    # T(t) = 35 + (91 - 35)(1 - exp(-t/60)) reaches 89 - 2 = 87 C at t = 60 ln(56/4) = 158.3 s;
    # temperatures are kept to 0.1 C, so the 158 s sample (86.97 -> 87.0) already stops it
    assert 60 * math.log(14) == pytest.approx(158.3, abs=0.05)
    assert mon.stopped == "GPU 3 reached 87 C at 158 s, within 2 C of its 89 C slowdown temperature"
    assert len(mon.series["0"].t) == 159  # t = 0..158: the burn stopped there, not at 300 s
    items = score_burn(list(mon.series.values()), 300, mon.stopped, mon.stopped_gpu, False)
    assert _one(items, "burn.temperature", "3").status == "fail"
    t0 = _one(items, "burn.temperature", "0")  # GPU 0 heads for 58 C: peaks at 35 + 23 (1 - e^-158/60)
    assert t0.status == "pass" and t0.measured == pytest.approx(35 + 23 * (1 - math.exp(-158 / 60)), abs=0.05)
    # the same GPU passes a 20 s quick burn: only minutes of load expose it
    mon = BurnMonitor({g.index: str(g.index) for g in gpus}, {str(g.index): g for g in gpus})
    simulate(mon, sb.sample, lambda i, s: None, 20)
    assert mon.stopped is None
    assert (
        _one(score_burn(list(mon.series.values()), 20, None, None, False), "burn.temperature", "3").status
        == "pass"
    )


def test_burn_finds_a_gpu_that_slows_down_late_and_hardware_slowdown() -> None:
    n = 300
    late = BurnSeries(
        gpu="2",
        t=[float(t) for t in range(n)],
        sm_clock_mhz=[*[1980.0] * 200, *[1500.0] * 100],
        temperature_c=[70.0] * n,
        power_w=[690.0] * n,
        reasons=[[]] * 200 + [["hw_slowdown"]] * 100,
        tflops_t=[float(t) for t in range(n)],
        tflops=[790.0] * 200 + [600.0] * 100,
        slowdown_temp_c=89.0,
    )
    steady = BurnSeries(
        gpu="0",
        t=[float(t) for t in range(n)],
        sm_clock_mhz=[1980.0] * n,
        temperature_c=[70.0] * n,
        power_w=[700.0] * n,
        reasons=[["sw_power_cap"]] * n,
        tflops_t=[float(t) for t in range(n)],
        tflops=[790.0] * n,
        slowdown_temp_c=89.0,
    )
    items = score_burn([steady, late], 300, None, None, False)
    # last quarter 1500 MHz vs first quarter 1980: 76% < 85%
    clocks = _one(items, "burn.clocks", "2")
    assert clocks.status == "fail" and clocks.measured == 1500 and clocks.expected == 1980
    thr = _one(items, "burn.throughput", "2")
    assert thr.status == "fail" and "76% of the early throughput" in thr.why  # 600 / 790
    assert _one(items, "burn.throttle", "2").status == "fail"
    ok = _one(items, "burn.throttle", "0")
    assert ok.status == "pass" and "power cap under full load is normal" in ok.why
    assert _one(items, "burn.temperature", "0").status == "pass"
    # warm but not throttling: within 5 C of slowdown warns
    warm = BurnSeries(
        gpu="1",
        t=[0.0, 1.0, 2.0, 3.0],
        temperature_c=[80.0, 84.0, 85.0, 85.5],
        slowdown_temp_c=89.0,
        sm_clock_mhz=[1980.0] * 4,
        reasons=[[]] * 4,
    )
    assert _one(score_burn([warm], 4, None, None, False), "burn.temperature", "1").status == "warn"
    assert {i.status for i in score_burn([warm], 4, None, None, True)} == {"skipped"}  # Ctrl-C


def test_simulated_gpu_throttles_once_it_reaches_slowdown() -> None:
    g = _h100(
        0,
        temperature_c=95.0,
        slowdown_temp_c=89.0,
        sm_clock_mhz=1980.0,
        sm_clock_max_mhz=1980.0,
        utilization_gpu_pct=100.0,
        power_enforced_limit_w=700.0,
        power_default_limit_w=700.0,
    )
    sb = ScenarioBurn([g])
    (cool,) = sb.sample(30)  # 35 + 60 (1 - e^-0.5) = 58.6 C
    assert cool.temperature_c == pytest.approx(58.6, abs=0.05) and cool.sm_clock_mhz == 1980
    assert cool.clock_event_reasons == []
    (hot,) = sb.sample(600)  # 35 + 60 (1 - e^-10) = 95.0 C, past 89
    assert hot.sm_clock_mhz == round(1980 * 0.7) and "hw_thermal_slowdown" in hot.clock_event_reasons
    assert sb.tflops(g, hot) == pytest.approx(989.5 * 0.8 * 0.7, rel=1e-3)
