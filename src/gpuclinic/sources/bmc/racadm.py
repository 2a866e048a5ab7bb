"""Dell ``racadm getsensorinfo`` (iDRAC 7/8/9), whole or grepped.

The command prints one table per ``Sensor Type : X`` (POWER, TEMPERATURE, FAN, VOLTAGE, CURRENT, REDUNDANCY,
...), each with a ``<Sensor Name> <Status> <Reading> <lc> <uc> ...`` header, columns padded with two or more
spaces, readings with their unit glued on (``21C``, ``5880RPM``, ``234.00V``, ``0.6Amps``, ``224Watts``)
and ``[Key = iDRAC.Embedded.1#...]`` lines before some rows.  People paste it through ``grep "PS\\|Fan"``,
so a row is read by its own shape, not by the section it sits in.
"""

from __future__ import annotations

import re

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.sources.bmc.common import finish, make_sensor

# the <Status> column: the sensor's health, a PSU's presence or a redundancy state
_STATUS = (
    r"Ok|Warning|Critical|Failed|Non-Recoverable|N/A|Unknown|Present|Absent|Full Redundant|"
    r"Redundancy Lost|Redundancy Degraded|Lost|Degraded|Not Redundant|Disabled"
)
_ROW = lazyre.compile(r"^\s*(?P<name>[A-Za-z][^\s\[<]*(?: [^\s\[<]+)*?)\s{2,}(?P<status>" + _STATUS +
                      r")(?:\s{2,}(?P<rest>.*?))?\s*$")
# what every row holds, when the padding is plain spaces (the command's own): two spaces, then a status; one
# search (a literal prefix: no regex step per character) rules out a sample before it is split into lines
_STATUS_CELL = lazyre.compile(r"  (?:" + _STATUS + r")")
_OTHER_SPACE = ("\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")  # what else \s matches in ASCII
_VALUE = lazyre.compile(r"^(-?\d+(?:\.\d+)?)\s*(C|RPM|V|Amps|Watts|%)$", re.I)
_UNITS = {"c": "C", "rpm": "RPM", "v": "V", "amps": "A", "watts": "W", "%": "%"}
_LEVEL = {"ok": "ok", "present": "ok", "full redundant": "ok", "warning": "nc", "degraded": "nc",
          "redundancy degraded": "nc", "critical": "cr", "failed": "cr", "lost": "cr",
          "redundancy lost": "cr", "not redundant": "nc", "non-recoverable": "nr", "absent": "ns",
          "n/a": "ns", "unknown": "ns", "disabled": "ns"}
_MARKS = ("Sensor Type :", "iDRAC.Embedded.", "<Sensor Name>")


def _value(text: str) -> tuple[float | None, str | None]:
    m = _VALUE.match(text.strip())
    return (float(m.group(1)), _UNITS[m.group(2).lower()]) if m else (None, None)


def claims(text: str) -> bool:
    head = text[:20000]
    plain = head.isascii() and not any(c in head for c in _OTHER_SPACE)
    if plain and not _STATUS_CELL.search(head):  # (else a row may be padded with tabs or U+00A0)
        return False
    rows = [m for ln in head.splitlines() if (m := _ROW.match(ln))]
    if any(mark in head for mark in _MARKS):
        return len(rows) >= 1
    # a grep of it: PS status rows or rows with racadm's glued units
    return sum(1 for m in rows if m.group("name").startswith(("PS", "System Board"))
               or _value((m.group("rest") or "").split("  ")[0])[1]) >= 2


def parse(text: str, source: str = "racadm getsensorinfo") -> R.RoomFacts:
    room = R.RoomFacts()
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        name, status = m.group("name"), m.group("status")
        cols = [c for c in re.split(r"\s{2,}", m.group("rest") or "") if c]
        val, unit = _value(cols[0]) if cols else (None, None)
        thr: dict[str, float] = {}
        if unit is not None:
            marks = [re.sub(r"\s*\[[YN]\]$", "", c) for c in cols[1:5]]
            for key, col in zip(("lcr", "ucr", "lnc", "unc"), marks, strict=False):
                v, u = _value(col)
                if v is not None and u == unit:
                    thr[key] = v
        level = _LEVEL.get(status.lower(), "ns")
        states = [] if unit is not None or status.lower() == "ok" else [status]
        first = cols[0].lower() if cols else ""
        if unit is None and first in ("good", "bad"):  # VOLTAGE power-good rows ("System Board PS1 PG")
            unit, states, level = "V", [], ("cr" if first == "bad" else level)
        elif unit is None and status.lower() == "ok" and first not in ("", "na"):
            states = [cols[0].replace("_", " ")]  # PROCESSOR/MEMORY: the <State> column
        room.sensors.append(make_sensor(name, val, unit, level, source=source, states=states, thresholds=thr))
    if room.sensors:
        room.add_source(source)
        finish(room, source)
    return room
