"""Scenario performance model: what a healthy workload *would* measure on a simulated node.

Why: ``accept --scenario NAME`` must exercise the scorecard logic deterministically without a GPU.
Each number is spec peak x an efficiency (``accept.json`` "simulation") x the degradation the
scenario's NVML facts imply: a power-capped or throttled GPU runs at its clock ratio, a link at x8
moves half the bytes, a link down removes its share of NVLink bandwidth.
"""

from __future__ import annotations

import copy
import math

from gpuclinic.accept.score import Measurements, link_max, nvlink_dir_gbs
from gpuclinic.accept.specs import match_spec, pcie_gbs, sim
from gpuclinic.facts.gpu import GpuFacts

_THERMAL = ("sw_thermal_slowdown", "hw_thermal_slowdown")


def clock_factor(g: GpuFacts) -> float:
    """Share of full speed this GPU runs at under load: its SM clock ratio when the facts show it
    busy, else its enforced power limit against the default one."""
    if g.busy and g.sm_clock_mhz and g.sm_clock_max_mhz:
        return min(1.0, g.sm_clock_mhz / g.sm_clock_max_mhz)
    lim = g.power_enforced_limit_w or g.power_limit_w
    if lim and g.power_default_limit_w:
        return min(1.0, lim / g.power_default_limit_w)
    return 1.0


def loaded_gen(g: GpuFacts) -> int | None:
    """Idle links drop their speed to save power and come back under load; width stays."""
    if not g.busy and g.pcie_gen_max:
        return g.pcie_gen_max
    return g.pcie_gen


def _per_gpu(m: Measurements, g: GpuFacts) -> None:
    """matmul, HBM and PCIe figures of one GPU: its datasheet peaks times the simulated efficiencies."""
    lab = str(g.index)
    spec = match_spec(g.name)
    if spec is None:
        for test in ("matmul", "hbm"):
            m.skips.append(
                {"test": test, "gpu": lab, "why": f"no spec row for {g.name!r} to simulate from"}
            )
    else:
        f = clock_factor(g)
        for dt in spec.dtypes():
            eff = sim("fp8_efficiency") if dt == "fp8" else sim("matmul_efficiency")
            m.matmul[(lab, dt)] = (spec.peak_tflops(dt) or 0) * eff * f
        mem_f = (
            (g.mem_clock_mhz / g.mem_clock_max_mhz) if g.mem_clock_mhz and g.mem_clock_max_mhz else 1.0
        )
        if spec.memory_bandwidth_gbs:
            m.hbm[lab] = spec.memory_bandwidth_gbs * sim("hbm_efficiency") * min(1.0, mem_f)
    bw = pcie_gbs(loaded_gen(g), g.pcie_width or link_max(g, spec)[1])
    if bw:
        for d in ("h2d", "d2h"):
            m.pcie[(lab, d)] = bw * sim("pcie_efficiency")


def measurements(gpus: list[GpuFacts]) -> Measurements:
    m = Measurements()
    usable = [g for g in gpus if not g.lost]
    for g in gpus:
        if g.lost:
            for test in ("matmul", "hbm", "pcie"):
                m.skips.append({"test": test, "gpu": str(g.index), "why": f"GPU lost: {g.lost_reason}"})
    for g in usable:
        _per_gpu(m, g)
    n = len(usable)
    if n >= 2:
        for i in range(n):
            a, b = usable[i], usable[(i + 1) % n]
            nv = [nvlink_dir_gbs(a), nvlink_dir_gbs(b)]
            if all(nv):
                v = min(x for x in nv if x) * sim("nvlink_efficiency")
            else:
                la = pcie_gbs(loaded_gen(a), a.pcie_width)
                lb = pcie_gbs(loaded_gen(b), b.pcie_width)
                v = min(la or 0, lb or 0) * sim("pcie_efficiency")
            m.p2p[f"{a.index}-{b.index}"] = (v, True)
        links = []
        for g in usable:
            nvd = nvlink_dir_gbs(g)
            links.append(nvd if nvd else (pcie_gbs(loaded_gen(g), g.pcie_width) or 0))
        m.allreduce = min(links) * sim("allreduce_efficiency")
        m.allreduce_ndev = n
    else:
        m.skips.append({"test": "p2p", "gpu": None, "why": f"{n} usable GPU(s): peer copies need two"})
        m.skips.append({"test": "allreduce", "gpu": None, "why": f"{n} usable GPU(s): all-reduce needs two"})
    if len(usable) < len(gpus) and n >= 2:
        m.skips.append(
            {"test": "note", "gpu": None, "why": f"{len(gpus) - n} lost GPU(s) left out of peer tests"}
        )
    return m


class ScenarioBurn:
    """NVML samples of a simulated burn: temperature rises toward the scenario's loaded temperature
    (first-order, time constant ``burn_tau_s``); clocks and reasons follow the scenario, and a GPU
    whose loaded temperature reaches its slowdown point throttles once it gets there."""

    def __init__(self, gpus: list[GpuFacts]) -> None:
        self.gpus = [g for g in gpus if not g.lost]
        self.t0 = sim("burn_start_temp_c")
        self.tau = sim("burn_tau_s")

    def temperature(self, g: GpuFacts, t: float) -> float | None:
        if g.temperature_c is None:
            return None
        ss = g.temperature_c
        return round(self.t0 + (ss - self.t0) * (1 - math.exp(-t / self.tau)), 1)

    def sample(self, t: float) -> list[GpuFacts]:
        out = []
        for g in self.gpus:
            s = copy.copy(g)
            s.temperature_c = self.temperature(g, t)
            hot = bool(
                s.temperature_c is not None and g.slowdown_temp_c and s.temperature_c >= g.slowdown_temp_c
            )
            reasons = [r for r in g.clock_event_reasons if r not in _THERMAL and r != "idle"]
            top = g.sm_clock_max_mhz or g.sm_clock_mhz or 0
            if any(r in _THERMAL for r in g.clock_event_reasons):  # slow only because it is hot
                base = (g.sm_clock_mhz or top) if hot else top
            else:
                base = top * clock_factor(g) * (sim("thermal_slowdown_clock_factor") if hot else 1.0)
            if hot:
                reasons += ["sw_thermal_slowdown", "hw_thermal_slowdown"]
            s.sm_clock_mhz = round(base, 0) if base else None
            s.clock_event_reasons = reasons
            s.utilization_gpu_pct = 100.0
            out.append(s)
        return out

    def tflops(self, g: GpuFacts, sample: GpuFacts) -> float | None:
        """Matmul throughput at this sample: the bf16 model scaled by the clock against full speed."""
        spec = match_spec(g.name)
        peak = spec.peak_tflops("bf16") or spec.peak_tflops("fp16") if spec else None
        if not peak or not sample.sm_clock_mhz or not g.sm_clock_max_mhz:
            return None
        return peak * sim("matmul_efficiency") * sample.sm_clock_mhz / g.sm_clock_max_mhz
