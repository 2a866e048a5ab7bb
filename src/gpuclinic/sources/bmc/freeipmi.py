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


def _header(text: str, first: str, need: tuple[str, ...]) -> tuple[int, list[str]] | None:
    if "|" not in text:  # a line without one is a single column: never ``first`` and ``need`` both
        return None
    for i, line in enumerate(text.splitlines()[:50]):
        c = [x.strip().lower() for x in line.split("|")]
        if c and c[0] == first and all(n in c for n in need):
            return i, c
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
    start, cols = h
    for line in text.splitlines()[start + 1 :]:
        c = [x.strip() for x in line.split("|")]
        if len(c) != len(cols) or not c[0].isdigit():
            continue
        row = dict(zip(cols, c, strict=False))
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
    start, cols = h
    for line in text.splitlines()[start + 1 :]:
        c = [x.strip() for x in line.split("|")]
        if len(c) < len(cols) or not c[0].isdigit():
            continue
        row = dict(zip(cols, c, strict=False))
        desc = " | ".join(c[cols.index("event") :]) if "event" in cols else ""
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
