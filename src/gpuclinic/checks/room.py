"""The server room: inlet air, fans, power supplies, BMC-reported sensor states and the event log.

The cause of a hot or power-starved GPU is usually outside it: warm inlet air, a dead fan, a failed
PSU. These checks read :class:`RoomFacts` (BMC over IPMI/Redfish, hwmon) and join them with the GPUs'
own facts where that tells more (fans at maximum while GPUs are hot; GPU power against PSU capacity;
a SEL PCIe fatal error against XID 79). Thresholds: ``room_thresholds.json``; event classes and their
remedies: ``room_signatures.json``; every other remedy: the runbooks (``runbooks/room.toml``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

from gpuclinic import lazyre
from gpuclinic.checks import CheckSkipped, check
from gpuclinic.checks._hw import busy, median, readable, ref
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.codes import severity as S
from gpuclinic.knowledge.room import SIGNATURES_FILE, class_by_severity, event_class
from gpuclinic.knowledge.room import room_threshold as T
from gpuclinic.model import Family, Finding, GpuRef, Severity

if TYPE_CHECKING:  # annotations; sensor_critical loads it for its sensor kinds, when there are room facts
    from gpuclinic.facts import room as R

_BAD = ("critical", "nonrecoverable")


@cache
def remedy(code: str) -> str:
    """The fix of one BMC event kind (``room.sel.<kind>``, a catalog of its own in room_signatures.json);
    every other room code's remedy is its runbook's first step."""
    return str(load_data(SIGNATURES_FILE)["remedies"][code]["text"])


@check("room.status", codes=["room.status"], what="the server room (BMC: inlet air, fans, power supplies, "
                                                  "events)")
def status(snap: Snapshot) -> Iterable[Finding]:
    """What the BMC says when nothing is wrong too: inlet, fans and PSU states in one line."""
    if snap.room is None:
        if any(s.what.startswith("the BMC") for s in snap.skipped):
            return []  # the source already said why
        raise CheckSkipped("no BMC or hwmon data (give --bmc HOST or --redfish URL, or saved "
                           "ipmitool/Redfish output)")
    room = snap.room
    parts: list[str] = []
    ev: list[str] = []
    inl = [s for s in room.temperatures("inlet") if s.reading is not None]
    if inl:
        parts.append("inlet " + ", ".join(f"{s.reading:g} °C" for s in inl[:3]))
        ev += [_fmt(s) for s in inl[:4]]
    fl = [f for f in room.fans() if not f.absent]
    if fl:
        bad = [f for f in fl if _fan_state(f)[0] is not None]
        rpm = [f.reading for f in fl if f.reading is not None and f.unit == "RPM"]
        rng = f" ({min(rpm):g}-{max(rpm):g} RPM)" if rpm else ""
        parts.append(f"fans {len(fl) - len(bad)} OK" + (f", {len(bad)} not OK" if bad else "") + rng)
        ev += [_fmt(f) for f in fl[:16]]
    if room.psus:
        okp = [p for p in room.psus if p.health == "ok"]
        parts.append(f"PSUs {len(okp)} OK of {len(room.psus)}")
        ev += [_psu_line(p) for p in room.psus[:8]]
    if room.power_consumed_w is not None:
        parts.append(f"drawing {room.power_consumed_w:g} W")
    if room.events_read:
        parts.append(f"{len(room.events)} SEL/log entries")
    if room.components:  # the parts' own Status (checks/bmc_health.py judges those not OK)
        okc = [c for c in room.components if c.health == "ok" and c.rollup in (None, "ok")]
        parts.append(f"parts rated OK {len(okc)} of {len(room.components)}")
    ev.append("read from: " + ", ".join(room.sources) + (f" ({room.bmc})" if room.bmc else ""))
    return [Finding(code="room.status", severity=S("room.status"), family=Family.HEAT,
                    title="Server room: " + ("; ".join(parts) or "no inlet, fan or PSU sensor reported"),
                    evidence=ev, source="bmc",
                    data={"inlet_c": [s.reading for s in inl], "fans": {f.name: f.reading for f in fl},
                          "psus": {p.name: p.health for p in room.psus}, "bmc": room.bmc})]


def _fmt(s: R.RoomSensor) -> str:
    val = "no reading" if s.reading is None else f"{s.reading:g} {s.unit or ''}".strip()
    thr = ", ".join(f"{k} {v:g}" for k, v in s.thresholds.items())
    st = f" [{s.status}]" if s.status else ""
    states = f" ({', '.join(s.states)})" if s.states else ""
    return f"{s.name} = {val}{st}{states}" + (f"; BMC thresholds {thr}" if thr else "") + f" — {s.source}"


def _throttling(snap: Snapshot) -> list[GpuFacts]:
    return [g for g in readable(snap) if any(r in ("hw_thermal_slowdown", "sw_thermal_slowdown")
                                             for r in g.clock_event_reasons)]


def _hot(g: GpuFacts) -> bool:
    if g.temperature_c is None:
        return False
    if g.slowdown_temp_c is not None:
        return g.temperature_c >= g.slowdown_temp_c - T("gpu_hot_margin_c")
    return g.temperature_c >= T("gpu_hot_fallback_c")


# ------------------------------------------------------------------------------------------ inlet

@check("room.inlet", codes=["room.inlet_hot", "room.inlet_cold"], what="inlet air temperature (BMC)")
def inlet(snap: Snapshot) -> Iterable[Finding]:
    room = snap.room
    if room is None:  # only room.status says so: one "could not check" line, not seven
        return []
    sensors = [s for s in room.temperatures("inlet") if s.reading is not None]
    if not sensors:
        raise CheckSkipped("the BMC/hwmon reported no inlet or ambient temperature sensor")
    hot = max(sensors, key=lambda s: s.reading or 0.0)
    cold = min(sensors, key=lambda s: s.reading or 0.0)
    t = hot.reading or 0.0
    ranges = (f"ranges: seed room guidance {T('seed_room_min_c'):g}-{T('seed_room_max_c'):g} °C; ASHRAE "
              "recommended "
              f"{T('ashrae_recommended_min_c'):g}-{T('ashrae_recommended_max_c'):g} °C, A1 allowable "
              f"{T('ashrae_a1_allowable_min_c'):g}-{T('ashrae_a1_allowable_max_c'):g} °C; GPU servers rated "
              "to "
              f"~{T('gpu_server_max_inlet_c'):g} °C (DGX 5-30 °C)")
    out: list[Finding] = []
    sev: Severity | None = None
    why = ""
    throttling = _throttling(snap)
    if t > T("ashrae_a1_allowable_max_c") or hot.level in _BAD:
        sev = S("room.inlet_hot", "above_allowable")
        why = (f"above ASHRAE A1's allowable {T('ashrae_a1_allowable_max_c'):g} °C"
               if t > T("ashrae_a1_allowable_max_c") else "past the BMC's critical threshold")
    elif t > T("gpu_server_max_inlet_c"):
        sev, why = S("room.inlet_hot"), (f"above the ~{T('gpu_server_max_inlet_c'):g} °C GPU servers are "
                                      "rated for")
    elif t > T("ashrae_recommended_max_c"):
        sev, why = S("room.inlet_hot"), f"above ASHRAE's recommended {T('ashrae_recommended_max_c'):g} °C"
    elif t > T("seed_room_max_c"):
        sev = S("room.inlet_hot", "seed_range")
        why = f"above the {T('seed_room_max_c'):g} °C room guidance, inside ASHRAE's recommended range"
    if sev is not None and sev >= Severity.WARNING and throttling:
        sev = S("room.inlet_hot", "gpus_throttling")
        why += f"; {len(throttling)} GPU(s) are cutting clocks for heat"
    if sev is not None:
        ev = [_fmt(hot), ranges]
        ev += [_fmt(s) for s in sensors if s is not hot][:3]
        if throttling:
            ev.append("GPUs in thermal slowdown: "
                      + ", ".join(f"GPU {g.index} ({g.temperature_c:.0f} °C)"
                                  if g.temperature_c is not None else f"GPU {g.index}" for g in throttling))
        lead = "Inlet air too hot" if sev >= Severity.WARNING else "Inlet air warm"
        out.append(Finding(
            code="room.inlet_hot", severity=sev, family=Family.HEAT,
            title=f"{lead}: {hot.name} at {t:g} °C is {why}", evidence=ev, source="bmc",
            data={"inlet_c": t, "sensor": hot.name, "gpus_throttling": [g.index for g in throttling],
                                "symptoms": ["thermal.throttle"] if throttling else []},
        ))
    c = cold.reading or 0.0
    if c < T("ashrae_a1_allowable_min_c"):
        out.append(Finding(
            code="room.inlet_cold", severity=S("room.inlet_cold"), family=Family.HEAT,
            title=f"Inlet air at {c:g} °C ({cold.name}) is below ASHRAE A1's allowable "
                  f"{T('ashrae_a1_allowable_min_c'):g} °C",
            evidence=[_fmt(cold), ranges], source="bmc",
            data={"inlet_c": c},
        ))
    elif c < T("seed_room_min_c"):
        out.append(Finding(
            code="room.inlet_cold", severity=S("room.inlet_cold", "seed_range"), family=Family.HEAT,
            title=f"Inlet air cool: {cold.name} at {c:g} °C is below the {T('seed_room_min_c'):g} °C room "
                  "guidance, inside ASHRAE A1's allowable range",
            evidence=[_fmt(cold), ranges], source="bmc",
            data={"inlet_c": c},
        ))
    return out


# ------------------------------------------------------------------------------------------ fans

@check("room.fans", codes=["room.fan_failed", "room.fans_max"], what="chassis fans (BMC)")
def fans(snap: Snapshot) -> Iterable[Finding]:
    room = snap.room
    if room is None:  # only room.status says so: one "could not check" line, not seven
        return []
    fl = [f for f in room.fans() if not f.absent]
    if not fl and not room.chassis:
        raise CheckSkipped("the BMC/hwmon reported no fan")
    out: list[Finding] = []
    for f in fl:
        sev, why = _fan_state(f)
        if sev is None:
            continue
        out.append(Finding(
            code="room.fan_failed", severity=sev, family=Family.HEAT, title=f"Fan {f.name} {why}",
            evidence=[_fmt(f)], source="bmc",
            data={"fan": f.name, "reading": f.reading, "unit": f.unit},
        ))
    if room.chassis.get("Cooling/Fan Fault", "").lower() == "true" and not out:
        out.append(Finding(code="room.fan_failed", severity=S("room.fan_failed"), family=Family.HEAT,
                           title="The BMC reports a cooling/fan fault", evidence=["chassis status: "
                                                                                  "Cooling/Fan Fault = true"],
                           source="bmc", data={}))
    at_max = [f for f in fl if _at_max(f)]
    hot = [g for g in readable(snap) if _hot(g)]
    working = [f for f in fl if f.reading]
    if at_max and hot and len(at_max) * 2 >= len(working):
        out.append(Finding(
            code="room.fans_max", severity=S("room.fans_max"), family=Family.HEAT,
            title=f"Fans at full speed ({len(at_max)} of {len(working)}) while {len(hot)} GPU(s) are hot: "
                  "cooling capacity, dust or airflow",
            evidence=[_fmt(f) for f in at_max[:4]] + [
                f"GPU {g.index} at {g.temperature_c:.0f} °C (slowdown {g.slowdown_temp_c or '?'} °C)"
                for g in hot[:4]],
            source="bmc",
            data={"fans_at_max": [f.name for f in at_max], "hot_gpus": [g.index for g in hot]},
        ))
    return out


def _fan_state(f: R.RoomSensor) -> tuple[Severity | None, str]:
    if _over_upper(f):  # spinning at (or past) its upper threshold: full speed, not a failed fan
        return None, ""
    if f.level in _BAD:
        return S("room.fan_failed"), ("is past its critical threshold (BMC)" if f.reading
                                      else "has failed (BMC)")
    if f.unit == "RPM" and f.reading is not None:
        if f.reading <= 0 and f.level != "unknown":
            if f.level == "ok":  # the BMC does not alarm on it: an empty fan header, or a stopped fan
                return S("room.fan_failed", "bmc_ok_zero_rpm"), ("reads 0 RPM although the BMC reports it ok "
                                          "(stopped, or not installed)")
            return S("room.fan_failed"), "is at 0 RPM (stopped or failed)"
        lcr = f.thresholds.get("lcr") or f.thresholds.get("lnr")
        if lcr is not None and lcr > 0 and f.reading < lcr:
            return S("room.fan_failed"), (f"is below its lower critical threshold "
                                          f"({f.reading:g} < {lcr:g} RPM)")
        lnc = f.thresholds.get("lnc")
        if lnc is not None and lnc > 0 and f.reading < lnc:
            return S("room.fan_failed", "below_noncritical"), (f"is below its lower non-critical threshold "
                                      f"({f.reading:g} < {lnc:g} RPM)")
    if f.level == "noncritical":
        return S("room.fan_failed", "below_noncritical"), "is past a non-critical threshold (BMC)"
    text = " ".join(f.states).lower()
    if "fail" in text or "fault" in text:
        return S("room.fan_failed"), f"reports {', '.join(f.states)}"
    if re.search(r"fail|fault", f.name, re.I) and ("state asserted" in text or text == "asserted"):
        return S("room.fan_failed"), "fault is asserted (BMC)"
    return None, ""


def _over_upper(f: R.RoomSensor) -> bool:
    """An RPM reading the BMC flags because it is at or above an upper threshold (``nc`` at unc 13300 RPM)."""
    if f.unit != "RPM" or not f.reading:
        return False
    thr = _sane_thresholds(f)
    up = [thr[k] for k in ("unc", "ucr", "unr") if k in thr]
    low = [thr[k] for k in ("lnc", "lcr", "lnr") if k in thr]
    return bool(up) and f.reading >= min(up) and not any(f.reading <= v for v in low)


def _at_max(f: R.RoomSensor) -> bool:
    if f.reading is None:
        return False
    if f.unit == "%":
        return f.reading >= T("fan_max_percent")
    top = f.thresholds.get("unc") or f.thresholds.get("ucr") or f.thresholds.get("unr")
    return bool(f.unit == "RPM" and top and f.reading >= T("fan_max_fraction_of_upper_threshold") * top)


# ------------------------------------------------------------------------------------------ GPU vs peers

@check("room.gpu_peers", codes=["room.gpu_hotter_than_peers"], what="GPU temperature against its peers")
def gpu_hotter_than_peers(snap: Snapshot) -> Iterable[Finding]:
    gpus = [g for g in readable(snap) if g.temperature_c is not None]
    if len(gpus) < T("gpu_peer_min") + 1:
        raise CheckSkipped(f"fewer than {T('gpu_peer_min') + 1:g} GPUs with a temperature")
    out = []
    band = T("gpu_peer_util_band_pct")
    for g in gpus:
        peers = [p for p in gpus if p is not g and busy(p) == busy(g) and (
            g.utilization_gpu_pct is None or p.utilization_gpu_pct is None
            or abs(p.utilization_gpu_pct - g.utilization_gpu_pct) <= band)]
        if len(peers) < T("gpu_peer_min"):
            continue
        med = median(p.temperature_c for p in peers if p.temperature_c is not None)
        if med is None or g.temperature_c is None or g.temperature_c - med < T("gpu_peer_delta_c"):
            continue
        out.append(Finding(
            code="room.gpu_hotter_than_peers", severity=S("room.gpu_hotter_than_peers"), family=Family.HEAT,
            title=f"GPU {g.index} runs {g.temperature_c - med:.0f} °C hotter than its peers at the same load",
            evidence=[f"GPU {g.index}: {g.temperature_c:.0f} °C at "
                      f"{g.utilization_gpu_pct if g.utilization_gpu_pct is not None else '?'}% "
                      f"utilisation; median of {len(peers)} peers {med:.0f} °C",
                      "peers: " + ", ".join(f"GPU {p.index} {p.temperature_c:.0f} °C" for p in peers[:7])],
            gpu=ref(g), source="nvml",
            data={"temperature_c": g.temperature_c, "peer_median_c": med},
        ))
    if len(out) > max(1, len(gpus) // 4):
        # many GPUs hot together: the air or the fans, not one card's heatsink (room.inlet_hot/fans)
        return []
    return out


# ------------------------------------------------------------------------------------------ power supplies

@check("room.psu", codes=["room.psu_failed", "room.psu_input", "room.psu_absent", "room.psu_redundancy"],
       what="power supplies (BMC)")
def psus(snap: Snapshot) -> Iterable[Finding]:
    room = snap.room
    if room is None:  # only room.status says so: one "could not check" line, not seven
        return []
    if not room.psus and not room.redundancy and not room.chassis:
        raise CheckSkipped("the BMC reported no power supply")
    out: list[Finding] = []
    present = [p for p in room.psus if p.present is not False]
    volts = [p.input_voltage for p in present if p.input_voltage]
    for p in room.psus:
        ev = [_psu_line(p)]
        if p.present is False:
            if present:
                out.append(_pf("room.psu_absent", S("room.psu_absent"), f"Power supply {p.name} is absent",
                               ev, p.name))
            continue
        if p.failed or (p.health == "critical" and not p.input_lost):
            out.append(_pf("room.psu_failed", S("room.psu_failed"), f"Power supply {p.name} has failed", ev,
                           p.name))
        elif p.input_lost or (p.input_voltage == 0 and volts):
            out.append(_pf("room.psu_input", S("room.psu_input"), f"Power supply {p.name} has lost its input "
                                                                "power (AC lost)", ev,
                           p.name))
        elif p.input_out_of_range or _voltage_bad(p.input_voltage):
            out.append(_pf("room.psu_input", S("room.psu_input", "out_of_range"),
                           f"Power supply {p.name} input voltage is out of range" + (
                               f" ({p.input_voltage:g} V)" if p.input_voltage else ""),
                           [*ev, f"expected {T('psu_input_low_v'):g}-{T('psu_input_gap_low_v'):g} V (low "
                                 "line) or "
                                 f"{T('psu_input_gap_high_v'):g}-{T('psu_input_high_v'):g} V (high line)"],
                           p.name))
        elif p.predictive_failure or p.health == "warning":
            out.append(_pf("room.psu_failed", S("room.psu_failed", "predictive"),
                           f"Power supply {p.name} predicts failure or is degraded", ev, p.name))
    for name, state in room.redundancy.items():
        s = state.lower()
        # "Non-Redundant: Sufficient from Redundant" (IPMI 0x0B offset 0x03): it was redundant and is no
        # longer
        if any(x in s for x in ("lost", "insufficient", "degraded", "warning", "critical", "sufficient from "
                                                                                           "redundant")) \
                and "fully redundant" not in s:
            insufficient = "insufficient" in s or "critical" in s
            sev = S("room.psu_redundancy", "insufficient") if insufficient else S("room.psu_redundancy")
            out.append(_pf("room.psu_redundancy", sev, f"Redundancy lost: {name} reports {state}",
                           [f"{name}: {state}"]))
    for key in ("Main Power Fault", "Power Overload", "Power Control Fault"):
        if room.chassis.get(key, "").lower() == "true":
            out.append(_pf("room.psu_failed", S("room.psu_failed"), f"The BMC reports {key.lower()}",
                           [f"chassis status: {key} = true"]))
    return out


def _voltage_bad(v: float | None) -> bool:
    if not v:
        return False
    return (v < T("psu_input_low_v") or v > T("psu_input_high_v")
            or T("psu_input_gap_low_v") < v < T("psu_input_gap_high_v"))


def _psu_line(p: R.PowerSupply) -> str:
    parts = [f"{p.name}: health {p.health or '?'}", f"state {p.state or '?'}"]
    if p.input_voltage is not None:
        parts.append(f"input {p.input_voltage:g} V")
    if p.capacity_w:
        parts.append(f"capacity {p.capacity_w:g} W")
    return ", ".join(parts) + f" — {p.source}"


def _pf(code: str, sev: Severity, title: str, ev: list[str], psu: str | None = None) -> Finding:
    return Finding(code=code, severity=sev, family=Family.PCIE_POWER, title=title, evidence=ev,
                   source="bmc", data={"psu": psu} if psu else {})


@check("room.power_capacity", codes=["room.power_capacity"], what="GPU power draw against PSU capacity")
def power_capacity(snap: Snapshot) -> Iterable[Finding]:
    room = snap.room
    if room is None:  # only room.status says so: one "could not check" line, not seven
        return []
    good = [p for p in room.psus
            if p.present is not False and not p.failed and not p.input_lost and p.capacity_w]
    total = sum(p.capacity_w or 0.0 for p in good)
    degraded = any(p.failed or p.input_lost for p in room.psus)
    if room.power_capacity_w and (not total or (room.power_capacity_w > total and not degraded)):
        total = room.power_capacity_w  # the BMC's own figure for the subsystem (PowerSubsystem/PowerControl)
    if not total:
        raise CheckSkipped("the BMC reported no PSU capacity")
    gpu_w = sum(g.power_draw_w or 0.0 for g in readable(snap))
    system_w = room.power_consumed_w or sum(p.input_w or 0.0 for p in room.psus) or 0.0
    load = max(gpu_w, system_w)
    if not load:
        raise CheckSkipped("no power reading from the BMC or the GPUs")
    n1 = total - max((p.capacity_w or 0.0) for p in good) if len(good) >= 2 else total
    ev = [f"draw: system {system_w:g} W (BMC), GPUs {gpu_w:g} W (NVML)",
          f"capacity: {total:g} W from {len(good)} working PSU(s); {n1:g} W if one more fails"]
    if load > T("power_capacity_critical_fraction") * total:
        sev = S("room.power_capacity", "over_capacity")
        title = f"Power draw {load:g} W exceeds what the working PSUs deliver ({total:g} W)"
    elif len(good) >= 2 and load > T("power_capacity_warn_fraction") * n1:
        sev, title = S("room.power_capacity"), (f"Power draw {load:g} W is over "
                                        f"{T('power_capacity_warn_fraction'):.0%} of the "
                                        f"{n1:g} W left if one PSU fails: redundancy would not carry the "
                                        "load")
    else:
        return []
    return [Finding(code="room.power_capacity", severity=sev, family=Family.PCIE_POWER, title=title,
                    evidence=ev,
                    source="bmc",
                    data={"load_w": load, "capacity_w": total, "capacity_n_minus_1_w": n1})]


# ------------------------------------------------------------------------------------------ any sensor

@check("room.sensors", codes=["room.sensor_critical"], what="BMC sensor states")
def sensor_critical(snap: Snapshot) -> Iterable[Finding]:
    room = snap.room
    if room is None:  # only room.status says so: one "could not check" line, not seven
        return []
    from gpuclinic.facts import room as R

    out = []
    for s in room.sensors:
        if s.kind in (R.FAN, R.PSU) or s.role == "inlet" or s.absent:
            continue
        # board voltage limits in hwmon are often unset/wrong
        if s.source == "hwmon" and s.kind != R.TEMPERATURE:
            continue
        level = s.level
        if level not in _BAD and s.reading is not None:
            thr = _sane_thresholds(s)
            if any(k in thr and s.reading >= thr[k] for k in ("ucr", "unr")) or \
                    any(k in thr and s.reading <= thr[k] for k in ("lcr", "lnr")):
                level = "critical"
        if level in _BAD:
            sev = S("room.sensor_critical")
            word = "non-recoverable" if level == "nonrecoverable" else "critical"
        elif level == "noncritical":
            sev, word = S("room.sensor_critical", "noncritical"), "non-critical"
        else:
            continue
        fam = Family.PCIE_POWER if s.kind in (R.VOLTAGE, R.CURRENT, R.POWER, R.POWER_UNIT) else (
            Family.HEAT if s.kind == R.TEMPERATURE else Family.HOST)
        out.append(Finding(code="room.sensor_critical", severity=sev, family=fam,
                           title=f"{s.name} is past its {word} threshold (BMC)", evidence=[_fmt(s)],
                           source="bmc",
                           data={"sensor": s.name, "level": level}))
    return out


def _sane_thresholds(s: R.RoomSensor) -> dict[str, float]:
    """Thresholds worth comparing against: BMCs and hwmon chips print 0 for "not set" (HPE iLO PSU
    temperatures, drivetemp) and 127 °C as a sentinel; a lower limit at or above an upper one is junk too."""
    thr = {k: v for k, v in s.thresholds.items() if v > 0 and not (s.unit == "C" and v >= 127)}
    uppers = [thr[k] for k in ("unc", "ucr", "unr") if k in thr]
    if uppers:
        thr = {k: v for k, v in thr.items() if not (k.startswith("l") and v >= min(uppers))}
    return thr


# ------------------------------------------------------------------------------------------ SEL

_FAMILY = {"pcie_fatal": Family.PCIE_POWER, "pcie_degraded": Family.PCIE_POWER,
           "memory_uncorrectable": Family.HOST,
           "memory_correctable": Family.HOST, "cpu_ierr": Family.HOST, "sel_full": Family.HOST,
           "mce_logged": Family.HOST, "cpu_thermal_throttle": Family.HEAT,
           "bmc_critical": Family.HOST, "chassis_intrusion": Family.HOST,
           "thermal_trip": Family.HEAT, "temperature_critical": Family.HEAT,
           "temperature_warning": Family.HEAT, "fan_critical": Family.HEAT}


def _when(s: str | None) -> dt.datetime | None:
    if not s:
        return None
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None) if t.tzinfo else t


_BUS = lazyre.compile(r"bus\s*(?:#|number)?\s*(0x[0-9a-f]+|[0-9a-f]{2}h|\d+)", re.I)


def _bus_of(text: str) -> int | None:
    m = _BUS.search(text)
    if not m:
        return None
    v = m.group(1).lower()
    return int(v[:-1], 16) if v.endswith("h") else int(v, 0)


def _xid79(snap: Snapshot) -> list[tuple[str | None, str]]:
    return [(k.pci_bus_id, k.line) for k in snap.kernel_events if k.xid == 79 or k.kind == "fallen_off_bus"]


@check("room.sel", codes=["room.sel.*"], what="the BMC event log (SEL)")
def sel_events(snap: Snapshot) -> Iterable[Finding]:
    room = snap.room
    if room is None:  # only room.status says so: one "could not check" line, not seven
        return []
    if not room.events_read and not room.events:  # events without a log: discrete sensor states (sdr)
        raise CheckSkipped("no SEL or Redfish event log was read")
    from gpuclinic.facts import room as R
    times = [t for e in room.events if (t := _when(e.time))]
    now = _when(snap.taken_at) or (max(times) if times else None)
    window = dt.timedelta(hours=T("sel_window_hours"))
    cleared = _cleared(room.events)
    groups: dict[str, list[R.BmcEvent]] = {}
    for e in room.events:
        kind = e.kind or ((ec := class_by_severity(e.severity)) and ec.kind)
        if kind and e.asserted:
            groups.setdefault(kind, []).append(e)
    out = []
    for kind, evs in groups.items():
        ec = event_class(kind)
        if ec is None or any(k in groups for k in ec.explained_by):
            continue  # (another kind in the same log says what this one was)
        recent = [e for e in evs if now is None or (t := _when(e.time)) is None or now - t <= window]
        open_ = [e for e in recent if (e.sensor, e.description) not in cleared]
        code = f"room.sel.{kind}"
        sev = S(code, "not_in_window")  # older than the window, or deasserted since
        old = [e for e in evs if (e.sensor, e.description) not in cleared and e not in open_]
        if open_:  # the event class's own severity (room_signatures.json)
            sev = {"critical": Severity.CRITICAL, "info": Severity.INFO}.get(ec.severity, Severity.WARNING)
        elif old and ec.severity == "critical" and not snap.taken_at:
            # a saved log whose reading time is unknown (the window ends at its newest entry): a critical
            # fault in it, never cleared, is not history yet
            sev = S(code, "critical_never_cleared_time_unknown")
        last = evs[-1]
        lines = [f"{e.sensor} asserts {e.description} — {e.source}" if e.source.endswith(R.STATE_SOURCE) else
                 f"SEL {e.id} {e.time or '?'}: {e.sensor_type or ''} {e.sensor or ''} | {e.description}"
                 + ("" if e.asserted else " (deasserted)") for e in evs[-5:]]
        now_only = all(e.source.endswith(R.STATE_SOURCE) for e in evs)
        window_note = f"{len(open_)} in the last {T('sel_window_hours'):g} h"
        note = ("asserted now" if now_only else window_note if open_ else
                f"older than {T('sel_window_hours'):g} h, never deasserted" if sev > Severity.INFO else
                "older than the window or deasserted since")
        gpu: GpuRef | None = None
        data: dict[str, object] = {"kind": kind, "count": len(evs), "recent": len(open_)}
        where = ("Host hardware log" if all(e.source.startswith("host: ") for e in evs) else
                 "BMC sensor state" if now_only else "BMC event log")
        title = f"{where}: {last.description or kind} ({len(evs)}×, {note})"
        if kind == "pcie_fatal":
            gpu, xid_lines = _pcie_gpu(snap, evs)
            if xid_lines:
                lines += xid_lines
                data["symptoms"] = ["xid.79"]
                title = ("PCIe fatal error logged by the BMC, and a GPU fell off the bus (XID 79): "
                         "one slot fault")
                sev = S(code, "with_gpu_off_bus")
        out.append(Finding(code=code, severity=sev, family=_FAMILY.get(kind, Family.PCIE_POWER),
                           title=title, evidence=lines, remedy=remedy(f"room.sel.{kind}"), gpu=gpu,
                           source="bmc",
                           data=data))
    return out


def _cleared(events: list[R.BmcEvent]) -> set[tuple[str | None, str]]:
    """(sensor, description) whose latest record is a deassertion: by time when every record of it has
    one (Redfish lists newest first), else in the log's order (a fan that went low again after its
    deassertion is low now)."""
    last: dict[tuple[str | None, str], list[tuple[dt.datetime | None, int, bool]]] = {}
    for i, e in enumerate(events):
        last.setdefault((e.sensor, e.description), []).append((_when(e.time), i, e.asserted))
    out = set()
    for key, recs in last.items():
        if all(t is not None for t, _, _ in recs):
            recs = sorted(recs, key=lambda r: (r[0], r[1]))
        if not recs[-1][2]:
            out.add(key)
    return out


def _pcie_gpu(snap: Snapshot, evs: list[R.BmcEvent]) -> tuple[GpuRef | None, list[str]]:
    """The GPU an XID 79 names, when the SEL's bus number (if any) agrees with it."""
    xids = _xid79(snap)
    if not xids:
        return None, []
    buses = {b for e in evs if (b := _bus_of(e.description)) is not None}
    for bus_id, line in xids:
        if bus_id and buses and int(bus_id.split(":")[1], 16) not in buses:
            continue
        g = snap.gpu_by_bus_id(bus_id) if bus_id else None
        gref = ref(g) if g else (GpuRef(pci_bus_id=bus_id) if bus_id else None)
        same = "same bus as the SEL entry" if buses else "the SEL entry names no bus; same window"
        return gref, [f"kernel: {line.strip()[:200]} ({same})"]
    return None, []
