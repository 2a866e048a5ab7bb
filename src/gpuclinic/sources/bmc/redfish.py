"""Redfish: thermal, power and log documents -> :class:`RoomFacts` (the live client is ``redfish_live``).

Both generations of the schema are read: the deprecated ``Chassis/{id}/Thermal`` and ``Power`` that
most Dell, HPE, Supermicro, Lenovo and Inspur BMCs still serve, and ``ThermalSubsystem`` /
``PowerSubsystem`` (Chassis v1_15_0+). A saved text may be a document, a bundle, members copied out of
a collection, or a paste cut off at either end (read as far as it goes, and said so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.knowledge.room import classify_event
from gpuclinic.sources import sniffgates
from gpuclinic.sources.bmc import redfish_health, salvage
from gpuclinic.sources.bmc.common import make_sensor

_THR = (
    ("UpperThresholdNonCritical", "unc"),
    ("UpperThresholdCritical", "ucr"),
    ("UpperThresholdFatal", "unr"),
    ("LowerThresholdNonCritical", "lnc"),
    ("LowerThresholdCritical", "lcr"),
    ("LowerThresholdFatal", "lnr"),
)
_NEW_THR = (
    ("UpperCaution", "unc"),
    ("UpperCritical", "ucr"),
    ("UpperFatal", "unr"),
    ("LowerCaution", "lnc"),
    ("LowerCritical", "lcr"),
    ("LowerFatal", "lnr"),
)
_HEALTH = {"ok": "ok", "warning": "nc", "critical": "cr"}


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _status(obj: dict[str, Any]) -> tuple[str | None, str | None, bool]:
    raw = obj.get("Status")
    st: dict[str, Any] = raw if isinstance(raw, dict) else {}
    health = st.get("Health") or st.get("HealthRollup")
    state = st.get("State")
    return (str(health) if health else None), (str(state) if state else None), state == "Absent"


def _level_word(health: str | None, absent: bool) -> str:
    if absent:
        return "ns"
    return _HEALTH.get((health or "").lower(), "ns" if health is None else "ns")


# a document pasted without its "@odata.type" (cut off, or copied from a viewer that hides annotations):
# its type from the URI it names (the Redfish resource URIs of DSP0266 / the schemas' Redfish.Uris)
_TYPE_BY_URI = (
    (lazyre.compile(r"/LogServices/[^/]+/Entries/[^/]+$"), "LogEntry"),
    (lazyre.compile(r"/LogServices/[^/]+/Entries$"), "LogEntryCollection"),
    (lazyre.compile(r"/Chassis/[^/]+/Thermal$"), "Thermal"),
    (lazyre.compile(r"/Chassis/[^/]+/Power$"), "Power"),
    (lazyre.compile(r"/ThermalSubsystem$"), "ThermalSubsystem"),
    (lazyre.compile(r"/ThermalSubsystem/ThermalMetrics$"), "ThermalMetrics"),
    (lazyre.compile(r"/ThermalSubsystem/Fans/[^/]+$"), "Fan"),
    (lazyre.compile(r"/PowerSubsystem$"), "PowerSubsystem"),
    (lazyre.compile(r"/PowerSubsystem/PowerSupplies/[^/]+$"), "PowerSupply"),
    (lazyre.compile(r"/Chassis/[^/]+/Sensors/[^/]+$"), "Sensor"),
    (lazyre.compile(r"/Chassis/[^/]+/EnvironmentMetrics$"), "EnvironmentMetrics"),
    (lazyre.compile(r"/Systems/[^/]+/Processors/[^/]+$"), "Processor"),
    (lazyre.compile(r"/Systems/[^/]+/Memory/[^/]+$"), "Memory"),
    (lazyre.compile(r"/Drives/[^/]+$"), "Drive"),
    (lazyre.compile(r"/redfish/v1/Systems/[^/]+$"), "ComputerSystem"),
    (lazyre.compile(r"/redfish/v1/Chassis/[^/]+$"), "Chassis"),
)


def odata_type(doc: dict[str, Any]) -> str:
    t = str(doc.get("@odata.type") or "")
    if t:
        return t.lstrip("#").split(".")[0]
    uri = str(doc.get("@odata.id") or "").split("#")[0].rstrip("/")
    for pat, name in _TYPE_BY_URI:
        if pat.search(uri):
            return name
    if "Message" in doc and ("Severity" in doc or "Created" in doc or "EntryType" in doc):
        return "LogEntry"  # a bare log entry: its message is what counts
    return ""


def _thermal(doc: dict[str, Any], src: str) -> R.RoomFacts:
    room = R.RoomFacts()
    for t in doc.get("Temperatures") or []:
        if not isinstance(t, dict):
            continue
        health, state, absent = _status(t)
        thr = {k: v for key, k in _THR if (v := _num(t.get(key))) is not None}
        val = _num(t.get("ReadingCelsius"))
        if val is None:
            val = _num(t.get("CurrentReading"))  # HPE iLO 4 (Thermal 1.0/1.1 era) also prints CurrentReading
        s = make_sensor(
            str(t.get("Name") or t.get("MemberId") or "Temperature"),
            val,
            "C",
            _level_word(health, absent),
            source=src,
            thresholds=thr,
            number_=str(t.get("MemberId") or "") or None,
            entity=t.get("PhysicalContext"),
            sensor_type="Temperature",
            context=t.get("PhysicalContext"),
        )
        s.absent = absent
        room.sensors.append(s)
    for f in doc.get("Fans") or []:
        if not isinstance(f, dict):
            continue
        health, state, absent = _status(f)
        units = str(
            f.get("ReadingUnits") or f.get("Units") or "RPM"
        )  # iLO 4: "Units": "Percent", CurrentReading
        thr = {k: v for key, k in _THR if (v := _num(f.get(key))) is not None}
        reading = _num(f.get("Reading"))
        if reading is None:
            reading = _num(f.get("CurrentReading"))
        s = make_sensor(
            str(f.get("Name") or f.get("FanName") or f.get("MemberId") or "Fan"),
            reading,
            "%" if units.lower() in ("percent", "percentage") else "RPM",
            _level_word(health, absent),
            source=src,
            thresholds=thr,
            number_=str(f.get("MemberId") or "") or None,
            sensor_type="Fan",
        )
        s.kind, s.absent = R.FAN, absent
        room.sensors.append(s)
    _redundancy(room, doc.get("Redundancy"))
    return room


def _redundancy(room: R.RoomFacts, items: Any) -> None:
    for r in items or []:
        if isinstance(r, dict):
            health, state, _ = _status(r)
            name = str(r.get("Name") or r.get("MemberId") or "Redundancy")
            if state == "Disabled":
                continue  # not configured
            room.redundancy[name] = (
                "Fully Redundant"
                if (health or "OK") == "OK" and state in (None, "Enabled")
                else (f"Redundancy {state or '?'} (health {health or '?'})")
            )


def _power(doc: dict[str, Any], src: str) -> R.RoomFacts:
    room = R.RoomFacts()
    for pc in doc.get("PowerControl") or []:
        if isinstance(pc, dict):
            room.power_consumed_w = room.power_consumed_w or _num(pc.get("PowerConsumedWatts"))
            room.power_capacity_w = room.power_capacity_w or _num(pc.get("PowerCapacityWatts"))
    for p in doc.get("PowerSupplies") or []:
        if isinstance(p, dict):
            room.psus.append(_psu(p, None, src))
    for v in doc.get("Voltages") or []:
        if isinstance(v, dict):
            health, state, absent = _status(v)
            thr = {k: x for key, k in _THR if (x := _num(v.get(key))) is not None}
            room.sensors.append(
                make_sensor(
                    str(v.get("Name") or "Voltage"),
                    _num(v.get("ReadingVolts")),
                    "V",
                    _level_word(health, absent),
                    source=src,
                    thresholds=thr,
                )
            )
    _redundancy(room, doc.get("Redundancy"))
    return room


def _psu(p: dict[str, Any], metrics: dict[str, Any] | None, src: str) -> R.PowerSupply:
    health, state, absent = _status(p)
    line = str(p.get("LineInputStatus") or "")
    m = metrics or {}

    def reading(key: str) -> float | None:
        v = m.get(key)
        return _num(v.get("Reading")) if isinstance(v, dict) else None

    ps = R.PowerSupply(
        name=str(p.get("Name") or p.get("MemberId") or p.get("Id") or "PSU"),
        present=False if absent else (True if state else None),
        health=(health or "").lower() or None,
        state=state,
        input_voltage=_num(p.get("LineInputVoltage"))
        if p.get("LineInputVoltage") is not None
        else reading("InputVoltage"),
        capacity_w=_num(p.get("PowerCapacityWatts")),
        input_w=_num(p.get("PowerInputWatts")) or reading("InputPowerWatts"),
        output_w=_num(p.get("PowerOutputWatts"))
        or _num(p.get("LastPowerOutputWatts"))
        or reading("OutputPowerWatts"),
        source=src,
    )
    conds = " ".join(
        str(c.get("MessageId", "")) + " " + str(c.get("Message", ""))
        for c in (p.get("Status") or {}).get("Conditions") or []
        if isinstance(c, dict)
    )
    ps.input_lost = line == "LossOfInput" or "LossOfInput" in conds or "lost" in conds.lower()
    ps.input_out_of_range = line == "OutOfRange" or "OutOfRange" in conds
    ps.predictive_failure = "PredictiveFailure" in conds or "predictive" in conds.lower()
    ps.failed = not absent and ps.health == "critical" and not ps.input_lost
    return ps


def _thermal_metrics(doc: dict[str, Any], src: str) -> R.RoomFacts:
    room = R.RoomFacts()
    summary = doc.get("TemperatureSummaryCelsius") or {}
    for key, ctx in (("Intake", "Intake"), ("Ambient", "Room"), ("Exhaust", "Exhaust")):
        v = summary.get(key)
        val = _num(v.get("Reading")) if isinstance(v, dict) else None
        if val is not None:
            room.sensors.append(
                make_sensor(
                    f"{key} temperature",
                    val,
                    "C",
                    "ok",
                    source=src,
                    context=ctx,
                    sensor_type="Temperature",
                    entity=ctx,
                )
            )
    for r in doc.get("TemperatureReadingsCelsius") or []:
        if isinstance(r, dict) and _num(r.get("Reading")) is not None:
            name = str(
                r.get("DeviceName")
                or str(r.get("DataSourceUri", "")).rstrip("/").rsplit("/", 1)[-1]
                or "Temp"
            )
            room.sensors.append(
                make_sensor(
                    name,
                    _num(r.get("Reading")),
                    "C",
                    "ok",
                    source=src,
                    context=r.get("PhysicalContext"),
                    sensor_type="Temperature",
                )
            )
    return room


def _environment_metrics(doc: dict[str, Any], src: str) -> R.RoomFacts:
    """EnvironmentMetrics (Chassis v1_17+): the chassis's draw, its fans' speeds and one temperature, each
    named by the Sensor it was taken from (``DataSourceUri``), so a CPU temperature is not read as inlet."""
    def named(r: dict[str, Any], default: str) -> str:
        return str(r.get("DeviceName") or str(r.get("DataSourceUri", "")).rstrip("/").rsplit("/", 1)[-1]
                   or default)

    pw = doc.get("PowerWatts")
    room = R.RoomFacts(power_consumed_w=_num(pw.get("Reading")) if isinstance(pw, dict) else None)
    t = doc.get("TemperatureCelsius")
    if isinstance(t, dict) and _num(t.get("Reading")) is not None:
        room.sensors.append(make_sensor(named(t, "Temperature"), _num(t.get("Reading")), "C", "ok",
                                        source=src, sensor_type="Temperature"))
    for f in doc.get("FanSpeedsPercent") or []:
        rpm, pct = (_num(f.get("SpeedRPM")), _num(f.get("Reading"))) if isinstance(f, dict) else (None, None)
        if rpm is not None or pct is not None:
            s = make_sensor(named(f, "Fan"), rpm if rpm is not None else pct,
                            "RPM" if rpm is not None else "%", "ok", source=src, sensor_type="Fan")
            s.kind = R.FAN
            room.sensors.append(s)
    return room


def _fan(doc: dict[str, Any], src: str) -> R.RoomFacts:
    health, state, absent = _status(doc)
    raw = doc.get("SpeedPercent")
    sp: dict[str, Any] = raw if isinstance(raw, dict) else {}
    rpm, pct = _num(sp.get("SpeedRPM")), _num(sp.get("Reading"))
    s = make_sensor(
        str(doc.get("Name") or doc.get("Id") or "Fan"),
        rpm if rpm is not None else pct,
        "RPM" if rpm is not None else "%",
        _level_word(health, absent),
        source=src,
        sensor_type="Fan",
    )
    s.kind, s.absent = R.FAN, absent
    return R.RoomFacts(sensors=[s])


def _sensor(doc: dict[str, Any], src: str) -> R.RoomFacts:
    health, state, absent = _status(doc)
    rtype = str(doc.get("ReadingType") or "")
    unit = {
        "Temperature": "C",
        "Rotational": "RPM",
        "Voltage": "V",
        "Power": "W",
        "Current": "A",
        "Percent": "%",
    }.get(rtype)
    if unit is None and not rtype:  # ReadingType is optional: the DMTF mockup's temperatures give only units
        unit = {"Cel": "C", "RPM": "RPM", "V": "V", "W": "W", "A": "A", "%": "%"}.get(
            str(doc.get("ReadingUnits"))
        )
    if unit is None:
        return R.RoomFacts()
    thr: dict[str, float] = {}
    raw = doc.get("Thresholds")
    ths: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for key, k in _NEW_THR:
        v = ths.get(key)
        if isinstance(v, dict) and _num(v.get("Reading")) is not None:
            thr[k] = float(v["Reading"])
    s = make_sensor(
        str(doc.get("Name") or doc.get("Id")),
        _num(doc.get("Reading")),
        unit,
        _level_word(health, absent),
        source=src,
        thresholds=thr,
        context=doc.get("PhysicalContext"),
        entity=doc.get("PhysicalContext"),
        sensor_type="Temperature" if unit == "C" else ("Fan" if unit == "RPM" else None),
    )
    s.absent = absent
    return R.RoomFacts(sensors=[s])


def _enum(v: Any) -> str:
    """An enum value; iDRAC 7/8 firmware wraps it as ``[{"Member": "Assert"}]``."""
    if isinstance(v, list):
        return ", ".join(_enum(x.get("Member") if isinstance(x, dict) else x) for x in v)
    return str(v or "")


def _log_entry(e: dict[str, Any], src: str) -> R.BmcEvent:
    code = _enum(e.get("EntryCode"))
    msg = str(e.get("Message") or "")
    desc = " | ".join(x for x in (code, msg) if x and x not in ("Assert", "Deassert")) or str(
        e.get("MessageId") or ""
    )
    stype = _enum(e.get("SensorType")) or None
    ev = R.BmcEvent(
        id=str(e.get("Id") or e.get("@odata.id") or "?"),
        time=e.get("Created"),
        sensor_type=stype,
        sensor=str(e.get("Name") or "") or None,
        description=desc,
        asserted=code != "Deassert" and e.get("Resolved") is not True,
        severity=str(e.get("Severity") or "") or None,
        source=src,
    )
    ec = classify_event(stype, ev.sensor, f"{desc} {e.get('MessageId') or ''}")
    ev.kind = ec.kind if ec else None
    return ev


def log_entries(doc: dict[str, Any], src: str) -> R.RoomFacts:
    room = R.RoomFacts(events_read=True)
    for e in doc.get("Members") or []:
        if isinstance(e, dict) and ("Message" in e or "EntryCode" in e or "MessageId" in e):
            room.events.append(_log_entry(e, src))
    return room


def _power_subsystem(doc: dict[str, Any], src: str) -> R.RoomFacts:
    room = R.RoomFacts(power_capacity_w=_num(doc.get("CapacityWatts")))
    _redundancy(room, doc.get("PowerSupplyRedundancy"))
    return room


def _thermal_subsystem(doc: dict[str, Any], src: str) -> R.RoomFacts:
    room = R.RoomFacts()
    _redundancy(room, doc.get("FanRedundancy"))
    return room


def _events(doc: dict[str, Any], src: str) -> R.RoomFacts:
    """An EventService push (``Events`` records): each read as a log entry."""
    return log_entries({"Members": [
        {**e, "Created": e.get("EventTimestamp"), "Id": e.get("EventId") or e.get("MemberId"),
         "Severity": e.get("Severity") or e.get("MessageSeverity")}
        for e in doc.get("Events") or [] if isinstance(e, dict)]}, src)


def _collection(doc: dict[str, Any], src: str) -> R.RoomFacts:
    """An expanded collection ($expand) of systems, processors, memory ...: each member read."""
    room = R.RoomFacts()
    for m in doc.get("Members") or []:
        if isinstance(m, dict) and odata_type(m):
            room.merge(parse_doc(m, src))
    return room


_READERS: dict[str, Callable[[dict[str, Any], str], R.RoomFacts]] = {
    "Thermal": _thermal,
    "Power": _power,
    "ThermalMetrics": _thermal_metrics,
    "Fan": _fan,
    "EnvironmentMetrics": _environment_metrics,
    "Sensor": _sensor,
    "PowerSubsystem": _power_subsystem,
    "ThermalSubsystem": _thermal_subsystem,
    "LogEntryCollection": log_entries,
    "Event": _events,
    # (an entry cut off before its message is no event)
    "LogEntry": lambda doc, src: log_entries({"Members": [doc]}, src),
    **{t: redfish_health.reader(t) for t in redfish_health.TYPES},
    **{t: _collection for t in redfish_health.COLLECTIONS},
}


def parse_doc(
    doc: dict[str, Any], src: str = "redfish", metrics: dict[str, Any] | None = None
) -> R.RoomFacts:
    """One Redfish document -> room facts (an unknown type gives an empty RoomFacts)."""
    t = odata_type(doc)
    if t == "PowerSupply":
        room = R.RoomFacts(psus=[_psu(doc, metrics, src)])
    else:
        read = _READERS.get(t)
        room = read(doc, src) if read is not None else R.RoomFacts()
    if t:
        room.add_source(f"redfish {t}")
        for ps in room.psus:
            ps.source = f"redfish {t}"  # Power (old model) or PowerSupply (new): see prefer_new_model()
    return room


def prefer_new_model(room: R.RoomFacts) -> None:
    """A chassis read through both models lists its PSUs twice: keep PowerSubsystem's, drop Power's."""
    if any(p.source == "redfish PowerSupply" for p in room.psus):
        room.psus = [p for p in room.psus if p.source != "redfish Power"]


_ROOM_TYPES = (
    "Thermal",
    "Power",
    "ThermalMetrics",
    "Fan",
    "Sensor",
    "PowerSupply",
    "PowerSubsystem",
    "ThermalSubsystem",
    "LogEntryCollection",
    "LogEntry",
    "EnvironmentMetrics",
    "Event",
    *redfish_health.TYPES,
    *redfish_health.COLLECTIONS,
)


def claims(text: str) -> bool:
    head = text[:8000]
    if sniffgates.REDFISH[0] not in head:  # ("@odata": each test below needs it)
        return False
    if "'@odata." in head and '"@odata.' not in head:  # printed by Python (pprint of a response's dict)
        head = head.replace("'", '"')
    if not head.lstrip().startswith("{"):  # a paste that starts inside a document: from its first member
        m = _MEMBER.search(head)
        head = head[m.start():] if m else ""
    return (
        bool(re.search(r'"@odata\.type"\s*:\s*"#(' + "|".join(_ROOM_TYPES) + r")\.", head))
        or bool(re.search(r'"/redfish/v1/[^"]*"\s*:\s*\{', head))
        or any(p.search(m) for m in _ODATA_ID.findall(head) for p, _ in _TYPE_BY_URI)
    )


_MEMBER = lazyre.compile(r'^\s*\{\s*\n?\s*"@odata\.(?:id|type|context)"', re.M)
_ODATA_ID = lazyre.compile(r'"@odata\.id"\s*:\s*"(/redfish/v1/[^"#]*?)/?(?:#[^"]*)?"')


def parse_text(text: str) -> R.RoomFacts:
    """A saved Redfish document, or a bundle ``{"/redfish/v1/...": doc, ...}`` as the client records it.

    One member copied out of a ``Members`` list keeps its separator (``},``): that comma is dropped; several
    members copied together (``{...},{...},``) are read as the list they came from.  A paste cut off (or
    broken) part-way is read up to the cut and marked partial (``RoomFacts.partial``)."""
    body = text.strip()
    body = body[:-1] if body.endswith(",") else body
    if "'@odata." in body[:8000] and '"@odata.' not in body[:8000]:
        body = _from_python(body)
    skipped = ""
    if not body.startswith("{") and (m := _MEMBER.search(body)):
        skipped = f"Redfish JSON starts inside a document: its first {m.start()} characters are not read"
        body = body[m.start():].strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        try:
            members, why = json.loads("[" + body + "]"), None
        except json.JSONDecodeError:
            members, why = salvage.loads_partial(body, lead="[")  # ValueError: reported unreadable
        room = R.RoomFacts()
        for doc in members if isinstance(members, list) else []:
            if isinstance(doc, dict):
                room.merge(_parse_any(doc))
        room.partial += [w for w in (skipped, f"Redfish {why}" if why else "") if w]
        return room
    room = R.RoomFacts()
    if isinstance(data, dict):
        room = _parse_any(data)
    if skipped:
        room.partial.append(skipped)
    return room


def _from_python(body: str) -> str:
    """A document printed by Python (``print(r.dict)``, ``pprint``: single quotes, True/None, long strings
    split over lines) as JSON; ``ast.literal_eval`` reads literals only, never runs code.  A repr that does
    not evaluate (cut off) is left as it is: the JSON reader then reports it unreadable."""
    import ast

    for src in (body, "[" + body + "]"):
        try:
            return json.dumps(ast.literal_eval(src))
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
    return body


# one member of a Thermal/Power array pasted alone: "@odata.id": ".../Thermal#/Temperatures/11" (HPE:
# "Thermal#Temperatures/11"), or typed "#Thermal.v1_4_0.Fan" (iDRAC): read as its document holding that one
_MEMBER_ARRAYS = {"Temperatures": "Thermal", "Fans": "Thermal", "PowerSupplies": "Power", "Voltages": "Power",
                  "PowerControl": "Power"}
_MEMBER_TYPES = {"Temperature": "Temperatures", "Fan": "Fans", "PowerSupply": "PowerSupplies",
                 "Voltage": "Voltages", "PowerControl": "PowerControl"}


def _as_document(member: dict[str, Any]) -> dict[str, Any] | None:
    array = str(member.get("@odata.id") or "").partition("#")[2].strip("/").split("/")[0]
    parts = str(member.get("@odata.type") or "").lstrip("#").split(".")
    if len(parts) >= 3 and parts[0] in ("Thermal", "Power") and parts[-1] in _MEMBER_TYPES:
        array = _MEMBER_TYPES[parts[-1]]
    elif parts != [""] or array not in _MEMBER_ARRAYS:
        return None
    return {"@odata.type": f"#{_MEMBER_ARRAYS[array]}.", array: [member]}


def _parse_any(data: dict[str, Any]) -> R.RoomFacts:
    """A document (typed, or typed by its URI), one member of a Thermal/Power array, or a bundle of
    documents keyed by their paths."""
    doc = _as_document(data)
    if doc is not None:
        return parse_doc(doc)
    if odata_type(data):
        return parse_doc(data)
    return parse_bundle(data)


def parse_bundle(docs: dict[str, Any]) -> R.RoomFacts:
    room = R.RoomFacts()
    for path, doc in docs.items():
        if not isinstance(doc, dict) or odata_type(doc) == "PowerSupplyMetrics":
            continue
        metrics = docs.get(path.rstrip("/") + "/Metrics") if odata_type(doc) == "PowerSupply" else None
        room.merge(parse_doc(doc, metrics=metrics if isinstance(metrics, dict) else None))
    prefer_new_model(room)
    return room
