"""Parsers for ``ipmitool`` output: ``sdr list/elist/type``, ``sensor``, ``sel list/elist``, ``fru``,
``chassis status`` and ``dcmi power reading``.

Column layouts are ipmitool's own (lib/ipmi_sdr.c, lib/ipmi_sensor.c, lib/ipmi_sel.c; see
docs/room.md). Each format has ``claims(text)`` (is this that output?) and ``parse(text)`` returning
:class:`RoomFacts`; people paste several outputs into one file, so ``parse_any`` reads every part.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.knowledge.room import classify_event
from gpuclinic.sources import sniffgates
from gpuclinic.sources.bmc.common import (
    THRESHOLD_NAMES,
    finish,
    make_sensor,
    number,
    presence_offsets,
    psu_offsets,
    sensor_type_names,
    unit_of,
)

_SNUM = lazyre.compile(r"^[0-9A-Fa-f]{1,2}h$")
_ENTITY = lazyre.compile(r"^\d{1,3}\.\d{1,3}$")
_HEX = lazyre.compile(r"^0x[0-9A-Fa-f]+$")
_STATUS_WORDS = {"ok", "nc", "cr", "nr", "ns", "lnc", "unc", "lcr", "ucr", "lnr", "unr", "na"}
_DATE = lazyre.compile(r"^(\d{1,2})/(\d{1,2})/(\d{2,4})$")
_TIME = lazyre.compile(r"^(\d{1,2}):(\d{2}):(\d{2})")
_KV = lazyre.compile(r"^\s*([A-Za-z][^:]{1,40}?)\s*:\s*(.*?)\s*$")


def _cols(line: str) -> list[str]:
    """The ``|`` columns, without the Markdown emphasis people add to the cell they point at (``**ok**``)."""
    return [c.strip().strip("*`").strip() for c in line.split("|")]


# ------------------------------------------------------------------------------------------ sdr elist

def _is_elist(c: list[str]) -> bool:
    return (
        len(c) >= 5
        and bool(_SNUM.match(c[1]))
        and c[2].lower() in _STATUS_WORDS
        and bool(_ENTITY.match(c[3]))
    )


def _is_type4(c: list[str]) -> bool:
    """``sdr type`` of older ipmitool: name | NNh | status | reading (no entity column)."""
    return len(c) == 4 and bool(_SNUM.match(c[1])) and c[2].lower() in _STATUS_WORDS


def _is_sdr_list(c: list[str]) -> bool:
    return len(c) == 3 and c[2].lower() in _STATUS_WORDS and bool(c[0])


def _is_sensor(c: list[str]) -> bool:
    if len(c) < 10:
        return False
    if c[1].lower() != "na" and number(c[1]) is None and not _HEX.match(c[1]):
        return False
    return all(x.lower() == "na" or number(x) is not None for x in c[4:10])


def _reading(text: str) -> tuple[float | None, str | None, list[str]]:
    """'24 degrees C' -> (24, 'C', []); 'Presence detected, Failure detected' -> (None, None, states)."""
    t = text.strip()
    if not t:
        return None, None, []
    m = re.match(r"^([-+]?\d+(?:\.\d+)?)\s*(.*)$", t)
    if m and m.group(2) and not m.group(2).startswith(("x", "(")):
        unit = m.group(2).strip()
        if unit.lower() in ("degrees c", "rpm", "volts", "amps", "watts", "percent", "%", "degrees f"):
            val = float(m.group(1))
            if unit.lower() == "degrees f":
                return (val - 32) * 5 / 9, "C", []
            return val, unit_of(unit), []
    if _HEX.match(t) or t.lower() in ("no reading", "disabled", "not readable", "na"):
        return None, None, [] if _HEX.match(t) else [t]
    return None, None, [s.strip() for s in t.split(",") if s.strip()]


def parse_sdr(text: str, source: str = "ipmitool sdr") -> R.RoomFacts:
    """``sdr list`` (3 columns) or ``sdr elist``/``sdr type`` (5 columns)."""
    room = R.RoomFacts()
    for line in text.splitlines():
        c = _cols(line)
        if _is_elist(c):
            val, unit, states = _reading(" | ".join(c[4:]))
            room.sensors.append(
                make_sensor(
                    c[0], val, unit, c[2], source=source + " elist", states=states, number_=c[1], entity=c[3]
                )
            )
        elif _is_type4(c):
            val, unit, states = _reading(c[3])
            room.sensors.append(
                make_sensor(c[0], val, unit, c[2], source=source + " type", states=states, number_=c[1])
            )
        elif _is_sdr_list(c):
            val, unit, states = _reading(c[1])
            room.sensors.append(make_sensor(c[0], val, unit, c[2], source=source + " list", states=states))
    if room.sensors:
        room.add_source(room.sensors[0].source)
        finish(room, room.sensors[0].source)
    return room


def claims_sdr(text: str) -> bool:
    if "|" not in text:  # every row shape below has columns
        return False
    n = 0
    for line in text.splitlines()[:400]:
        if "|" not in line:
            continue  # one column: no row shape (and no split of every prose line)
        c = _cols(line)
        if (
            _is_elist(c)
            or _is_type4(c)
            or (_is_sdr_list(c) and re.search(r"degrees|rpm|volts|watts|0x[0-9a-f]+|no reading", c[1], re.I))
        ):
            n += 1
            if n >= 2:
                return True
    return False


# ------------------------------------------------------------------------------------------ sensor


_PRESENCE = lazyre.compile(r"presen", re.I)


def _psu_states(hexstate: str, name: str = "") -> list[str]:
    """Decode the two state bytes of a PSU row ('0x0b00': offsets 0, 1, 3); a PSU *presence* sensor (HPE
    'PS 2 Presence | 0x1 | discrete | 0x0180') is a generic device-presence sensor, not the PSU status."""
    try:
        v = int(hexstate, 16)
    except ValueError:
        return []
    low = (v >> 8) & 0xFF if len(hexstate) >= 6 else v & 0xFF
    names = presence_offsets() if _PRESENCE.search(name) else psu_offsets()
    return [names[i] for i in range(len(names)) if low & (1 << i)]


def parse_sensor(text: str, source: str = "ipmitool sensor") -> R.RoomFacts:
    room = R.RoomFacts()
    for line in text.splitlines():
        c = _cols(line)
        if not _is_sensor(c):
            continue
        name, raw, units, status = c[0], c[1], c[2], c[3]
        thr = {
            k: v for k, v in zip(THRESHOLD_NAMES, (number(x) for x in c[4:10]), strict=False) if v is not None
        }
        if units.lower() == "discrete":
            states: list[str] = []
            s = make_sensor(name, None, None, None, source=source)
            if s.kind == R.PSU and _HEX.match(status):
                states = _psu_states(status, name)
                level = "ok"
                if any(x in states for x in ("Failure detected", "Power Supply AC lost")):
                    level = "cr"
                elif any(
                    x in states
                    for x in ("Predictive failure", "AC out-of-range, but present", "Config Error")
                ):
                    level = "nc"
                room.sensors.append(make_sensor(name, None, None, level, source=source, states=states))
            else:
                room.sensors.append(
                    make_sensor(
                        name,
                        None,
                        None,
                        status if status.lower() in ("na", "ns") else "ok",
                        source=source,
                        states=[f"state {status}"] if _HEX.match(status) else [],
                    )
                )
            continue
        val = None if raw.lower() == "na" else number(raw)
        room.sensors.append(make_sensor(name, val, unit_of(units), status, source=source, thresholds=thr))
    if room.sensors:
        room.add_source(source)
        finish(room, source)
    return room


def claims_sensor(text: str) -> bool:
    if "|" not in text:  # a sensor row has ten columns
        return False
    lines = text.splitlines()[:400]
    rows = sum(1 for line in lines if "|" in line and _is_sensor(_cols(line)))  # (a row has ten columns)
    # one row quoted alone (with its command line)
    return rows >= 2 or (rows == 1 and sum(1 for ln in lines if ln.strip()) <= 3)


# ------------------------------------------------------------------------------------------ sel


def _split_sensor(field: str) -> tuple[str | None, str]:
    for t in sensor_type_names():
        if field.lower().startswith(t.lower()) and (len(field) == len(t) or field[len(t)] in " #"):
            return t, field[len(t) :].strip()
    return None, field


def iso_datetime(date: str, time: str) -> str | None:
    """'06/04/2014' '09:41:52' -> '2014-06-04T09:41:52' (month first, as ipmitool prints with %x in C)."""
    d, t = _DATE.match(date.strip()), _TIME.match(time.strip())
    if not d or not t:
        return None
    mo, da, yr = int(d.group(1)), int(d.group(2)), int(d.group(3))
    if mo > 12 and da <= 12:  # a day-first locale
        mo, da = da, mo
    if yr < 100:
        yr += 2000
    try:
        return f"{yr:04d}-{mo:02d}-{da:02d}T{int(t.group(1)):02d}:{t.group(2)}:{t.group(3)}"
    except ValueError:
        return None


# The BMC web event table some boards export (ASRock Rack):
# ``ID | 04/13/2025, 03:08:16 | Sensor Name | Sensor Type | PCI SERR - Asserted`` with detail rows below.
_TABLE_DT = lazyre.compile(r"^(\d{1,2}/\d{1,2}/\d{2,4}),\s*(\d{1,2}:\d{2}:\d{2})$")
_TABLE_STATE = lazyre.compile(r"\s+-\s+(De)?[Aa]sserted$")


def _is_sel(c: list[str]) -> bool:
    return (
        len(c) >= 5
        and bool(re.match(r"^[0-9A-Fa-f]{1,8}$", c[0]))
        and (bool(_DATE.match(c[1])) or bool(_TABLE_DT.match(c[1])) or c[1].lower() in ("pre-init", ""))
        and bool(c[3])
    )


def _table_event(c: list[str], source: str) -> R.BmcEvent:
    """A row of the web event table: its date and time share a column, the sensor type has one."""
    m = _TABLE_DT.match(c[1])
    assert m is not None
    desc = c[4]
    st = _TABLE_STATE.search(desc)
    ev = R.BmcEvent(
        id=c[0],
        time=iso_datetime(m.group(1), m.group(2)),
        sensor_type=c[3] or None,
        sensor=c[2] or None,
        description=desc[: st.start()] if st else desc,
        asserted=not (st and st.group(1)),
        source=source,
    )
    return ev


def parse_sel(text: str, source: str = "ipmitool sel elist") -> R.RoomFacts:
    room = R.RoomFacts(events_read=True)
    table: R.BmcEvent | None = None  # the web-table event whose detail rows may follow
    for line in text.splitlines():
        c = _cols(line)
        if table is not None and len(c) >= 5 and not c[0] and not c[1] and c[4]:
            table.description += f"; {c[4]}"  # "PCI Bus number : 0" under its event
            continue
        if not _is_sel(c):
            table = None
            continue
        if _TABLE_DT.match(c[1]):
            table = _table_event(c, source)
            room.events.append(table)
            continue
        table = None
        rest = c[4:]
        asserted = True
        if "Deasserted" in rest:
            asserted = False
            rest.remove("Deasserted")
        elif "Asserted" in rest:
            rest.remove("Asserted")
        desc = " | ".join(x for x in rest if x)
        stype, sensor = _split_sensor(c[3])
        ev = R.BmcEvent(
            id=c[0],
            time=iso_datetime(c[1], c[2]) or (f"{c[1]} {c[2]}".strip() or None),
            sensor_type=stype,
            sensor=sensor or None,
            description=desc,
            asserted=asserted,
            source=source,
        )
        room.events.append(ev)
    for ev in room.events:
        ec = classify_event(ev.sensor_type, ev.sensor, ev.description)
        ev.kind = ec.kind if ec else None
    room.add_source(source)
    return room


def claims_sel(text: str) -> bool:
    if "SEL has no entries" not in text and "|" not in text:  # (neither test below can pass: no split)
        return False
    lines = text.splitlines()[:400]
    if any(ln.strip() == "SEL has no entries" for ln in lines[:5]):
        return True
    if "|" not in text:  # a SEL row has five or more columns
        return False
    return any("|" in ln and _is_sel(_cols(ln)) and re.search(r"asserted", ln, re.I) for ln in lines)


# ------------------------------------------------------------------------------------------ key: value


def _kv(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _KV.match(line)
        if m and "|" not in line:
            out.setdefault(m.group(1).strip(), m.group(2))
    return out


def claims_chassis(text: str) -> bool:
    head = text[:4000].lower()
    return sniffgates.IPMI_CHASSIS[0] in head and ("power overload" in head or "power fault" in head)


# FreeIPMI ``ipmi-chassis --get-chassis-status`` names the same flags in lower case and without "Main"
_CHASSIS_KEYS = {
    k.lower(): k for k in ("Main Power Fault", "Power Overload", "Power Control Fault", "Cooling/Fan Fault",
                           "Drive Fault", "System Power", "Chassis Intrusion")
} | {"power fault": "Main Power Fault"}


def parse_chassis(text: str) -> R.RoomFacts:
    room = R.RoomFacts(chassis={_CHASSIS_KEYS.get(k.lower(), k): v for k, v in _kv(text).items()})
    room.add_source("ipmitool chassis status")
    return room


_FRU_KEYS = (
    "Board Mfg",
    "Board Product",
    "Product Manufacturer",
    "Product Name",
    "Product Part Number",
    "Chassis Type",
    "Board Part Number",
)


def claims_fru(text: str) -> bool:
    head = text[:8000]
    return sniffgates.IPMI_FRU[0] in head and ("Product" in head or "Board" in head)


def parse_fru(text: str) -> R.RoomFacts:
    kv = _kv(text)
    room = R.RoomFacts(fru={k: kv[k] for k in _FRU_KEYS if kv.get(k)})
    room.add_source("ipmitool fru")
    return room


_DCMI = lazyre.compile(r"Instantaneous power reading:\s*([\d.]+)\s*Watts", re.I)


def claims_dcmi(text: str) -> bool:
    head = text[:8000]
    # "power" has no letter that re.I matches beyond its lower-case fold (as s/ſ, i/ı, k/K do), so a
    # match needs it in head.lower(): an ASCII fold is far cheaper than the case-blind regex scan
    return "power" in head.lower() and bool(_DCMI.search(head))


def parse_dcmi(text: str) -> R.RoomFacts:
    m = _DCMI.search(text)
    room = R.RoomFacts(power_consumed_w=float(m.group(1)) if m else None)
    state = re.search(r"Power reading state is:\s*(\w+)", text)
    if state and state.group(1).lower() != "activated":
        room.power_consumed_w = None  # DCMI power measurement not enabled: the number is meaningless
        room.partial.append(
            f"ipmitool dcmi power reading: the BMC's power reading state is {state.group(1)}, so its "
            f"{m.group(1) if m else '?'} W figures are not a measurement and the node's draw was not checked"
        )
    room.add_source("ipmitool dcmi power reading")
    return room


# ------------------------------------------------------------------------------------------ verbose

_V_THR = {
    "lower non-recoverable": "lnr",
    "lower critical": "lcr",
    "lower non-critical": "lnc",
    "upper non-critical": "unc",
    "upper critical": "ucr",
    "upper non-recoverable": "unr",
}
_V_ID = lazyre.compile(r"^Sensor ID\s*:\s*(.*?)\s*(?:\((0x[0-9a-fA-F]+)\))?\s*$")


def claims_verbose(text: str) -> bool:
    head = text[:20000]
    return sniffgates.IPMI_VERBOSE[0] in head and bool(re.search(r"^Sensor ID\s*:", head, re.M)) and (
        "Sensor Reading" in head or "States Asserted" in head
    )


def parse_verbose(text: str, source: str = "ipmitool sensor get / sdr -v") -> R.RoomFacts:
    """Blocks of ``ipmitool sensor get NAME`` / ``sdr -v``: reading, status, the six thresholds, asserted
    states."""
    room = R.RoomFacts()
    block: list[str] = []

    def flush() -> None:
        if not block:
            return
        m = _V_ID.match(block[0])
        name, num = (m.group(1), m.group(2)) if m else (block[0], None)
        kv: dict[str, str] = {}
        states: list[str] = []
        key = ""
        for ln in block[1:]:
            if ":" in ln and not ln.strip().startswith("["):
                k, _, v = ln.partition(":")
                key = k.strip().lower()
                kv[key] = v.strip()
                if key == "states asserted":
                    states += re.findall(r"\[([^\]]+)\]", v)
            elif key == "states asserted":
                states += re.findall(r"\[([^\]]+)\]", ln)
        stype = next(
            (
                re.sub(r"\s*\(0x[0-9a-f]+\)$", "", v, flags=re.I)
                for k, v in kv.items()
                if k.startswith("sensor type")
            ),
            None,
        )
        reading_text = re.sub(r"\(\+/-\s*[\d.]+\)\s*", "", kv.get("sensor reading", ""))
        val, unit, _ = _reading(reading_text)
        thr = {v: n for k, v in _V_THR.items() if (n := number(kv.get(k))) is not None}
        ent = (kv.get("entity id") or "").split(" ")[0] or None
        status = kv.get("status") or ("ok" if val is not None or states else None)
        room.sensors.append(
            make_sensor(
                name,
                val,
                unit,
                status,
                source=source,
                states=states,
                thresholds=thr,
                number_=num,
                entity=ent,
                sensor_type=stype,
            )
        )

    for line in text.splitlines():
        if line.startswith("Sensor ID"):
            flush()
            block = [line]
        elif block and line.strip():
            block.append(line)
    flush()
    if room.sensors:
        room.add_source(source)
        finish(room, source)
    return room


# ------------------------------------------------------------------------------ sel list -v / sel get
# ``SEL Record ID : 00a1`` then indented ``Key : value`` lines (lib/ipmi_sel.c, the verbose entry print);
# ``sel get`` adds the sensor's own record (``Sensor ID : CPU0_Status (0x70)``) after a blank line.
_SELV_ID = lazyre.compile(r"^\s*-?\s*SEL Record ID\s*:\s*([0-9A-Fa-f]+)\s*$")
_SELV_KV = lazyre.compile(
    r"^\s*-?\s*(Timestamp|Sensor Type|Sensor Number|Event Direction|Description|Sensor ID)\s*:\s*(.*?)\s*$"
)


def claims_sel_verbose(text: str) -> bool:
    head = text[:20000]
    return sniffgates.IPMI_SEL_VERBOSE[0] in head and any(_SELV_ID.match(ln) for ln in head.splitlines())


def parse_sel_verbose(text: str, source: str = "ipmitool sel list -v") -> R.RoomFacts:
    room = R.RoomFacts(events_read=True)
    recs: list[dict[str, str]] = []
    for line in text.splitlines():
        if m := _SELV_ID.match(line):
            recs.append({"id": m.group(1)})
        elif recs and (kv := _SELV_KV.match(line)):
            recs[-1].setdefault(kv.group(1), kv.group(2))
    for r in recs:
        if "Description" not in r and "Event Direction" not in r:
            continue
        date, _, time = r.get("Timestamp", "").partition(" ")
        sensor = r.get("Sensor ID", "").split(" (")[0] or (f"#0x{r['Sensor Number']}" if "Sensor Number" in r
                                                            else None)
        ev = R.BmcEvent(id=r["id"], time=iso_datetime(date, time), sensor_type=r.get("Sensor Type") or None,
                        sensor=sensor, description=r.get("Description", ""),
                        asserted="deassertion" not in r.get("Event Direction", "").lower(), source=source)
        ec = classify_event(ev.sensor_type, ev.sensor, ev.description)
        ev.kind = ec.kind if ec else None
        room.events.append(ev)
    room.add_source(source)
    return room


def claims_sel_info(text: str) -> bool:
    head = text[:4000]
    return sniffgates.IPMI_SEL_INFO[0] in head and "Percent Used" in head


def parse_sel_info(text: str) -> R.RoomFacts:
    """``ipmitool sel info``: a full log (no free space, 100 % used, or overflowed) records no new event, so
    it is an event of its own, classified like the BMC's "log full" SEL record."""
    kv = {k.lower(): v for k, v in _kv(text).items()}
    used, free = number(kv.get("percent used")), number(kv.get("free space"))
    full = used == 100 or free == 0 or kv.get("overflow", "").lower() == "true"
    room = R.RoomFacts(events_read=True)
    room.add_source("ipmitool sel info")
    if full:
        desc = (f"Log full (sel info: Percent Used {kv.get('percent used', '?')}, Free Space "
                f"{kv.get('free space', '?')}, Overflow {kv.get('overflow', '?')})")
        ec = classify_event("Event Logging Disabled", "SEL", desc)
        room.events.append(R.BmcEvent(id="sel info", sensor_type="Event Logging Disabled", sensor="SEL",
                                      description=desc, kind=ec.kind if ec else None,
                                      source="ipmitool sel info"))
    return room


# Each ipmitool output this module reads: (does the text hold it, its reader), in merge order.
_PARTS: tuple[tuple[Callable[[str], bool], Callable[[str], R.RoomFacts]], ...] = (
    (claims_verbose, parse_verbose),
    (claims_sdr, parse_sdr),
    (claims_sensor, parse_sensor),
    (claims_sel, parse_sel),
    (claims_sel_verbose, parse_sel_verbose),
    (claims_chassis, parse_chassis),
    (claims_fru, parse_fru),
    (claims_dcmi, parse_dcmi),
    (claims_sel_info, parse_sel_info),
)


def parse_any(text: str) -> R.RoomFacts:
    """Every ipmitool part found in ``text`` (a paste may hold sdr, sensor and sel one after another)."""
    room = R.RoomFacts()
    for claimed, parse in _PARTS:
        if claimed(text):
            room.merge(parse(text))
    return room


# part -> the literals it needs (sniffgates): a part whose literals are all known absent is not asked
_PART_GATES: dict[Callable[[str], bool], tuple[str, ...]] = {
    claims_verbose: sniffgates.IPMI_VERBOSE,
    claims_chassis: sniffgates.IPMI_CHASSIS,
    claims_fru: sniffgates.IPMI_FRU,
    claims_sel_info: sniffgates.IPMI_SEL_INFO,
    claims_sel_verbose: sniffgates.IPMI_SEL_VERBOSE,
}


def claims(text: str, absent: frozenset[str] = frozenset()) -> bool:
    """Some ipmitool output is in ``text``; ``absent``: sniffgates literals known not to be in it."""
    return any(
        claimed(text)
        for claimed, _ in _PARTS
        if not ((gate := _PART_GATES.get(claimed)) and absent.issuperset(gate))
    )
