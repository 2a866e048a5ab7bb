"""Kernel-log events for the agent: follow logs live and turn XID/AER/GSP lines into conditions.

Parsing and following belong to the kernel-log subsystem (:mod:`gpuclinic.sources.kernellog`, the
doctor's parser, every log format in the wild); codes and severities to ``knowledge/data/codes.json``
and the Xid catalog, and the remedy to the code's runbook (its first step, :func:`runbooks.remedy`), so a
line means the same in ``watch`` as in ``doctor --from`` and ``explain`` and points at the same fix.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge.codes import severity
from gpuclinic.knowledge.runbooks import remedy
from gpuclinic.model import GpuRef, Severity
from gpuclinic.sources.kernellog import KernelLogParser
from gpuclinic.sources.kernellog.follow import follow
from gpuclinic.watch.events import Condition


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


def xid_details(xid: int) -> tuple[Severity, str]:
    """(severity, title) for an Xid: the catalog's, exactly as doctor reports a fresh one."""
    from gpuclinic.knowledge.xid import lookup, unknown

    info = lookup(xid) or unknown(xid)
    return info.severity, info.description.split(". ")[0].split(": ", 1)[0].rstrip(".")


def condition_for(
    ev: KernelEvent, gpus_by_bus: dict[str, tuple[int, str | None]], hold_s: float
) -> Condition | None:
    """A kernel event as an event condition (held open ``hold_s`` after the last occurrence)."""
    bus = normalize_bus_id(ev.pci_bus_id) if ev.pci_bus_id else None
    idx, uuid = gpus_by_bus.get(bus or "", (None, None))
    where = f"GPU {idx}" if idx is not None else (f"GPU {bus}" if bus else "a GPU")
    judged = _judge(ev, bus, where)
    if judged is None:
        return None
    code, sev, title, data = judged
    return Condition(
        key=f"kernel:{code}:{bus or '?'}",
        code=code,
        severity=sev,
        title=title,
        gpu=idx,
        uuid=uuid,
        evidence=[ev.line.strip()[:400]],
        remedy=remedy(code, GpuRef(index=idx, pci_bus_id=bus, uuid=uuid)),
        data=data,
        hold_s=hold_s,
    )


def _judge(
    ev: KernelEvent, bus: str | None, where: str
) -> tuple[str, Severity, str, dict[str, Any]] | None:
    """(code, severity, title, data) of a kernel event watch alerts on; None for the others."""
    if ev.kind == "xid" and ev.xid is not None:
        sev, title = xid_details(ev.xid)
        data = {"xid": ev.xid, "pci_bus_id": bus, "pid": ev.pid, "process": ev.process}
        return f"xid.{ev.xid}", sev, f"XID {ev.xid} on {where}: {title}", data
    if ev.kind == "fallen_off_bus":
        code, title = "gpu.fallen_off_bus", f"{where} has fallen off the bus"
    elif ev.kind == "gsp":
        code, title = "gsp.error", f"GSP firmware error on {where}"
    elif ev.kind == "aer":
        from gpuclinic.checks.pcie import aer_level

        level = aer_level(ev)  # the doctor's reading of the line (the parser's AER severity)
        if level is None:
            return None  # a recovery report, not an error
        corrected, fatal = level == "corrected", level == "fatal"
        code = "pcie.aer_corrected" if corrected else "pcie.aer_uncorrected"
        # one corrected error is "a few" to the doctor too (info); an uncorrected one is critical when fatal
        sev = severity(code, "few") if corrected else severity(code) if fatal else severity(code, "non_fatal")
        return code, sev, f"PCIe AER error at {bus or 'a PCIe device'}", {"pci_bus_id": bus}
    else:
        return None
    return code, severity(code), title, {"pci_bus_id": bus}
