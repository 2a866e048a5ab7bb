"""Kernel-log events for the agent: follow logs live and turn XID/AER/GSP lines into conditions.

Parsing and following belong to the kernel-log subsystem (:mod:`gpuclinic.sources.kernellog`, the
doctor's parser, every log format in the wild).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge.xid import lookup
from gpuclinic.model import Severity
from gpuclinic.sources.kernellog import KernelLogParser
from gpuclinic.sources.kernellog.follow import follow
from gpuclinic.watch.events import Condition

# XIDs that mean the GPU (or its memory/link) failed, per NVIDIA's XID catalog; others are mostly
# application faults.  Used only when gpuclinic.knowledge.xid is not available.
_CRITICAL_XIDS = {48, 54, 61, 62, 63, 64, 74, 79, 92, 94, 95, 109, 110, 119, 120, 122, 123, 124, 136, 140, 143,
                  144, 145, 146, 149, 150, 154, 155, 156, 157, 158}
_APP_XIDS = {13, 31, 43, 45, 68, 69}

class LineParser:
    """Stateful line -> KernelEvent parser (the kernel-log subsystem's, every log format)."""

    def __init__(self, origin: str | None = None) -> None:
        self.origin = origin
        self._parser = KernelLogParser(origin=origin)

    def feed(self, lines: list[str]) -> list[KernelEvent]:
        out: list[KernelEvent] = []
        for line in lines:
            out.extend(self._parser.feed(line))
        out.extend(self._parser.flush())
        return out


def follow_events(paths: Sequence[str] | None, stop: threading.Event) -> Iterator[KernelEvent | None]:
    """Kernel events as they are written.  Live log when ``paths`` is None."""
    yield from follow(list(paths) if paths else None, stop, from_end=True, poll_s=0.1)


def xid_details(xid: int) -> tuple[Severity, str, str]:
    """(severity, title, remedy) for an XID from the catalog, else from the built-in short list."""
    info: Any = lookup(xid)
    if info is not None:
        sev = info.severity if isinstance(getattr(info, "severity", None), Severity) else (
            Severity.CRITICAL if xid in _CRITICAL_XIDS else Severity.WARNING)
        title = str(getattr(info, "catalog_description", None) or getattr(info, "name", None) or "")
        steps = info.steps() if hasattr(info, "steps") else []
        remedy = " ".join(str(x) for x in steps) or str(getattr(info, "description", "") or "")
        if title and remedy:
            return sev, title, remedy
    if xid == 79:
        return (Severity.CRITICAL, "GPU has fallen off the bus",
                "The GPU stopped answering on PCIe. Drain the node, save logs, reboot; if it recurs, ask the provider "
                "to check the slot, riser, power and the GPU itself.")
    if xid in _CRITICAL_XIDS:
        return (Severity.CRITICAL, "hardware/driver fault",
                "A GPU-side failure: drain the GPU, save logs (`gpuclinic capture`), reset the GPU or reboot, and "
                "report the XID to the provider if it repeats.")
    if xid in _APP_XIDS:
        return (Severity.WARNING, "application fault (bad memory access, exception or timeout)",
                "Usually a bug or OOB access in the job; check the job's own error output. If many different jobs hit "
                "it, suspect the GPU.")
    return (Severity.WARNING, "driver-reported GPU error",
            "Look the XID up in NVIDIA's XID catalog (`gpuclinic explain 'Xid ...'`) and save logs.")


def condition_for(ev: KernelEvent, gpus_by_bus: dict[str, tuple[int, str | None]], hold_s: float) -> Condition | None:
    """A kernel event as an event condition (held open ``hold_s`` after the last occurrence)."""
    bus = normalize_bus_id(ev.pci_bus_id) if ev.pci_bus_id else None
    idx, uuid = gpus_by_bus.get(bus or "", (None, None))
    where = f"GPU {idx}" if idx is not None else (f"GPU {bus}" if bus else "a GPU")
    line = ev.line.strip()[:400]
    if ev.kind == "xid" and ev.xid is not None:
        sev, title, remedy = xid_details(ev.xid)
        return Condition(key=f"kernel:xid.{ev.xid}:{bus or '?'}", code=f"xid.{ev.xid}", severity=sev,
                         title=f"XID {ev.xid} on {where}: {title}", gpu=idx, uuid=uuid, evidence=[line], remedy=remedy,
                         data={"xid": ev.xid, "pci_bus_id": bus, "pid": ev.pid, "process": ev.process}, hold_s=hold_s)
    if ev.kind == "fallen_off_bus":
        return Condition(key=f"kernel:gpu.fallen_off_bus:{bus or '?'}", code="gpu.fallen_off_bus",
                         severity=Severity.CRITICAL, title=f"{where} has fallen off the bus", gpu=idx, uuid=uuid,
                         evidence=[line], remedy="Drain the node and reboot; ask the provider to inspect slot, riser, "
                         "power and GPU if it recurs.", data={"pci_bus_id": bus}, hold_s=hold_s)
    if ev.kind == "aer":
        fatal = "fatal" in (ev.message or ev.line).lower() and "non-fatal" not in (ev.message or ev.line).lower()
        return Condition(key=f"kernel:pcie.aer:{bus or '?'}", code="pcie.aer",
                         severity=Severity.CRITICAL if fatal else Severity.WARNING,
                         title=f"PCIe AER error at {bus or 'a PCIe device'}", gpu=idx, uuid=uuid, evidence=[line],
                         remedy="PCIe errors point at a marginal link (riser, slot, cable). Run `gpuclinic doctor` for "
                         "link state; ask the provider to reseat the GPU if they repeat.", data={"pci_bus_id": bus},
                         hold_s=hold_s)
    if ev.kind == "gsp":
        return Condition(key=f"kernel:gpu.gsp_error:{bus or '?'}", code="gpu.gsp_error", severity=Severity.WARNING,
                         title=f"GSP firmware error on {where}", gpu=idx, uuid=uuid, evidence=[line],
                         remedy="GSP firmware timeouts often need a GPU reset or reboot; if they repeat, try a newer "
                         "driver branch.", data={"pci_bus_id": bus}, hold_s=hold_s)
    return None
