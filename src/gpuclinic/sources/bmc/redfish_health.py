"""Redfish ``Status`` of the parts a BMC rates besides air and power: systems, chassis, processors and GPUs,
memory, drives, adapters, and the service's list of open conditions -> :class:`ComponentHealth`.

Why a reader of its own: an HGX or DGX baseboard's BMC reports a failing GPU as a ``Processor`` with
``ProcessorType: GPU`` and ``Health: Critical``, and a server whose own parts are fine still carries
``HealthRollup: Warning`` for a fan or DIMM below it, with the reason in ``Status.Conditions`` (Redfish
2023.1 on).  These documents were no Redfish at all to the room reader, so a saved one with a critical GPU
read as nothing.  The thermal and power documents stay with ``redfish.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuclinic.facts import room as R

# the resource types whose Status is read here (their collections too, when expanded)
TYPES = (
    "ComputerSystem",
    "Chassis",
    "Processor",
    "Memory",
    "Drive",
    "Storage",
    "PCIeDevice",
    "NetworkAdapter",
    "Manager",
    "ServiceConditions",
)
COLLECTIONS = tuple(f"{t}Collection" for t in TYPES if t != "ServiceConditions")
_LEVELS = ("ok", "warning", "critical")


def level(value: Any) -> str | None:
    """A Redfish Health or Severity word normalised (``OK``/``Warning``/``Critical``), else None."""
    v = str(value or "").strip().lower()
    return v if v in _LEVELS else None


def _origin(c: dict[str, Any]) -> str:
    o = c.get("OriginOfCondition")
    return str(o.get("@odata.id") or "") if isinstance(o, dict) else str(o or "")


def condition_text(c: dict[str, Any]) -> str:
    """One ``Conditions`` entry as a line: its severity, message (or message id) and the part it names."""
    msg = str(c.get("Message") or c.get("MessageId") or "").strip()
    sev = str(c.get("Severity") or "").strip()
    origin = _origin(c)
    return (f"{sev}: " if sev else "") + msg + (f" ({origin})" if origin else "")


def _conditions(st: dict[str, Any]) -> list[str]:
    return [condition_text(c) for c in st.get("Conditions") or [] if isinstance(c, dict)]


def _name(doc: dict[str, Any], kind: str) -> str:
    """Name and Id, once: "DIMM B7" (Id DIMM_B7), "GPU_SXM_3" (Name GPU), "Processor CPU1"."""
    name, ident = str(doc.get("Name") or "").strip(), str(doc.get("Id") or "").strip()
    n, i = R.name_key(name), R.name_key(ident)
    if not n or not i or i in n:
        return name or ident or kind
    return ident if n in i else f"{name} {ident}"


def read(doc: dict[str, Any], kind: str, src: str = "redfish") -> R.RoomFacts:
    """One document of a type in :data:`TYPES` -> its component health (nothing when it gives no Status)."""
    uri = str(doc.get("@odata.id") or "")
    if kind == "ServiceConditions":  # the service's own list: one entry per open condition
        comps = [
            R.ComponentHealth(
                name=_origin(c).rstrip("/").rsplit("/", 1)[-1] or "service",
                kind=R.CONDITION,
                health=level(c.get("Severity")),
                conditions=[condition_text(c)],
                source=f"{src} ServiceConditions {_origin(c)}".strip(),
            )
            for c in doc.get("Conditions") or []
            if isinstance(c, dict)
        ]
        rollup = level(doc.get("HealthRollup"))
        if not comps and rollup is not None:
            comps = [R.ComponentHealth(name="service", kind=kind, rollup=rollup, source=f"{src} {kind}")]
        return R.RoomFacts(components=comps)
    raw = doc.get("Status")
    st: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if not st:
        return R.RoomFacts()
    comp = R.ComponentHealth(
        name=_name(doc, kind),
        kind=kind,
        health=level(st.get("Health")),
        rollup=level(st.get("HealthRollup")),
        state=str(st["State"]) if st.get("State") else None,
        conditions=_conditions(st),
        gpu=kind == "Processor" and str(doc.get("ProcessorType") or "").upper() == "GPU",
        source=f"{src} {kind} {uri}".strip(),
    )
    return R.RoomFacts(components=[comp])


def reader(kind: str) -> Callable[[dict[str, Any], str], R.RoomFacts]:
    """:func:`read` for documents of one type, as the room reader's table of readers takes it."""
    return lambda doc, src: read(doc, kind, src)
