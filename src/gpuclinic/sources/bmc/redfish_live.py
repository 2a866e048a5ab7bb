"""Redfish live client: a bounded, read-only walk of a BMC's Redfish service (see :mod:`.redfish` for the
documents it reads).

Log services are found by ``LogEntryType`` (SEL, Event) or by their vendor ids (Dell ``Sel``, HPE
``IML``/``IEL``, Lenovo ``PlatformLog``, OpenBMC ``EventLog``) rather than hard-coded paths. Every request
is a GET with a timeout, inside an overall deadline.
"""

from __future__ import annotations

import re
import time
from typing import Any

from gpuclinic import lazyre
from gpuclinic.facts import room as R
from gpuclinic.sources.bmc.redfish import log_entries, parse_doc

_LOG_IDS = lazyre.compile(r"sel|event|iml|iel|platform|^log\d*$|systemlog|lclog|faultlog", re.I)
MAX_DOCS = 300
MAX_SENSORS = 160  # members of one chassis's Sensors collection (a GPU server lists ~100)
MAX_PROCESSORS = 16  # members of one system's Processors (an HGX baseboard: 8 GPUs; a host: 2 CPUs)


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
            room.merge(parse_doc(chassis or {}))  # the chassis's own Status (redfish_health)
        for top in ("Managers", "Systems"):
            for m in self.members(self.link(root, top), 8):
                doc = self.get(m)
                self._logs(self.link(doc, "LogServices"), room)
                if top == "Systems":  # the system's Status and its processors': an HGX board's GPUs
                    room.merge(parse_doc(doc or {}))
                    for cpu in self.members(self.link(doc, "Processors"), MAX_PROCESSORS):
                        room.merge(parse_doc(self.get(cpu) or {}))
        if cond := self.link(root, "ServiceConditions"):  # Redfish 2023.1+: every open condition, one list
            room.merge(parse_doc(self.get(cond) or {}))
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
            part = log_entries({"Members": full[-self.max_events :]}, f"redfish {sid}")
            room.merge(part)
            room.events_read = True
