"""Stragglers: one GPU running well below its peers under the same load.

In data-parallel training every step waits for the slowest GPU, so one GPU at 70% clock makes the
whole job run at 70%.  The SM clock is the measure (NCCL spin-waits keep the *waiting* GPUs'
utilisation high, so utilisation does not single out the slow one); power is the fallback when no
clock was read.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic.checks import check
from gpuclinic.checks._hw import (
    THRESHOLDS_SOURCE,
    busy,
    fmt_c,
    fmt_mhz,
    fmt_pct,
    fmt_w,
    median,
    readable,
    ref,
    threshold,
)
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding


@check("perf.straggler", codes=["perf.straggler"], what="GPU stragglers")
def straggler(snap: Snapshot) -> Iterable[Finding]:
    return stragglers(readable(snap))


def stragglers(readable_gpus: Iterable[GpuFacts], clock_ratio: float | None = None) -> list[Finding]:
    """The one straggler rule, on one sample of GPUs NVML could read: doctor's check, and ``watch``
    (which adds only how long it must hold, ``straggler_minutes``, and a site's ``clock_ratio``)."""
    gpus = [g for g in readable_gpus if busy(g)]
    if len(gpus) < threshold("straggler_min_peers"):
        return []
    clk_ratio = clock_ratio or threshold("straggler_clock_ratio")
    pw_ratio = threshold("straggler_power_ratio")
    med_clk = median(g.sm_clock_mhz for g in gpus if g.sm_clock_mhz is not None)
    med_pw = median(g.power_draw_w for g in gpus if g.power_draw_w is not None)
    out = []
    for g in gpus:
        slow_clk = g.sm_clock_mhz is not None and med_clk is not None and g.sm_clock_mhz < med_clk * clk_ratio
        slow_pw = (
            g.sm_clock_mhz is None
            and g.power_draw_w is not None
            and med_pw is not None
            and g.power_draw_w < med_pw * pw_ratio
        )
        if not slow_clk and not slow_pw:
            continue
        if slow_clk:
            assert g.sm_clock_mhz is not None and med_clk is not None
            rel = g.sm_clock_mhz / med_clk
            lead = (
                f"clocks.sm = {fmt_mhz(g.sm_clock_mhz)} vs node median {fmt_mhz(med_clk)} "
                f"({rel:.0%}; flag below {clk_ratio:.0%})"
            )
        else:
            assert g.power_draw_w is not None and med_pw is not None
            rel = g.power_draw_w / med_pw
            lead = (
                f"power.draw = {fmt_w(g.power_draw_w)} vs node median {fmt_w(med_pw)} "
                f"({rel:.0%}; flag below {pw_ratio:.0%})"
            )
        ev = [
            lead,
            f"power.draw = {fmt_w(g.power_draw_w)} (median {fmt_w(med_pw)}), limit "
            f"{fmt_w(g.power_enforced_limit_w or g.power_limit_w)}",
            f"clocks_event_reasons.active = {', '.join(g.clock_event_reasons) or 'none'}",
            f"temperature.gpu = {fmt_c(g.temperature_c)}, utilization.gpu = {fmt_pct(g.utilization_gpu_pct)}",
            f"compared with {len(gpus)} busy GPUs ({THRESHOLDS_SOURCE})",
        ]
        out.append(
            finding(
                "perf.straggler",
                title=f"GPU {g.index} runs at {rel:.0%} of its peers' speed under the same load (straggler)",
                evidence=ev,
                gpu=ref(g),
                source="nvml",
                data={
                    "ratio": round(rel, 3),
                    "sm_clock_mhz": g.sm_clock_mhz,
                    "median_sm_clock_mhz": med_clk,
                    "reasons": list(g.clock_event_reasons),
                },
            )
        )
    return out
