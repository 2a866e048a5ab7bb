"""Saved BMC/hwmon outputs for ``doctor --from`` and ``explain``: one ``claims``/``parse`` pair per format.

``evidence.py`` asks :func:`detect` for a kind and hands the text to :func:`apply`; everything else
about these formats lives here, so the evidence reader's own refactors need not touch it.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuclinic.facts.room import RoomFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import sniffgates
from gpuclinic.sources.bmc import freeipmi, ipmitool, lmsensors, logutil, racadm, redfish, salvage, vendorlog

PREFIX = "room:"
_JSON_KINDS = ("redfish", "sensors_json")  # they say themselves where they were cut (RoomFacts.partial)

# kind -> (claims, parse); checked in this order (JSON formats first: they are unambiguous)
FORMATS: dict[str, tuple[Callable[[str], bool], Callable[[str], RoomFacts]]] = {
    "redfish": (redfish.claims, redfish.parse_text),
    "sensors_json": (lmsensors.claims_json, lmsensors.parse_json),
    "freeipmi_sensors": (freeipmi.claims_sensors, freeipmi.parse_sensors),
    "freeipmi_sel": (freeipmi.claims_sel, freeipmi.parse_sel),
    "freeipmi_sensors_old": (freeipmi.claims_sensors_old, freeipmi.parse_sensors_old),
    "openbmc_logutil": (logutil.claims, logutil.parse),
    "vendor_event_log": (vendorlog.claims, vendorlog.parse),
    "ipmitool": (ipmitool.claims, ipmitool.parse_any),
    "racadm_sensorinfo": (racadm.claims, racadm.parse),
    "sensors_raw": (lmsensors.claims_raw, lmsensors.parse_raw),
    "sensors_text": (lmsensors.claims_text, lmsensors.parse_text),
}


# kind -> the literals its sniffer needs (sniffgates): a sample known to hold none of them is not that kind
GATES: dict[str, tuple[str, ...]] = {
    "redfish": sniffgates.REDFISH,
    "sensors_json": sniffgates.SENSORS_JSON,
    "openbmc_logutil": sniffgates.OPENBMC_LOGUTIL,
    "vendor_event_log": sniffgates.VENDOR_LOG,
    "sensors_raw": sniffgates.SENSORS_TEXT,
    "sensors_text": sniffgates.SENSORS_TEXT,
}


# formats of several outputs, each gated on its own (the format's sniffer takes ``absent``)
_PARTS_GATED: dict[str, Callable[[str, frozenset[str]], bool]] = {"ipmitool": ipmitool.claims}


def detect(sample: str, absent: frozenset[str] = frozenset()) -> str | None:
    """``room:<format>`` when ``sample`` is a BMC/hwmon output we read, else None.  ``absent``: literals
    known not to be in ``sample``; a format whose sniffer needs only those is not asked."""
    for kind, (claims, _) in FORMATS.items():
        gate = GATES.get(kind)
        if gate is not None and absent.issuperset(gate):
            continue
        try:
            if claims(sample) if kind not in _PARTS_GATED else _PARTS_GATED[kind](sample, absent):
                return PREFIX + kind
        except Exception:  # a recogniser's bug must not hide the other formats
            continue
    return None


def parse(kind: str, text: str) -> RoomFacts:
    return FORMATS[kind.removeprefix(PREFIX)][1](text)


def apply(snap: Snapshot, kind: str, text: str, origin: str) -> None:
    """Parse ``text`` and fold it into ``snap.room``; raises ValueError when it holds nothing usable."""
    try:
        room = parse(kind, text)
    except ValueError as e:
        raise ValueError(
            f"{kind.removeprefix(PREFIX)} output could not be read ({type(e).__name__})"
        ) from None
    if not (
        room.sensors
        or room.psus
        or room.events_read
        or room.chassis
        or room.fru
        or room.power_consumed_w is not None
        or room.redundancy
        or room.components  # the Status of a system, GPU, memory module ... (redfish_health)
        or room.partial  # recognised, and why its figures are not usable is said (evidence.partial)
    ):
        name = kind.removeprefix(PREFIX)
        raise ValueError(f"{name} output holds no sensor, power supply, event or part health")
    cut = None if kind.removeprefix(PREFIX) in _JSON_KINDS else salvage.cut_last_row(text)
    for why in [*room.partial, *([cut] if cut else [])]:
        salvage.note_partial(snap, origin, why)
    if snap.room is None:
        snap.room = RoomFacts()
    snap.room.merge(room)
    redfish.prefer_new_model(snap.room)
    snap.room.bmc = snap.room.bmc or "saved output"
