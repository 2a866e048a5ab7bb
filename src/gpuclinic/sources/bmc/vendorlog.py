"""Vendor BMC event logs saved as text, one event per line: what people paste from HPE iLO and Supermicro.

* HPE iLO Integrated Management Log as the iLO REST tools print it (``ilorest``'s IML dump and its
  example scripts): ``<Severity>: Class N / Code M:  <message>``.  iLO marks many serious entries "OK",
  so the event is judged by its message, as for every other BMC log.
* Supermicro BMC web "Health Event Log" rows: ``<event text> - Assertion`` / ``- Deassertion``, with or
  without the ID/time/sensor columns before it, and the same log as CSV rows
  (``12,2024/07/04 07:09:11,FANA ,Fan,Lower Non-Recoverable - Going Low - Assertion``).
* Dell OpenManage Server Administrator events in syslog: ``<time> <host> Server Administrator:
  Instrumentation Service EventID: 1354  Power supply detected a failure  Sensor location: PS 2 ...``
  (the events the iDRAC also logs, as OMSA forwards them to the OS log).
* The sensor list of check_ipmi_sensor -v (``01-Inlet Ambient = 14.00 (Status: Nominal)``, no unit): the
  temperatures, known by name.
* The SEL summary of the Nagios/Icinga plugin check_ipmi_sensor: ``IPMI Status: Critical [N system event
  log (SEL) entries present - details: (Power Supply PS2 Status = Critical, Power Supply, Power Supply
  Failure detected), ...]`` - one ``(name = state, type, event)`` group per SEL record.

The messages are classified by the room signatures (``room_signatures.json``), like ipmitool SEL records.
"""

from __future__ import annotations

import re

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.knowledge.room import classify_event
from gpuclinic.sources import sniffgates
from gpuclinic.sources.bmc.common import make_sensor

_IML = lazyre.compile(
    r"^\s*(?P<sev>OK|Informational|Repaired|Caution|Warning|Critical|Degraded)\s*:\s*"
    r"Class (?P<cls>\d+) / Code (?P<code>\d+):\s+(?P<msg>\S.*?)\s*$"
)
_SMC = lazyre.compile(r"^\s*(?P<msg>\S.*?)\s+-\s+(?P<state>Assertion|De-?assertion)\s*$")
# the same log saved as CSV rows: ``id,YYYY/MM/DD hh:mm:ss,sensor,type,event - Assertion``
_SMC_CSV = lazyre.compile(
    r"^\s*(?P<id>\d+),(?P<date>\d{4}/\d\d/\d\d) (?P<time>\d\d:\d\d:\d\d),(?P<sensor>[^,]*),(?P<type>[^,]*),"
    r"(?P<msg>\S.*?)\s+-\s+(?P<state>Assertion|De-?assertion)\s*$"
)
_OMSA = lazyre.compile(
    r"^(?:(?P<time>[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d)\s+\S+\s+)?Server Administrator:\s*"
    r"(?P<svc>[\w ]+?) EventID: (?P<id>\d+)\s+(?P<msg>\S.*?)\s*$"
)
_NAGIOS = lazyre.compile(r"^\s*IPMI Status: \w+ \[\d+ system event log \(SEL\) entries present - details: ")
_NAGIOS_REC = lazyre.compile(
    r"\((?P<name>[^=()]+?) = (?P<state>\w+), (?P<type>[^,()]+), (?P<event>[^()]+?)\)"
)
# check_ipmi_sensor -v lists every sensor as ``01-Inlet Ambient = 14.00 (Status: Nominal)``, without a unit:
# only the temperatures are read, known by their names (the inlet is what the room checks need)
_NAGIOS_SENSOR = lazyre.compile(
    r"^\s*(?P<name>[^=|()]{2,60}?) = (?P<val>-?\d+(?:\.\d+)?) \(Status: (?P<status>[A-Za-z ]+)\)\s*$"
)
_TEMP_NAME = lazyre.compile(r"temp|ambient|inlet|exhaust|zone|\bdimm|\bcpu \d|p/s \d|chipset|\bvr\b", re.I)
_KEYS = sniffgates.VENDOR_LOG  # a line of each format holds one
_OMSA_SENSOR = lazyre.compile(r"\s{2}Sensor location: (?P<sensor>.+?)(?:\s{2}|$)")


# each format's line holds its literal: only those lines are tried, with only that format's pattern (a
# training log's "device-side assertion" otherwise ran the Supermicro pattern over every line)
_BY_KEY = (
    (_KEYS[0], _IML), (_KEYS[1], _SMC), (_KEYS[2], _OMSA), (_KEYS[3], _NAGIOS), (_KEYS[4], _NAGIOS_SENSOR)
)


def claims(text: str) -> bool:
    rs = [(k, r) for k, r in _BY_KEY if k in text]
    if not rs:
        return False
    # the lines holding a key, found in the first 400 joined (a find per key, not a test per line and key)
    head = "\n".join(text.splitlines()[:400])
    for k, r in rs:
        i = head.find(k)
        while i >= 0:
            start, end = head.rfind("\n", 0, i) + 1, head.find("\n", i)
            if r.match(head[start:] if end < 0 else head[start:end]):  # (a slice: ^ anchors at pos 0 only)
                return True
            i = -1 if end < 0 else head.find(k, end)
    return False


def parse(text: str) -> R.RoomFacts:
    room = R.RoomFacts()
    sources: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if "(Status: " in line and (t := _NAGIOS_SENSOR.match(line)):
            if _TEMP_NAME.search(t.group("name")) and not re.search(r"fan|volt|\bv\b", t.group("name"), re.I):
                room.sensors.append(make_sensor(t.group("name").strip(), float(t.group("val")), "C",
                                                t.group("status").strip().lower(), source="check_ipmi_sensor",
                                                sensor_type="Temperature"))
                if "check_ipmi_sensor" not in sources:
                    sources.append("check_ipmi_sensor")
            continue
        if _NAGIOS.match(line):
            room.events.extend(_nagios(line, n))
            if "check_ipmi_sensor" not in sources:
                sources.append("check_ipmi_sensor")
            continue
        m = _IML.match(line)
        if m:
            ev = R.BmcEvent(
                id=str(n),
                sensor_type=f"IML class {m.group('cls')} code {m.group('code')}",
                description=m.group("msg"),
                severity=m.group("sev"),
                source="HPE iLO IML",
            )
        elif c := _SMC_CSV.match(line):
            ev = R.BmcEvent(
                id=c.group("id"),
                time=f"{c.group('date').replace('/', '-')}T{c.group('time')}",
                sensor_type=c.group("type").strip() or None,
                sensor=c.group("sensor").strip() or None,
                description=c.group("msg").replace(" - ", " "),  # "Lower Critical - Going Low"
                asserted=c.group("state") == "Assertion",
                source="Supermicro BMC event log",
            )
            ev.kind = _kind(ev.sensor_type, ev.sensor, ev.description)
            room.events.append(ev)
            if ev.source not in sources:
                sources.append(ev.source)
            continue
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
    room.events_read = bool(room.events)  # a sensor listing alone read no event log
    return room


def _kind(sensor_type: str | None, sensor: str | None, description: str) -> str | None:
    ec = classify_event(sensor_type, sensor, description)
    return ec.kind if ec else None


def _nagios(line: str, n: int) -> list[R.BmcEvent]:
    """The ``(name = state, type, event)`` groups of a check_ipmi_sensor SEL summary, one event each."""
    out = []
    for k, g in enumerate(_NAGIOS_REC.finditer(line), 1):
        ev = R.BmcEvent(
            id=f"{n}.{k}",
            sensor_type=g.group("type").strip(),
            sensor=g.group("name").strip(),
            description=g.group("event").strip(),
            severity=g.group("state"),
            source="check_ipmi_sensor",
        )
        ec = classify_event(ev.sensor_type, ev.sensor, ev.description)
        ev.kind = ec.kind if ec else None
        out.append(ev)
    return out
