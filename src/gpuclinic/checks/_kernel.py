"""Helpers shared by the kernel-log detectors (not a check module: the name starts with _).

They group :class:`KernelEvent` objects per GPU (matched by PCI bus id to ``snap.gpus``, or to the UUID
the driver printed for that bus) and make findings whose evidence is the real log lines.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence

from gpuclinic.checks import CheckSkipped
from gpuclinic.checks._hw import threshold
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.model import Family, Finding, GpuRef, Severity

SOURCE = "kernel log"
MAX_EVIDENCE = 4
NVLINK_XIDS = frozenset({74, 108, 136, 137, 144, 145, 146, 147, 148, 149, 150, 155})
# A GPU with this many corrected AER errors, or this rate, is "frequent" (gpu_thresholds.json, with sources).
AER_FREQUENT_COUNT = int(threshold("aer_corrected_warn"))
AER_FREQUENT_PER_HOUR = threshold("aer_corrected_per_hour_warn")


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def _require_log(snap: Snapshot) -> None:
    if not snap.kernel_log_read and not snap.kernel_events:
        raise CheckSkipped("no kernel log was read (see the lines above for why)")


def _uuid_map(snap: Snapshot) -> dict[str, str]:
    return {e.pci_bus_id: str(e.detail["uuid"]) for e in snap.kernel_events
            if e.kind == "uuid_map" and e.pci_bus_id and e.detail.get("uuid")}


def gpu_ref(snap: Snapshot, bus: str | None, uuids: dict[str, str] | None = None) -> GpuRef | None:
    """The GPU a bus id names: from NVML facts when known, else the bus id and the logged UUID."""
    if not bus:
        return None
    g = snap.gpu_by_bus_id(bus)
    if g is not None:
        return GpuRef(index=g.index, pci_bus_id=normalize_bus_id(g.pci_bus_id or bus), uuid=g.uuid)
    uuid = (uuids if uuids is not None else _uuid_map(snap)).get(bus)
    return GpuRef(pci_bus_id=bus, uuid=uuid)


# driver events whose bus id is a GPU's (not a bridge's, as AER reporters are)
_GPU_KINDS = frozenset({"xid", "gsp", "init_failed", "uuid_map", "fallen_off_bus"})


def sole_gpu_bus(snap: Snapshot) -> str | None:
    """The one GPU the driver's kernel lines name, when they name exactly one (else None): a driver line that
    names no GPU (``Cannot initialize GSP firmware RM``, ``GPU0 ... NV_ERR_RESET_REQUIRED``) is that GPU's."""
    gpus = {e.pci_bus_id for e in snap.kernel_events if e.kind in _GPU_KINDS and e.pci_bus_id}
    # and the machine has no other GPU (a live node of 8 whose log names one: the line may be another's)
    gpus |= {normalize_bus_id(g.pci_bus_id) for g in snap.gpus if g.pci_bus_id}
    return next(iter(gpus)) if len(gpus) == 1 and len(snap.gpus) <= 1 else None


def _by_bus(events: Iterable[KernelEvent]) -> dict[str | None, list[KernelEvent]]:
    """The events per PCI bus id (None: lines that name no bus), in log order: one finding per GPU."""
    groups: dict[str | None, list[KernelEvent]] = {}
    for e in events:
        groups.setdefault(e.pci_bus_id, []).append(e)
    return groups


def kernel_finding(
    code: str,
    sev: Severity,
    family: Family,
    title: str,
    group: Sequence[KernelEvent],
    gpu: GpuRef | None,
    data: dict[str, object],
    extra: Iterable[str] = (),
) -> Finding:
    """A finding about a group of kernel-log events: their lines (and ``extra``) are its evidence."""
    return Finding(
        code=code,
        severity=sev,
        family=family,
        title=title,
        evidence=_evidence(group, extra),
        gpu=gpu,
        data=data,
        source=SOURCE,
    )


def _previous_boot_flags(events: Sequence[KernelEvent], snap: Snapshot) -> dict[int, bool]:
    """id(event) -> True when it was logged before the newest boot seen in its own log."""
    last: dict[str | None, int] = {}
    for e in snap.kernel_events:
        b = int(e.detail.get("boot", 0) or 0)
        last[e.origin] = max(last.get(e.origin, 0), b)
    return {
        id(e): bool(e.detail.get("previous_boot"))
        or int(e.detail.get("boot", 0) or 0) < last.get(e.origin, 0)
        for e in events
    }


def _when(e: KernelEvent) -> str | None:
    if e.time:
        return e.time
    if e.detail.get("time_text"):
        return str(e.detail["time_text"])
    if e.uptime_s is not None:
        return f"uptime {e.uptime_s:.1f}s"
    return None


def _seconds(e: KernelEvent) -> float | None:
    """A comparable timestamp in seconds (absolute when known, else uptime)."""
    if e.time:
        try:
            t = _dt.datetime.fromisoformat(e.time)
            if t.tzinfo is None:
                t = t.replace(tzinfo=_dt.timezone.utc)
            return t.timestamp()
        except ValueError:
            pass
    return e.uptime_s


def _span_s(events: Sequence[KernelEvent]) -> float | None:
    secs = [s for s in (_seconds(e) for e in events) if s is not None]
    if len(secs) < 2:
        return None
    return max(secs) - min(secs)


def _evidence(
    events: Sequence[KernelEvent], extra: Iterable[str] = (), limit: int = MAX_EVIDENCE
) -> list[str]:
    """Real log lines: the first ones and the last one, then a count of the rest."""
    lines: list[str] = []
    seen: set[str] = set()
    picks = list(events[: limit - 1]) + ([events[-1]] if len(events) >= limit else [])
    for e in picks:
        if e.line not in seen:
            seen.add(e.line)
            lines.append(e.line)
    if len(events) > len(picks):
        lines.append(f"... {len(events) - len(picks)} more like these")
    for x in extra:
        if x not in seen and len(lines) < limit + 3:
            seen.add(x)
            lines.append(x)
    return lines


def _steps(*parts: str | None) -> str:
    out = [p for p in parts if p]
    uniq: list[str] = []
    for p in out:
        if p not in uniq:
            uniq.append(p)
    return "\n".join(f"{i}. {p}" for i, p in enumerate(uniq, start=1))


def _base_data(events: Sequence[KernelEvent]) -> dict[str, object]:
    d: dict[str, object] = {
        "count": len(events),
        "first_time": _when(events[0]),
        "last_time": _when(events[-1]),
    }
    first = _seconds(events[0])
    if first is not None:
        d["first_s"] = first
    pids = sorted({e.pid for e in events if e.pid is not None})
    procs = sorted({e.process for e in events if e.process})
    if pids:
        d["pids"] = pids[:20]
    if procs:
        d["processes"] = procs[:20]
    origins = sorted({e.origin for e in events if e.origin})
    if origins:
        d["log_sources"] = origins
    return d


def _is_parent_of(snap: Snapshot, bridge: str | None, gpu_bus: str) -> bool:
    if not bridge:
        return False
    for d in snap.pci_devices:
        if (
            normalize_bus_id(d.bus_id) == gpu_bus
            and d.parent_bus_id
            and normalize_bus_id(d.parent_bus_id) == bridge
        ):
            return True
    return False
