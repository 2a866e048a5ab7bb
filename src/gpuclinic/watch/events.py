"""Events: a problem that opened at one time and (maybe) resolved at another.

Rules and doctor runs describe what is wrong *now* as :class:`Condition` objects; :class:`EventBook`
turns the stream of conditions into events with opened/resolved times, so alerts fire once per onset
and a "resolved" notice follows when the condition has been gone for a hold-down time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.model import Family, Finding, GpuRef, Incident, Severity


@dataclass
class Condition:
    """Something true at one evaluation: the would-be event, keyed for de-duplication."""

    key: str  # stable identity, e.g. "rules:thermal.slowdown:gpu0:hw_thermal_slowdown"
    code: str  # finding code when one exists (xid.79, thermal.slowdown), else watch.*
    severity: Severity
    title: str
    gpu: int | None = None
    uuid: str | None = None
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    hold_s: float | None = None  # keep open this long after last seen (point events such as an XID)

    @classmethod
    def of_finding(cls, f: Finding, key: str, source: str) -> Condition:
        """A detector finding as a condition (the doctor thread's and the BMC poller's one mapping)."""
        return cls(
            key=key,
            code=f.code,
            severity=f.severity,
            title=f.title,
            gpu=f.gpu.index if f.gpu else None,
            uuid=f.gpu.uuid if f.gpu else None,
            evidence=list(f.evidence),
            remedy=condition_remedy(f),
            data={"family": f.family.value, "source": source},
        )


def condition_remedy(f: Finding) -> str:
    """What a watch event built from a detector finding advises: the finding's remedy as the one function
    decides it (``runbooks.finding_remedy``) and the pointer to the whole runbook (``runbooks.remedy``),
    like every other watch event and alert."""
    from gpuclinic.knowledge.runbooks import finding_remedy, remedy

    return remedy(f.code, f.gpu, finding_remedy(f.code, f.gpu, f.remedy))


@dataclass
class Event:
    key: str
    code: str
    severity: Severity
    title: str
    opened: float
    gpu: int | None = None
    uuid: str | None = None
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    resolved: float | None = None
    last_seen: float = 0.0
    count: int = 1
    id: int | None = None  # row id in the store
    hold_s: float | None = None

    @property
    def open(self) -> bool:
        return self.resolved is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "key": self.key, "code": self.code, "severity": self.severity.label,
            "title": self.title, "gpu": self.gpu, "uuid": self.uuid, "evidence": list(self.evidence),
            "remedy": self.remedy, "data": self.data, "opened": self.opened, "resolved": self.resolved,
            "last_seen": self.last_seen, "count": self.count,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        return cls(
            key=d["key"],
            code=d["code"],
            severity=Severity[str(d["severity"]).upper()],
            title=d.get("title", ""),
            opened=float(d["opened"]),
            gpu=d.get("gpu"),
            uuid=d.get("uuid"),
            evidence=list(d.get("evidence") or []),
            remedy=d.get("remedy") or "",
            data=dict(d.get("data") or {}),
            resolved=d.get("resolved"),
            last_seen=float(d.get("last_seen") or d["opened"]),
            count=int(d.get("count") or 1),
            id=d.get("id"),
        )


Listener = Callable[[Event, str], None]  # (event, "opened" | "updated" | "escalated" | "resolved")


def _matches(code: str, disabled: list[str]) -> bool:
    return any(
        code == d or (d.endswith(".") and code.startswith(d)) or code.startswith(d + ".") for d in disabled
    )


class EventBook:
    """Open/update/resolve events from conditions; thread-safe; calls listeners outside no lock."""

    def __init__(self, *, resolve_after_s: float = 5.0, disabled: list[str] | None = None) -> None:
        self.resolve_after_s = resolve_after_s
        self.disabled = list(disabled or [])
        self._open: dict[str, Event] = {}
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self.recent_resolved: list[Event] = []  # bounded, newest last, for the dashboard

    def subscribe(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def open_events(self) -> list[Event]:
        with self._lock:
            return sorted(self._open.values(), key=lambda e: (-int(e.severity), e.opened))

    def restore(self, events: list[Event]) -> None:
        """Adopt events still open in the store after a restart (so they can resolve, not re-alert)."""
        with self._lock:
            for ev in events:
                if ev.open:
                    self._open[ev.key] = ev

    def _emit(self, ev: Event, what: str) -> None:
        for fn in self._listeners:
            fn(ev, what)

    def raise_condition(self, c: Condition, now: float) -> Event | None:
        """A point observation (kernel event, counter rise): open, or refresh an open event."""
        if _matches(c.code, self.disabled):
            return None
        with self._lock:
            ev = self._open.get(c.key)
            if ev is None:
                ev = Event(
                    key=c.key,
                    code=c.code,
                    severity=c.severity,
                    title=c.title,
                    opened=now,
                    gpu=c.gpu,
                    uuid=c.uuid,
                    evidence=list(c.evidence),
                    remedy=c.remedy,
                    data=dict(c.data),
                    last_seen=now,
                    hold_s=c.hold_s,
                )
                self._open[c.key] = ev
                what = "opened"
            else:
                ev.last_seen = now
                ev.data.update(c.data)
                escalated = c.severity > ev.severity
                if escalated:
                    ev.severity, ev.title, ev.evidence, ev.remedy = (
                        c.severity,
                        c.title,
                        list(c.evidence),
                        c.remedy,
                    )
                if c.hold_s is not None:  # a repeated point event (same XID again): count it
                    ev.count += 1
                    ev.evidence = list(c.evidence)
                    ev.hold_s = c.hold_s
                elif not escalated:
                    return ev  # steady condition: nothing new to store or tell anyone
                what = "escalated" if escalated else "updated"
        self._emit(ev, what)
        return ev

    def reconcile(self, source: str, conditions: list[Condition], now: float) -> None:
        """Conditions of ``source`` true now; open events of that source not among them may resolve."""
        present = set()
        for c in conditions:
            present.add(c.key)
            self.raise_condition(c, now)
        prefix = source + ":"
        with self._lock:
            gone = [
                ev
                for k, ev in self._open.items()
                if k.startswith(prefix)
                and k not in present
                and ev.hold_s is None
                and now - ev.last_seen >= self.resolve_after_s
            ]
        for ev in gone:
            self.resolve(ev.key, now)

    def expire(self, now: float) -> None:
        """Resolve point events whose hold time ran out."""
        with self._lock:
            gone = [
                ev for ev in self._open.values() if ev.hold_s is not None and now - ev.last_seen >= ev.hold_s
            ]
        for ev in gone:
            self.resolve(ev.key, now)

    def resolve(self, key: str, now: float, note: str | None = None) -> Event | None:
        with self._lock:
            ev = self._open.pop(key, None)
            if ev is None:
                return None
            ev.resolved = now
            ev.data["duration_s"] = round(now - ev.opened, 3)
            if note:
                ev.evidence.append(note)
            self.recent_resolved.append(ev)
            del self.recent_resolved[:-200]
        self._emit(ev, "resolved")
        return ev


# ------------------------------------------------------------------------------------------------------------
# ---
# incidents: the open events grouped by root cause (knowledge/data/correlation.json), alerted once each


@dataclass
class TrackedIncident:
    """An incident as the agent tracks it: its first id stays its identity while its root may change."""

    id: str
    incident: Incident
    members: set[str]  # event keys
    opened: float
    notified: bool = False
    notified_severity: Severity | None = None
    resolved: float | None = None
    fired: Incident | None = None  # as it was when it fired: the resolved message names the same cause

    @property
    def shown(self) -> Incident:
        return self.fired or self.incident


IncidentListener = Callable[[TrackedIncident, str], None]  # (incident, "firing" | "escalated" | "resolved")


def event_finding(ev: Event) -> Finding:
    """An open event as a finding, so the doctor's incident rules group watch events too."""
    from gpuclinic.knowledge.codes import info

    ci = info(ev.code)
    fam = ci.family if ci is not None and ci.code != "xid.*" else Family.GPU_FAULT
    bus = ev.data.get("pci_bus_id") if isinstance(ev.data.get("pci_bus_id"), str) else None
    gpu = (
        GpuRef(index=ev.gpu, pci_bus_id=bus, uuid=ev.uuid) if (ev.gpu is not None or ev.uuid or bus) else None
    )
    return Finding(
        code=ev.code,
        severity=ev.severity,
        family=fam,
        title=ev.title,
        evidence=list(ev.evidence),
        remedy=ev.remedy,
        gpu=gpu,
        data={"first_s": ev.opened, "event_key": ev.key},
    )


class IncidentTracker:
    """Groups open events into incidents; tells listeners once when one fires, worsens or resolves.

    A warning waits ``grace_s`` after its first event before it fires, so a cause and the symptoms that
    arrive with it make one alert; a critical one fires at once.  Either way the incident keeps its
    identity when later events join it or re-root it (the Xid 79 line, then the lost GPU, then the
    dropped GPU count are one alert, not three).
    """

    def __init__(self, *, grace_s: float = 3.0) -> None:
        self.grace_s = grace_s
        self._open: dict[str, TrackedIncident] = {}
        self._lock = threading.RLock()
        self._listeners: list[IncidentListener] = []
        self.recent_resolved: list[TrackedIncident] = []

    def subscribe(self, fn: IncidentListener) -> None:
        self._listeners.append(fn)

    def open_incidents(self) -> list[TrackedIncident]:
        with self._lock:
            return sorted(self._open.values(), key=lambda t: (-int(t.incident.severity), t.opened))

    def update(self, events: list[Event], now: float) -> None:
        """Regroup the open ``events``; fire, escalate or resolve incidents as needed."""
        from gpuclinic.diagnose import first_step_for
        from gpuclinic.incidents import group

        fs = [event_finding(e) for e in events]
        groups = group(fs, first_step=first_step_for)
        notes: list[tuple[TrackedIncident, str]] = []
        with self._lock:
            seen: set[str] = set()
            for inc in groups:
                keys = {str(f.data["event_key"]) for f in fs if f.incident == inc.id}
                cur = next((t for t in self._open.values() if t.members & keys and t.id not in seen), None)
                if cur is None:
                    cur = TrackedIncident(id=inc.id, incident=inc, members=keys, opened=now)
                    self._open[cur.id] = cur
                else:
                    cur.incident, cur.members = inc, keys
                seen.add(cur.id)
                if inc.severity == Severity.INFO:
                    pass  # information is shown, never alerted
                elif not cur.notified and (
                    inc.severity == Severity.CRITICAL or now - cur.opened >= self.grace_s
                ):
                    cur.notified, cur.notified_severity, cur.fired = True, inc.severity, inc
                    notes.append((cur, "firing"))
                elif (
                    cur.notified
                    and cur.notified_severity is not None
                    and inc.severity > cur.notified_severity
                ):
                    cur.notified_severity, cur.fired = inc.severity, inc
                    notes.append((cur, "escalated"))
            for tid in [t for t in self._open if t not in seen]:
                done = self._open.pop(tid)
                done.resolved = now
                self.recent_resolved.append(done)
                del self.recent_resolved[:-200]
                if done.notified:
                    notes.append((done, "resolved"))
        for t, what in notes:
            for fn in self._listeners:
                fn(t, what)
