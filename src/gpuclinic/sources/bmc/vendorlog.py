"""Vendor BMC event logs saved as text, one event per line: what people paste from HPE iLO and Supermicro.

* HPE iLO Integrated Management Log as the iLO REST tools print it (``ilorest``'s IML dump and its
  example scripts): ``<Severity>: Class N / Code M:  <message>``.  iLO marks many serious entries "OK",
  so the event is judged by its message, as for every other BMC log.
* Supermicro BMC web "Health Event Log" rows: ``<event text> - Assertion`` / ``- Deassertion``, with or
  without the ID/time/sensor columns before it.
* Dell OpenManage Server Administrator events in syslog: ``<time> <host> Server Administrator:
  Instrumentation Service EventID: 1354  Power supply detected a failure  Sensor location: PS 2 ...``
  (the events the iDRAC also logs, as OMSA forwards them to the OS log).

The messages are classified by the room signatures (``room_signatures.json``), like ipmitool SEL records.
"""

from __future__ import annotations

import re

from gpuclinic.facts import room as R
from gpuclinic.knowledge.room import classify_event

_IML = re.compile(
    r"^\s*(?P<sev>OK|Informational|Repaired|Caution|Warning|Critical|Degraded)\s*:\s*"
    r"Class (?P<cls>\d+) / Code (?P<code>\d+):\s+(?P<msg>\S.*?)\s*$"
)
_SMC = re.compile(r"^\s*(?P<msg>\S.*?)\s+-\s+(?P<state>Assertion|Deassertion)\s*$")
_OMSA = re.compile(
    r"^(?:(?P<time>[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d)\s+\S+\s+)?Server Administrator:\s*"
    r"(?P<svc>[\w ]+?) EventID: (?P<id>\d+)\s+(?P<msg>\S.*?)\s*$"
)
_OMSA_SENSOR = re.compile(r"\s{2}Sensor location: (?P<sensor>.+?)(?:\s{2}|$)")


def claims(text: str) -> bool:
    if "Class " not in text and "ssertion" not in text and "EventID: " not in text:  # each line holds one
        return False
    return any(_IML.match(ln) or _SMC.match(ln) or _OMSA.match(ln) for ln in text.splitlines()[:400])


def parse(text: str) -> R.RoomFacts:
    room = R.RoomFacts(events_read=True)
    sources: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _IML.match(line)
        if m:
            ev = R.BmcEvent(
                id=str(n),
                sensor_type=f"IML class {m.group('cls')} code {m.group('code')}",
                description=m.group("msg"),
                severity=m.group("sev"),
                source="HPE iLO IML",
            )
        elif s := _SMC.match(line):
            ev = R.BmcEvent(
                id=str(n),
                description=s.group("msg"),
                asserted=s.group("state") == "Assertion",
                source="Supermicro BMC event log",
            )
        elif o := _OMSA.match(line):
            sensor = _OMSA_SENSOR.search(o.group("msg"))
            ev = R.BmcEvent(
                id=f"{n}:{o.group('id')}",
                time=o.group("time"),
                sensor_type=o.group("svc"),
                sensor=sensor.group("sensor") if sensor else None,
                description=o.group("msg"),
                asserted="returned to a normal value" not in o.group("msg"),
                source="Dell OpenManage Server Administrator",
            )
        else:
            continue
        ec = classify_event(None, None, ev.description)
        ev.kind = ec.kind if ec else None
        room.events.append(ev)
        if ev.source not in sources:
            sources.append(ev.source)
    for s_ in sources:
        room.add_source(s_)
    return room
