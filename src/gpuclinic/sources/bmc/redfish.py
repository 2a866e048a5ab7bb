"""Redfish: thermal, power and log documents -> :class:`RoomFacts`, and a bounded read-only client.

Both generations of the schema are read: the deprecated ``Chassis/{id}/Thermal`` and ``Power`` that
most Dell, HPE, Supermicro, Lenovo and Inspur BMCs still serve, and ``ThermalSubsystem`` /
``PowerSubsystem`` (Chassis v1_15_0+). Log services are found by ``LogEntryType`` (SEL, Event) or by
their vendor ids (Dell ``Sel``, HPE ``IML``/``IEL``, Lenovo ``PlatformLog``, OpenBMC ``EventLog``)
rather than hard-coded paths. Every request is a GET with a timeout, inside an overall deadline.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.knowledge.room import classify_event
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
_LOG_IDS = lazyre.compile(r"sel|event|iml|iel|platform|^log\d*$|systemlog|lclog|faultlog", re.I)
MAX_DOCS = 300
MAX_SENSORS = 160  # members of one chassis's Sensors collection (a GPU server lists ~100)


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


def odata_type(doc: dict[str, Any]) -> str:
    t = str(doc.get("@odata.type") or "")
    return t.lstrip("#").split(".")[0]


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


def _log_entry(e: dict[str, Any], src: str) -> R.BmcEvent:
    code = str(e.get("EntryCode") or "")
    msg = str(e.get("Message") or "")
    desc = " | ".join(x for x in (code, msg) if x and x not in ("Assert", "Deassert")) or str(
        e.get("MessageId") or ""
    )
    stype = str(e.get("SensorType") or "") or None
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


def _log_entries(doc: dict[str, Any], src: str) -> R.RoomFacts:
    room = R.RoomFacts(events_read=True)
    for e in doc.get("Members") or []:
        if isinstance(e, dict) and ("Message" in e or "EntryCode" in e or "MessageId" in e):
            room.events.append(_log_entry(e, src))
    return room


def parse_doc(
    doc: dict[str, Any], src: str = "redfish", metrics: dict[str, Any] | None = None
) -> R.RoomFacts:
    """One Redfish document -> room facts (an unknown type gives an empty RoomFacts)."""
    t = odata_type(doc)
    room = R.RoomFacts()
    if t == "Thermal":
        room = _thermal(doc, src)
    elif t == "Power":
        room = _power(doc, src)
    elif t == "ThermalMetrics":
        room = _thermal_metrics(doc, src)
    elif t == "Fan":
        room = _fan(doc, src)
    elif t == "Sensor":
        room = _sensor(doc, src)
    elif t == "PowerSupply":
        room = R.RoomFacts(psus=[_psu(doc, metrics, src)])
    elif t == "PowerSubsystem":
        room = R.RoomFacts(power_capacity_w=_num(doc.get("CapacityWatts")))
        _redundancy(room, doc.get("PowerSupplyRedundancy"))
    elif t == "ThermalSubsystem":
        _redundancy(room, doc.get("FanRedundancy"))
    elif t == "LogEntryCollection":
        room = _log_entries(doc, src)
    elif t == "LogEntry":
        room = R.RoomFacts(events=[_log_entry(doc, src)], events_read=True)
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
)


def claims(text: str) -> bool:
    head = text[:8000]
    if not head.lstrip().startswith("{") or "@odata" not in head:
        return False
    return bool(re.search(r'"@odata\.type"\s*:\s*"#(' + "|".join(_ROOM_TYPES) + r")\.", head)) or bool(
        re.search(r'"/redfish/v1/[^"]*"\s*:\s*\{', head)
    )


def parse_text(text: str) -> R.RoomFacts:
    """A saved Redfish document, or a bundle ``{"/redfish/v1/...": doc, ...}`` as the client records it.

    One member copied out of a ``Members`` list keeps its separator (``},``): that comma is dropped; several
    members copied together (``{...},{...},``) are read as the list they came from."""
    body = text.strip()
    body = body[:-1] if body.endswith(",") else body
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        members = json.loads("[" + body + "]")  # still not JSON: the caller reports it unreadable
        room = R.RoomFacts()
        for doc in members:
            if isinstance(doc, dict) and "@odata.type" in doc:
                room.merge(parse_doc(doc))
        return room
    room = R.RoomFacts()
    if not isinstance(data, dict):
        return room
    if "@odata.type" in data:
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


# ------------------------------------------------------------------------------------------ live client


class RedfishReader:
    """GET-only walk of a Redfish service, bounded by a per-request timeout and an overall deadline."""

    def __init__(
        self, client: Any, deadline_s: float = 30.0, max_docs: int = MAX_DOCS, max_events: int = 500
    ) -> None:
        self.client = client
        self.deadline = time.monotonic() + deadline_s
        self.max_docs = max_docs
        self.max_events = max_events
        self.docs: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []

    def get(self, path: str) -> dict[str, Any] | None:
        if path in self.docs:
            return self.docs[path]
        if time.monotonic() > self.deadline or len(self.docs) >= self.max_docs:
            self.errors.append(f"{path}: skipped (time or document budget spent)")
            return None
        try:
            r = self.client.get(path)
        except Exception as e:  # httpx errors: timeouts, TLS, refused
            self.errors.append(f"{path}: {type(e).__name__}")
            raise
        if r.status_code in (401, 403):
            raise PermissionError(f"Redfish refused the credentials (HTTP {r.status_code})")
        if r.status_code != 200:
            self.errors.append(f"{path}: HTTP {r.status_code}")
            return None
        try:
            doc = r.json()
        except ValueError:
            self.errors.append(f"{path}: not JSON")
            return None
        if not isinstance(doc, dict):
            return None
        self.docs[path] = doc
        return doc

    def link(self, doc: dict[str, Any] | None, key: str) -> str | None:
        v = (doc or {}).get(key)
        return str(v["@odata.id"]) if isinstance(v, dict) and v.get("@odata.id") else None

    def members(self, path: str | None, limit: int = 32) -> list[str]:
        doc = self.get(path) if path else None
        out = []
        for m in (doc or {}).get("Members") or []:
            if isinstance(m, dict) and m.get("@odata.id"):
                out.append(str(m["@odata.id"]))
        return out[:limit]

    def walk(self) -> R.RoomFacts:
        root = self.get("/redfish/v1/") or self.get("/redfish/v1") or {}
        room = R.RoomFacts()
        for ch in self.members(self.link(root, "Chassis"), 16):
            chassis = self.get(ch)
            room.merge(self._chassis(chassis))
        for top in ("Managers", "Systems"):
            for m in self.members(self.link(root, top), 8):
                self._logs(self.link(self.get(m), "LogServices"), room)
        return room

    def _chassis(self, chassis: dict[str, Any] | None) -> R.RoomFacts:
        room = R.RoomFacts()
        ts = self.get(p) if (p := self.link(chassis, "ThermalSubsystem")) else None
        if ts:
            room.merge(parse_doc(ts))
            for f in self.members(self.link(ts, "Fans"), 64):
                room.merge(parse_doc(self.get(f) or {}))
            tm = self.get(p) if (p := self.link(ts, "ThermalMetrics")) else None
            room.merge(parse_doc(tm or {}))
        if not room.temperatures() and (p := self.link(chassis, "Thermal")):
            room.merge(parse_doc(self.get(p) or {}))
        if not (room.temperatures() and room.fans()) and (p := self.link(chassis, "Sensors")):
            self._sensors(p, room)  # BMCs that publish readings only as Sensor resources
        ps = self.get(p) if (p := self.link(chassis, "PowerSubsystem")) else None
        before = len(room.psus)
        if ps:
            room.merge(parse_doc(ps))
            for s in self.members(self.link(ps, "PowerSupplies"), 16):
                doc = self.get(s) or {}
                met = self.get(p) if (p := self.link(doc, "Metrics")) else None
                room.merge(parse_doc(doc, metrics=met))
        if len(room.psus) == before and (p := self.link(chassis, "Power")):
            room.merge(parse_doc(self.get(p) or {}))
        return room

    def _sensors(self, path: str, room: R.RoomFacts) -> None:
        """``Chassis/{id}/Sensors``: temperatures and fans the other documents did not give (a newer BMC
        may expose readings only here; one that also has Thermal keeps those and gains what was missing)."""
        have_temp, have_fan = bool(room.temperatures()), bool(room.fans())
        names = {s.name for s in room.sensors}
        for m in self.members(path, MAX_SENSORS):
            part = parse_doc(self.get(m) or {})
            part.sensors = [
                x
                for x in part.sensors
                if x.name not in names
                and not ((x.kind == R.TEMPERATURE and have_temp) or (x.kind == R.FAN and have_fan))
            ]
            names.update(x.name for x in part.sensors)
            room.merge(part)

    def _logs(self, services: str | None, room: R.RoomFacts) -> None:
        for svc_path in self.members(services, 16):
            svc = self.get(svc_path) or {}
            kind = str(svc.get("LogEntryType") or "")
            sid = str(svc.get("Id") or svc_path.rstrip("/").rsplit("/", 1)[-1])
            if "audit" in sid.lower() or not (kind in ("SEL", "Event", "Multiple") or _LOG_IDS.search(sid)):
                continue
            entries = self.link(svc, "Entries")
            doc = self.get(entries) if entries else None
            if doc is None:
                continue
            members = [m for m in doc.get("Members") or [] if isinstance(m, dict)]
            full = [m for m in members if "Message" in m or "EntryCode" in m or "MessageId" in m]
            if len(full) < len(members):  # links only: read the newest few one by one
                for m in members[-50:]:
                    if "@odata.id" in m and (e := self.get(str(m["@odata.id"]))):
                        full.append(e)
            part = _log_entries({"Members": full[-self.max_events :]}, f"redfish {sid}")
            room.merge(part)
            room.events_read = True
