"""Parsers for FreeIPMI's ``ipmi-sensors`` and ``ipmi-sel`` tables.

Both print a header row (``ID | Name | Type | Reading | Units | Event``) whose columns vary with
options (``--output-sensor-state`` adds State, ``--output-sensor-thresholds`` adds six thresholds,
``-v`` adds Event Direction), so parsing goes by the header, never by position.
"""

from __future__ import annotations

import re

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.knowledge.room import classify_event
from gpuclinic.sources.bmc.common import finish, make_sensor, number, unit_of
from gpuclinic.sources.smi_common import first_lines

_THR = {
    "lower nr": "lnr",
    "lower c": "lcr",
    "lower nc": "lnc",
    "upper nc": "unc",
    "upper c": "ucr",
    "upper nr": "unr",
}
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    )
}
_QUOTED = lazyre.compile(r"'([^']*)'")


# ipmimonitoring and ``--comma-separated-output`` spell the columns out ("Record ID", "Sensor Name", ...)
_COLS = {"record id": "id", "sensor name": "name", "sensor type": "type", "sensor state": "state",
         "sensor reading": "reading", "sensor units": "units", "sensor event": "event",
         "sensor event string": "event",
         # FreeIPMI 0.x ipmimonitoring: Record_ID | Sensor Name | Sensor Group | Monitoring Status | ...
         "record_id": "id", "sensor group": "type", "monitoring status": "state"}
# a comma outside single quotes ('Non-redundant:Sufficient Resources from Redundant' has none, but be safe)
_CSV_SPLIT = lazyre.compile(r",(?=(?:[^']*'[^']*')*[^']*$)")
# ``ipmi-sensors --comma-separated-output --no-header-output``: 70,PWR_PSU0,Power Supply,0.00,W,'At or ...'
_CSV_ROW = lazyre.compile(r"^\d+,[^,']+,[^,']+,[^,']*,[^,']*,'")
# the default table pasted without its header row: "281 | PSU 1 Failure | Power Supply | N/A | N/A | 'OK'"
_PIPE_ROW = lazyre.compile(r"^\s*\d+\s*\|[^|']+\|[^|']+\|[^|']*\|[^|']*\|\s*(?:'|N/A\s*$)")
_HEADERLESS = ["id", "name", "type", "reading", "units", "event"]


def _split(line: str, sep: str) -> list[str]:
    return [x.strip() for x in (line.split("|") if sep == "|" else _CSV_SPLIT.split(line))]


def _header(text: str, first: str, need: tuple[str, ...]) -> tuple[int, list[str], str] | None:
    """(line index, column names, separator) of the header row; -1 for headerless CSV sensor rows."""
    if "|" not in text and "," not in text:  # a single column: never ``first`` and ``need`` both
        return None
    head = first_lines(text, 50)  # (not a split of all of a 16 KiB sample)
    for i, line in enumerate(head):
        for sep in ("|", ","):
            if sep not in line:
                continue
            c = [_COLS.get(x.lower(), x.lower()) for x in _split(line, sep)]
            if c and c[0] == first and all(n in c for n in need):
                return i, c, sep
    if first != "id" or "type" not in need:
        return None
    for sep, row in ((",", _CSV_ROW), ("|", _PIPE_ROW)):
        if sum(1 for ln in head if row.match(ln)) >= 2:
            return -1, _HEADERLESS, sep
    return None


def claims_sensors(text: str) -> bool:
    return _header(text, "id", ("name", "type", "reading", "units")) is not None


def claims_sel(text: str) -> bool:
    return (
        _header(text, "id", ("date", "time", "name", "type", "event")) is not None
        and "reading" not in text[:2000].lower()
    )


def _level(state: str | None, events: list[str]) -> str:
    if state:
        s = state.lower()
        return {"nominal": "ok", "warning": "nc", "critical": "cr"}.get(s, "ns")
    text = " ".join(events).lower()
    if "non-recoverable" in text:
        return "nr"
    if "non-critical" in text:
        return "nc"
    if "critical" in text or "failure detected" in text or "input lost" in text:
        return "cr"
    if text in ("ok", ""):
        return "ok" if text else "ns"
    return "ok"


def parse_sensors(text: str, source: str = "ipmi-sensors") -> R.RoomFacts:
    room = R.RoomFacts()
    h = _header(text, "id", ("name", "type", "reading", "units"))
    if h is None:
        return room
    start, cols, sep = h
    for line in text.splitlines()[start + 1 :]:
        c = _split(line, sep)
        if len(c) != len(cols) or not c[0].isdigit():
            continue
        row = dict(zip(cols, c, strict=False))
        if "event" not in row and "'" in row.get("reading", ""):  # 0.x: a discrete sensor's states
            row["event"], row["reading"] = row["reading"], "N/A"
        events = _QUOTED.findall(row.get("event", "")) or ([row["event"]] if row.get("event") else [])
        reading = number(row.get("reading"))
        unit = unit_of(row.get("units")) if row.get("units", "").upper() != "N/A" else None
        thr = {v: n for k, v in _THR.items() if (n := number(row.get(k))) is not None}
        states = [e for e in events if e.upper() != "OK" and "threshold" not in e.lower()]
        if reading is None and row.get("reading", "").upper() == "N/A" and unit is not None:
            status = "ns"
        else:
            status = _level(row.get("state"), events)
        room.sensors.append(
            make_sensor(
                row.get("name", "?"),
                reading,
                unit,
                status,
                source=source,
                states=states,
                thresholds=thr,
                number_=row.get("id"),
                sensor_type=row.get("type"),
            )
        )
    if room.sensors:
        room.add_source(source)
        finish(room, source)
    return room


# FreeIPMI 0.x ``ipmi-sensors``: "7: Ambient Temp (Temperature): 27.00 C (3.00/47.00): [OK]",
# "58: Status (Power Supply): [Presence detected][Power Supply input lost (AC/DC)]"
_OLD_ROW = lazyre.compile(
    r"^\s*(\d+): (.+?) \(([^()]+)\):(?: (NA|[-+]?\d+(?:\.\d+)?)(?: ([^()\[]+?))?"
    r" \((NA|[-+]?[\d.]+)/(NA|[-+]?[\d.]+)\):)? \[(.*)\]\s*$"
)


def claims_sensors_old(text: str) -> bool:
    if "): " not in text[:15360]:  # every row holds it ("58: Status (Power Supply): [...]")
        return False
    return sum(1 for ln in first_lines(text, 60) if _OLD_ROW.match(ln)) >= 3


def parse_sensors_old(text: str, source: str = "ipmi-sensors (FreeIPMI 0.x)") -> R.RoomFacts:
    """Each row: number, name, type, then for threshold sensors the reading, unit and (lower/upper) critical
    thresholds, and the bracketed states; ``[OK]``/``[NA]``/``[Unknown]`` are states too."""
    room = R.RoomFacts()
    for line in text.splitlines():
        m = _OLD_ROW.match(line)
        if not m:
            continue
        num, name, stype, val, unit, low, high, tail = m.groups()
        events = [e.strip() for e in tail.split("][") if e.strip()]
        words = {e.lower() for e in events}
        thr = {k: v for k, t in (("lcr", low), ("ucr", high)) if (v := number(t)) is not None}
        if words <= {"ok"}:
            status = "ok"
        elif words & {"na", "unknown", "unrecognized state"} or not words:
            status = "ns"
        else:
            status = _level(None, events)
        states = [e for e in events if e.lower() not in ("ok", "na", "unknown")]
        room.sensors.append(make_sensor(name, number(val), unit_of(unit) if unit else None, status,
                                        source=source, states=states, thresholds=thr, number_=num,
                                        sensor_type=stype))
    if room.sensors:
        room.add_source(source)
        finish(room, source)
    return room


def _iso(date: str, time: str) -> str | None:
    m = re.match(r"^([A-Za-z]{3})-(\d{1,2})-(\d{4})$", date.strip())
    t = re.match(r"^(\d{2}):(\d{2}):(\d{2})$", time.strip())
    if not m or not t or m.group(1).lower() not in _MONTHS:
        return None
    return f"{m.group(3)}-{_MONTHS[m.group(1).lower()]:02d}-{int(m.group(2)):02d}T{time.strip()}"


def parse_sel(text: str, source: str = "ipmi-sel") -> R.RoomFacts:
    room = R.RoomFacts(events_read=True)
    h = _header(text, "id", ("date", "time", "name", "type", "event"))
    if h is None:
        return room
    start, cols, sep = h
    for line in text.splitlines()[start + 1 :]:
        c = _split(line, sep)
        if len(c) < len(cols) or not c[0].isdigit():
            continue
        row = dict(zip(cols, c, strict=False))
        desc = f" {sep} ".join(c[cols.index("event") :]) if "event" in cols else ""
        direction = row.get("event direction", "")
        ev = R.BmcEvent(
            id=row["id"],
            time=_iso(row.get("date", ""), row.get("time", ""))
            or f"{row.get('date', '')} {row.get('time', '')}".strip()
            or None,
            sensor_type=row.get("type"),
            sensor=row.get("name"),
            description=desc,
            asserted="deassert" not in direction.lower(),
            severity=row.get("state"),
            source=source,
        )
        ec = classify_event(ev.sensor_type, ev.sensor, desc)
        ev.kind = ec.kind if ec else None
        room.events.append(ev)
    room.add_source(source)
    return room
