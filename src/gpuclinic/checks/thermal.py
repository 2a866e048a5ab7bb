"""Heat: temperature against the GPU's own thresholds, and thermal clock slowdowns.

The GPU reports where it starts slowing down (SLOWDOWN), where it may drop below base clock
(GPU_MAX), where HBM starts software slowdown (MEM_MAX) and where it shuts down; those beat any
fixed number, which is only the fallback for GPUs that report none.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic.checks import check
from gpuclinic.checks._hw import fmt_c, fmt_mhz, load_line, readable, ref, threshold
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import severity
from gpuclinic.model import Family, Finding, Severity


@check("thermal.slowdown", codes=["thermal.slowdown"], what="GPU and HBM temperatures")
def thermal_slowdown(snap: Snapshot) -> Iterable[Finding]:
    out = []
    for g in readable(snap):
        f = gpu_temperature(g)
        if f:
            out.append(f)
        f = hbm_temperature(g)
        if f:
            out.append(f)
    return out


def gpu_temperature(g: GpuFacts, margin_c: float | None = None) -> Finding | None:
    """The GPU-temperature rule (doctor and watch): critical at slowdown, warning near it."""
    t = g.temperature_c
    if t is None:
        return None
    margin = margin_c if margin_c is not None else threshold("temp_slowdown_margin_c")
    thresholds = (
        f"thresholds: slowdown {fmt_c(g.slowdown_temp_c)}, max operating {fmt_c(g.max_operating_temp_c)}, "
        f"shutdown {fmt_c(g.shutdown_temp_c)} (the GPU's own, from NVML)"
    )
    sev: Severity | None = None
    why = ""
    if g.slowdown_temp_c is not None and t >= g.slowdown_temp_c:
        sev, why = severity("thermal.slowdown"), "at or above its hardware slowdown temperature"
        if g.shutdown_temp_c is not None:
            why += f", {g.shutdown_temp_c - t:.0f} °C below shutdown"
    elif g.slowdown_temp_c is None and g.shutdown_temp_c is not None and t >= g.shutdown_temp_c - margin:
        sev, why = severity("thermal.slowdown"), f"within {margin:.0f} °C of its shutdown temperature"
    elif g.max_operating_temp_c is not None and t >= g.max_operating_temp_c:
        sev, why = (
            severity("thermal.slowdown", "above_max_operating"),
            "above its max operating temperature (clocks may drop below base)",
        )
    elif g.slowdown_temp_c is not None and t >= g.slowdown_temp_c - margin:
        sev, why = (
            severity("thermal.slowdown", "near_limit"),
            f"within {margin:.0f} °C of its slowdown temperature",
        )
    elif (  # a max operating limit well under slowdown (a laptop platform's 57 °C under a 97 °C slowdown)
        g.max_operating_temp_c is not None  # is where the GPU holds its clocks down: near it, it throttles
        and t >= g.max_operating_temp_c - margin
        and (
            g.slowdown_temp_c is None
            or g.slowdown_temp_c - g.max_operating_temp_c >= threshold("temp_max_operating_gap_c")
        )
    ):
        sev, why = (
            severity("thermal.slowdown", "near_limit"),
            f"within {margin:.0f} °C of its max operating temperature (clocks start dropping there)",
        )
    elif g.slowdown_temp_c is None and g.max_operating_temp_c is None:
        crit, warn = threshold("temp_fallback_critical_c"), threshold("temp_fallback_warn_c")
        thresholds = f"GPU reports no thresholds; generic limits warn {warn:.0f} °C, critical {crit:.0f} °C"
        if t >= crit:
            sev, why = severity("thermal.slowdown"), "above the generic critical temperature"
        elif t >= warn:
            sev, why = severity("thermal.slowdown", "near_limit"), "above the generic warning temperature"
    if sev is None:
        return None
    return Finding(
        code="thermal.slowdown",
        severity=sev,
        family=Family.HEAT,
        title=f"GPU {g.index} at {t:.0f} °C is {why}",
        evidence=[
            f"temperature.gpu = {t:.0f} °C",
            thresholds,
            f"clocks.sm = {fmt_mhz(g.sm_clock_mhz)} of {fmt_mhz(g.sm_clock_max_mhz)}",
            load_line(g),
        ],
        gpu=ref(g),
        source="nvml",
        data={
            "sensor": "gpu",
            "temperature_c": t,
            "slowdown_c": g.slowdown_temp_c,
            "shutdown_c": g.shutdown_temp_c,
        },
    )


def hbm_temperature(g: GpuFacts) -> Finding | None:
    """The HBM-temperature rule (doctor and watch)."""
    t = g.memory_temperature_c
    if t is None:
        return None
    mx = g.memory_max_operating_temp_c
    if mx is not None:
        margin = threshold("hbm_temp_margin_c")
        crit, warn = mx, mx - margin
        src = f"memory max operating {mx:.0f} °C (the GPU's own; software slowdown starts there)"
    else:
        crit, warn = threshold("hbm_fallback_critical_c"), threshold("hbm_fallback_warn_c")
        src = f"GPU reports no HBM limit; generic warn {warn:.0f} °C, critical {crit:.0f} °C"
    if t < warn:
        return None
    sev = severity("thermal.slowdown") if t >= crit else severity("thermal.slowdown", "near_limit")
    return Finding(
        code="thermal.slowdown",
        severity=sev,
        family=Family.HEAT,
        title=f"GPU {g.index} HBM memory at {t:.0f} °C is "
        + ("at/over its limit" if sev == Severity.CRITICAL else "close to its limit"),
        evidence=[f"temperature.memory = {t:.0f} °C", src, load_line(g)],
        gpu=ref(g),
        source="nvml",
        data={"sensor": "hbm", "temperature_c": t, "limit_c": crit},
    )


_THERMAL_REASONS = {
    "hw_thermal_slowdown": "HW thermal slowdown",
    "sw_thermal_slowdown": "SW thermal slowdown",
}


@check("thermal.throttle", codes=["thermal.throttle"], what="thermal clock slowdown")
def thermal_throttle(snap: Snapshot) -> Iterable[Finding]:
    out = []
    for g in readable(snap):
        active = [r for r in g.clock_event_reasons if r in _THERMAL_REASONS]
        viol_ns = g.violation_ns.get("thermal") or 0
        if not active:
            continue
        hw_active = "hw_thermal_slowdown" in active
        sev = severity("thermal.throttle") if hw_active else severity("thermal.throttle", "software")
        ev = [
            f"clocks_event_reasons.active = {', '.join(g.clock_event_reasons)}"
            + (f" (0x{g.clock_event_reasons_mask:x})" if g.clock_event_reasons_mask is not None else ""),
            f"clocks.sm = {fmt_mhz(g.sm_clock_mhz)} of max {fmt_mhz(g.sm_clock_max_mhz)}",
            f"temperature.gpu = {fmt_c(g.temperature_c)} (slowdown {fmt_c(g.slowdown_temp_c)}), "
            f"temperature.memory = {fmt_c(g.memory_temperature_c)} (max "
            f"{fmt_c(g.memory_max_operating_temp_c)})",
        ]
        if viol_ns:
            ev.append(f"thermal violation time = {viol_ns / 1e9:.1f} s since the driver loaded")
        ev.append(load_line(g))
        hw = "hardware" if hw_active else "software"
        out.append(
            Finding(
                code="thermal.throttle",
                severity=sev,
                family=Family.HEAT,
                title=f"GPU {g.index} is cutting its clocks because it is too hot ({hw} thermal slowdown)",
                evidence=ev,
                gpu=ref(g),
                source="nvml",
                data={"reasons": active, "thermal_violation_ns": viol_ns},
            )
        )
    return out
