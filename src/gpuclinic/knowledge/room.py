"""Server-room knowledge: sensor-name roles, SEL/Redfish event classes and room thresholds.

The data lives in ``knowledge/data/room_signatures.json`` and ``room_thresholds.json`` (each entry
with its source); this module only compiles and looks it up.
"""

from __future__ import annotations

import re
from functools import cache

from gpuclinic.knowledge import load_data
from gpuclinic.record import record

SIGNATURES_FILE = "room_signatures.json"
THRESHOLDS_FILE = "room_thresholds.json"


@record(frozen=True)
class EventClass:
    """A kind of BMC event (SEL line): the pattern that recognises it and its severity."""

    kind: str
    pattern: re.Pattern[str]
    severity: str  # warning | critical
    source: str
    # kinds that, logged alongside, explain this one (a machine check decoded into an EDAC memory error)
    explained_by: tuple[str, ...] = ()
    # the BMC's own severities this class takes when no pattern recognises an event (none: a pattern class)
    by_severity: tuple[str, ...] = ()


@cache
def room_threshold(name: str) -> float:
    """A value from ``room_thresholds.json``."""
    return float(load_data(THRESHOLDS_FILE)[name]["value"])


def threshold_source(name: str) -> str:
    return str(load_data(THRESHOLDS_FILE)[name]["source"])


@cache
def _roles() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((r["role"], re.compile(r["pattern"], re.I)) for r in load_data(SIGNATURES_FILE)["roles"])


@cache
def _inlet_exclude() -> re.Pattern[str]:
    return re.compile(load_data(SIGNATURES_FILE)["inlet_exclude"]["pattern"], re.I)


def role_for(name: str, context: str | None = None) -> str | None:
    """Which air/part a temperature sensor measures, from its Redfish context or its name.

    Only air entering the chassis counts as inlet: a riser's, a PSU's or a DIMM bank's "inlet" sensor
    reads air already heated inside (``inlet_exclude``).
    """
    if context:
        ctx = load_data(SIGNATURES_FILE)["redfish_context_roles"]
        if context in ctx and context != "source":
            return str(ctx[context])
    for role, pat in _roles():
        if pat.search(name):
            if role == "inlet" and _inlet_exclude().search(name):
                continue
            return role
    return None


@cache
def event_classes() -> tuple[EventClass, ...]:
    return tuple(EventClass(e["kind"], re.compile(e["pattern"], re.I), e["severity"], e["source"],
                            tuple(e.get("explained_by", ())), tuple(e.get("by_severity", ())))
                 for e in load_data(SIGNATURES_FILE)["events"])


def class_by_severity(severity: str | None) -> EventClass | None:
    """The class of an event no pattern recognises but the BMC itself rates Warning or Critical (a
    Redfish LogEntry's Severity, an IML class): the BMC's word is evidence, never dropped."""
    sev = (severity or "").strip().lower()
    return next((e for e in event_classes() if sev and sev in e.by_severity), None)


def classify_event(sensor_type: str | None, sensor: str | None, description: str) -> EventClass | None:
    """The first event class whose pattern matches ``"<type> <sensor> | <description>"``."""
    text = f"{sensor_type or ''} {sensor or ''} | {description}".strip()
    for ec in event_classes():
        if ec.pattern.search(text):
            return ec
    return None


def event_class(kind: str) -> EventClass | None:
    return next((e for e in event_classes() if e.kind == kind), None)
