"""OpenBMC ``log-util --print`` output (Meta/Facebook OpenBMC, e.g. Yosemite): the SEL as the BMC logs it.

Each line is ``FRU  name  YYYY-MM-DD HH:MM:SS  app  message``; the SEL records are the ``ipmid`` lines
``SEL Entry: FRU: 3, Record: <type>, ...``. A standard record names its sensor (``Sensor: NAME (0xNN)``
and the decoded event after ``Event Data: (hex)``); a "Facebook Unified SEL" record names the error
class (``GeneralInfo: x86/PCIeErr(0x20)``) and decoded error ids (``ErrID2: 0x21(Surprise Down Error)``).
Other log-util lines (power-util, sensord) carry no SEL event and are skipped.
"""

from __future__ import annotations

import re

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.knowledge.room import classify_event
from gpuclinic.sources import sniffgates

_LINE = lazyre.compile(
    r"^\s*(?P<fru>\d+)\s+\S+\s+(?P<date>\d{4}-\d{2}-\d{2})\s+(?P<time>\d{2}:\d{2}:\d{2})\s+\S+\s+"
    r"SEL Entry:\s*(?P<rest>.*)$"
)
_SENSOR = lazyre.compile(r"Sensor:\s*(?P<name>[^,(]+?)\s*\(0x[0-9A-Fa-f]+\)")
_DATA = lazyre.compile(r"Event Data:\s*\([0-9A-Fa-f]+\)\s*(?P<desc>.*)$")
_GENERAL = lazyre.compile(r"GeneralInfo:\s*(?P<what>[^,(]+)")


def claims(text: str) -> bool:
    if sniffgates.OPENBMC_LOGUTIL[0] not in text:  # ("SEL Entry:": every _LINE holds it)
        return False
    return sum(1 for ln in text.splitlines()[:400] if _LINE.match(ln)) >= 1


def parse(text: str, source: str = "OpenBMC log-util") -> R.RoomFacts:
    room = R.RoomFacts(events_read=True)
    for n, line in enumerate(text.splitlines(), 1):
        m = _LINE.match(line)
        if not m:
            continue
        rest = m.group("rest").strip()
        sensor = _SENSOR.search(rest)
        data = _DATA.search(rest)
        general = _GENERAL.search(rest)
        desc = data.group("desc").strip() if data else rest.split("Record:", 1)[-1].strip()
        ev = R.BmcEvent(
            id=f"{m.group('fru')}:{n}",
            time=f"{m.group('date')}T{m.group('time')}",
            sensor_type=general.group("what").strip() if general else None,
            sensor=sensor.group("name").strip() if sensor else None,
            description=desc,
            asserted=not re.search(r"\bDeassert", desc),
            source=source,
        )
        ec = classify_event(ev.sensor_type, ev.sensor, desc)
        ev.kind = ec.kind if ec else None
        room.events.append(ev)
    room.add_source(source)
    return room
