"""Helpers shared by the BMC/hwmon parsers: units, status levels, sensor kinds, PSUs from sensors."""

from __future__ import annotations

import re
from functools import cache

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.room import SIGNATURES_FILE, classify_event, role_for

_UNITS = {
    "degrees c": "C", "c": "C", "cel": "C", "celsius": "C", "°c": "C",
    "rpm": "RPM", "percent": "%", "%": "%", "volts": "V", "v": "V", "amps": "A", "a": "A",
    "watts": "W", "w": "W",
}
_KIND_BY_UNIT = {"C": R.TEMPERATURE, "RPM": R.FAN, "V": R.VOLTAGE, "A": R.CURRENT, "W": R.POWER}
_LEVELS = {
    "ok": "ok",
    "nominal": "ok",
    "nc": "noncritical",
    "lnc": "noncritical",
    "unc": "noncritical",
    "warning": "noncritical",
    "cr": "critical",
    "lcr": "critical",
    "ucr": "critical",
    "critical": "critical",
    "nr": "nonrecoverable",
    "lnr": "nonrecoverable",
    "unr": "nonrecoverable",
    "ns": "unknown",
    "na": "unknown",
    "n/a": "unknown",
    # ipmitool -v / sensor get spell the state out
    "lower non-critical": "noncritical",
    "upper non-critical": "noncritical",
    "lower critical": "critical",
    "upper critical": "critical",
    "lower non-recoverable": "nonrecoverable",
    "upper non-recoverable": "nonrecoverable",
}
THRESHOLD_NAMES = ("lnr", "lcr", "lnc", "unc", "ucr", "unr")
_NUM_RE = lazyre.compile(r"^[-+]?\d+(?:\.\d+)?")


def unit_of(text: str | None) -> str | None:
    if not text:
        return None
    return _UNITS.get(text.strip().lower(), text.strip() or None)


def level_of(status: str | None) -> str:
    """Normalise a source's status word to ok | noncritical | critical | nonrecoverable | unknown."""
    if not status:
        return "unknown"
    return _LEVELS.get(status.strip().strip("'").lower(), "unknown")


def number(text: str | None) -> float | None:
    if text is None:
        return None
    m = _NUM_RE.match(text.strip())
    return float(m.group(0)) if m else None


@cache
def _entity_kinds() -> dict[str, str]:
    d = load_data(SIGNATURES_FILE)["entity_kinds"]
    return {k: v for k, v in d.items() if k != "source"}


@cache
def psu_offsets() -> tuple[str, ...]:
    return tuple(load_data(SIGNATURES_FILE)["psu_state_offsets"]["names"])


@cache
def presence_offsets() -> tuple[str, ...]:
    return tuple(load_data(SIGNATURES_FILE)["presence_state_offsets"]["names"])


@cache
def sensor_type_names() -> tuple[str, ...]:
    """IPMI sensor type names, longest first (so "Power Supply" wins over "Power")."""
    names = load_data(SIGNATURES_FILE)["ipmi_sensor_types"]["names"]
    return tuple(sorted(names, key=len, reverse=True))


_PSU_NAME = lazyre.compile(r"\bps\s?\d|psu|power ?supply|pws|\bpsu?_?\d", re.I)
_REDUNDANCY = lazyre.compile(r"redund", re.I)
_TEMP_NAME = lazyre.compile(r"temp|tmp", re.I)
_FAN_NAME = lazyre.compile(r"\bfan|\bfan\d|_fan|fan_", re.I)


def kind_of(name: str, unit: str | None, entity: str | None = None, sensor_type: str | None = None) -> str:
    """What a sensor measures, from its unit, IPMI sensor type, entity id or, for discrete ones, its name."""
    if unit in _KIND_BY_UNIT:
        return _KIND_BY_UNIT[unit]
    if unit == "%" and _FAN_NAME.search(name):
        return R.FAN
    st = (sensor_type or "").lower()
    if st.startswith("temperature") or (not st and _TEMP_NAME.search(name)):
        return R.TEMPERATURE
    if st == "fan":
        return R.FAN
    if st.startswith("power supply"):
        return R.PSU
    if st.startswith("power unit") or _REDUNDANCY.search(name):
        return R.POWER_UNIT
    ent = (entity or "").split(".")[0].strip()
    ek = _entity_kinds().get(ent)
    if ek == "psu" or _PSU_NAME.search(name):
        return R.PSU
    if ek == "fan" or _FAN_NAME.search(name):
        return R.FAN
    if ek == "power_unit":
        return R.POWER_UNIT
    return R.OTHER


def make_sensor(
    name: str,
    reading: float | None,
    unit: str | None,
    status: str | None,
    *,
    source: str,
    states: list[str] | None = None,
    thresholds: dict[str, float] | None = None,
    number_: str | None = None,
    entity: str | None = None,
    sensor_type: str | None = None,
    context: str | None = None,
) -> R.RoomSensor:
    kind = kind_of(name, unit, entity, sensor_type)
    ent_kind = _entity_kinds().get((entity or "").split(".")[0].strip())
    role = None
    if kind == R.TEMPERATURE:
        role = role_for(name, context) or ("inlet" if ent_kind == "inlet" else None)
    sts = [s for s in (states or []) if s]
    absent = any(s.lower() in ("device absent", "absent", "not present", "entity absent") for s in sts)
    if status and status.lower() in ("ns", "na") and reading is None and kind in (R.FAN, R.PSU) and not sts:
        absent = False  # "no reading": unknown, not proven absent
    return R.RoomSensor(
        name=name.strip(),
        kind=kind,
        reading=reading,
        unit=unit,
        status=status,
        level=level_of(status),
        thresholds=dict(thresholds or {}),
        states=sts,
        role=role,
        number=number_,
        entity=entity,
        absent=absent,
        source=source,
    )


_FAULT_NAME = lazyre.compile(r"fail|fault|\blost\b", re.I)
_INPUT_NAME = lazyre.compile(r"\bin\b|input|\bac\b", re.I)


def psus_from_sensors(sensors: list[R.RoomSensor], source: str) -> list[R.PowerSupply]:
    """IPMI has no PSU object: read one from each PSU status sensor's asserted states.

    Two conventions exist: one sensor per PSU with sensor-specific states ("Presence detected,
    Failure detected"), and one generic digital sensor per fault ("PSU1 IN Failure: State Asserted").
    Dell names every PSU sensor "Status" and tells them apart by entity (10.1, 10.2).
    """
    out: list[R.PowerSupply] = []
    names = [s.name for s in sensors if s.kind == R.PSU and s.unit is None]
    for s in sensors:
        if s.kind != R.PSU or s.unit is not None:
            continue
        text = ", ".join(s.states).lower()
        if s.level == "unknown" and text in ("", "disabled", "no reading", "not readable", "event-only"):
            continue  # an unused or unreadable PSU slot sensor says nothing about a PSU
        if _REDUNDANCY.search(text):
            continue  # HP's "Power Supplies | 10.3 | Non-Redundant: ..." is the redundancy sensor, not a PSU
        name = s.name if names.count(s.name) == 1 else f"{s.name} {s.entity or s.number or ''}".strip()
        if _FAULT_NAME.search(s.name) and ("state asserted" in text or text == "asserted"):
            lost = bool(_INPUT_NAME.search(s.name)) or "lost" in s.name.lower()
            out.append(
                R.PowerSupply(
                    name=name,
                    present=True,
                    health="critical",
                    state=", ".join(s.states),
                    failed=not lost,
                    input_lost=lost,
                    source=source,
                )
            )
            continue
        if _FAULT_NAME.search(s.name) and ("state deasserted" in text or "transition to ok" in text):
            out.append(
                R.PowerSupply(name=name, present=True, health="ok", state=", ".join(s.states), source=source)
            )
            continue
        present = None
        if "presence detected" in text:
            present = True
        elif "absent" in text or "not present" in text:
            present = False
        failed = "failure detected" in text or "failure" in text.replace("predictive failure", "")
        ps = R.PowerSupply(
            name=name,
            present=present,
            state=", ".join(s.states) or None,
            failed=failed,
            predictive_failure="predictive failure" in text,
            input_lost="ac lost" in text and "out-of-range" not in text or "input lost" in text,
            input_out_of_range="out-of-range" in text or "out of range" in text,
            source=source,
        )
        if failed or ps.input_lost or s.level in ("critical", "nonrecoverable"):
            ps.health = "critical"
        elif ps.predictive_failure or ps.input_out_of_range or s.level == "noncritical":
            ps.health = "warning"
        elif present is not False and (present or s.level == "ok"):  # an empty bay is not an OK PSU
            ps.health = "ok"
        out.append(ps)
    return out


def redundancy_from_sensors(sensors: list[R.RoomSensor]) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in sensors:
        if s.states and (
            (s.kind == R.POWER_UNIT and _REDUNDANCY.search(s.name))
            or (s.kind in (R.POWER_UNIT, R.PSU) and _REDUNDANCY.search(", ".join(s.states)))
        ):
            out[s.name] = ", ".join(s.states)
    return out


_SYSTEM_POWER = lazyre.compile(
    r"pwr consumption|power consumption|total[_ ]power|sys[_ ]?power|system power|^power$", re.I
)


def _psu_line_voltage(room: R.RoomFacts, sensors_by_psu: dict[str, str]) -> None:
    """Dell-style PSU input sensors ("Voltage 1 | 6Ch | ok | 10.1 | 230 Volts"): a voltage on a power-supply
    entity (10.x) at mains level (or 0 V) is that PSU's line input."""
    for p in room.psus:
        ent = sensors_by_psu.get(p.name)
        if p.input_voltage is not None or not ent or not ent.startswith("10."):
            continue
        v = next(
            (
                s.reading
                for s in room.sensors
                if s.unit == "V"
                and s.entity == ent
                and s.reading is not None
                and (s.reading >= 50 or s.reading == 0)
            ),
            None,
        )  # 0 V: the feed is gone
        if v is not None:
            p.input_voltage = v


def finish(room: R.RoomFacts, source: str) -> None:
    """Derive PSUs, redundancy states and whole-system power from the sensors just read."""
    if room.power_consumed_w is None:
        room.power_consumed_w = next(
            (
                s.reading
                for s in room.sensors
                if s.unit == "W" and s.reading is not None and _SYSTEM_POWER.search(s.name)
            ),
            None,
        )
    names = {p.name for p in room.psus}
    room.psus.extend(p for p in psus_from_sensors(room.sensors, source) if p.name not in names)
    ents = {s.name: s.entity for s in room.sensors if s.kind == R.PSU and s.entity}
    ents.update({f"{s.name} {s.entity}": s.entity for s in room.sensors if s.kind == R.PSU and s.entity})
    _psu_line_voltage(room, {k: v for k, v in ents.items() if v})
    for k, v in redundancy_from_sensors(room.sensors).items():
        room.redundancy.setdefault(k, v)
    room.events.extend(events_from_states(room.sensors, source))


# a discrete sensor's state that says "nothing is wrong": generic digital sensors named for the fault
# ("MEM CPU1 FAIL | State Deasserted", "CPU0 IERR | Transition to OK") or presence/running states
_CLEAR_STATE = lazyre.compile(
    r"deasserted|transition to (ok|running|idle|active)|^ok$|normal|present|enabled|fully redundant", re.I
)

def events_from_states(sensors: list[R.RoomSensor], source: str) -> list[R.BmcEvent]:
    """Faults a discrete sensor asserts now (HPE ``Memory | 2Bh | ok | 7.7 | Correctable ECC, ...``,
    ``CPU0 IERR | State Asserted``), as the SEL record of the same fault would be classified.

    The sdr line says it with its status still ``ok``; PSU, fan and power-unit sensors are read by their own
    checks (PSUs, redundancy, fans), so only the other sensors are looked at here.
    """
    out: list[R.BmcEvent] = []
    for s in sensors:
        if s.kind != R.OTHER or not s.states:
            continue
        found = [(ec, st) for st in s.states if not _CLEAR_STATE.search(st)
                 if (ec := classify_event(None, s.name, st)) is not None]
        if not found:
            continue
        # one event per sensor, of its worst class ("Correctable ECC, ... logging limit reached": one fault)
        ec = next((e for e, _ in found if e.severity == "critical"), found[0][0])
        out.append(R.BmcEvent(id=f"{s.name} {s.number or ''}".strip(), sensor=s.name,
                              description=", ".join(st for _, st in found), kind=ec.kind,
                              source=source + R.STATE_SOURCE))
    return out
