"""Power: hardware power brake / HW slowdown, power caps while busy, lowered limits, missing power.

SW power cap under heavy load is normal (the GPU runs at its limit); it only matters when the limit
itself was lowered, or when a hardware signal forces the clocks down.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic.checks import check
from gpuclinic.checks._hw import (
    THRESHOLDS_SOURCE,
    busy,
    fmt_c,
    fmt_mhz,
    fmt_w,
    load_line,
    readable,
    ref,
    threshold,
    unreadable_findings,
)
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding, severity
from gpuclinic.model import Family, Finding


def _reasons_line(g: GpuFacts) -> str:
    mask = f" (0x{g.clock_event_reasons_mask:x})" if g.clock_event_reasons_mask is not None else ""
    return f"clocks_event_reasons.active = {', '.join(g.clock_event_reasons) or 'none'}{mask}"


def _power_line(g: GpuFacts) -> str:
    return (
        f"power.draw = {fmt_w(g.power_draw_w)}, enforced limit "
        f"{fmt_w(g.power_enforced_limit_w or g.power_limit_w)}, "
        f"default {fmt_w(g.power_default_limit_w)}"
    )


@check("power.brake", codes=["power.brake"], what="hardware power brake / slowdown")
def power_brake(snap: Snapshot) -> Iterable[Finding]:
    out = []
    for g in readable(snap):
        reasons = set(g.clock_event_reasons)
        viol = g.violation_ns.get("power") or 0
        ev = [
            _reasons_line(g),
            f"clocks.sm = {fmt_mhz(g.sm_clock_mhz)} of max {fmt_mhz(g.sm_clock_max_mhz)}",
            _power_line(g),
        ]
        if viol:
            ev.append(f"power violation time = {viol / 1e9:.1f} s since the driver loaded")
        ev.append(load_line(g))
        if "hw_power_brake_slowdown" in reasons:
            out.append(
                finding(
                    "power.brake",
                    title=f"GPU {g.index} clocks are forced down by the hardware power brake (external power "
                          "signal)",
                    evidence=ev,
                    gpu=ref(g),
                    source="nvml",
                    data={"reason": "hw_power_brake_slowdown"},
                )
            )
            continue
        thermal = "hw_thermal_slowdown" in reasons or (
            g.temperature_c is not None
            and g.slowdown_temp_c is not None
            and g.temperature_c >= g.slowdown_temp_c
        )
        if "hw_slowdown" in reasons and not thermal:
            ev.insert(
                1,
                f"temperature.gpu = {fmt_c(g.temperature_c)} (slowdown {fmt_c(g.slowdown_temp_c)}): not "
                "thermal",
            )
            out.append(
                finding(
                    "power.brake",
                    when="hw_slowdown",
                    title=f"GPU {g.index} is in hardware slowdown that heat does not explain (power delivery "
                          "or external signal)",
                    evidence=ev,
                    gpu=ref(g),
                    source="nvml",
                    data={"reason": "hw_slowdown"},
                )
            )
    return out


@check("power.cap", codes=["power.cap"], what="power limits")
def power_cap(snap: Snapshot) -> Iterable[Finding]:
    out = []
    frac = threshold("power_limit_lowered_fraction")
    for g in readable(snap):
        limit = g.power_enforced_limit_w or g.power_limit_w
        default = g.power_default_limit_w
        capped = "sw_power_cap" in g.clock_event_reasons
        is_busy = busy(g)
        lowered = limit is not None and default is not None and limit < default * frac
        ev = [
            _power_line(g),
            _reasons_line(g),
            f"clocks.sm = {fmt_mhz(g.sm_clock_mhz)} of max {fmt_mhz(g.sm_clock_max_mhz)}",
            load_line(g),
        ]
        if lowered:
            assert limit is not None and default is not None
            sev = severity("power.cap", "lowered_busy") if is_busy else severity("power.cap")
            ev.append(f"limit lowered when enforced < {frac:.0%} of default ({THRESHOLDS_SOURCE})")
            out.append(
                Finding(
                    code="power.cap",
                    severity=sev,
                    family=Family.PCIE_POWER,
                    title=f"GPU {g.index} power limit is {limit:.0f} W, below its default {default:.0f} W"
                    + (" and it is capping clocks under load" if capped and is_busy else ""),
                    evidence=ev,
                    gpu=ref(g),
                    source="nvml",
                    data={"enforced_w": limit, "default_w": default, "sw_power_cap": capped, "busy": is_busy},
                )
            )
        elif capped and is_busy:
            out.append(
                finding(
                    "power.cap",
                    title=f"GPU {g.index} is running at its power limit ({fmt_w(limit)}): normal under heavy "
                          "load",
                    evidence=ev,
                    gpu=ref(g),
                    source="nvml",
                    data={"enforced_w": limit, "sw_power_cap": True, "busy": True},
                )
            )
    return out


@check("power.insufficient", codes=["power.insufficient"], what="GPU external power")
def power_insufficient(snap: Snapshot) -> Iterable[Finding]:
    return unreadable_findings(
        snap, "power.insufficient", "insufficient external power", "NVML_ERROR_INSUFFICIENT_POWER",
        "GPU {index}: NVML reports insufficient external power (power cable or PSU)",
    )
