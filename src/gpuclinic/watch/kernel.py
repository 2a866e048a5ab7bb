"""Kernel-log events for the agent: follow logs live and turn XID/AER/GSP lines into conditions.

Parsing and following belong to :mod:`gpuclinic.sources.kernel_log` (the doctor's parser, every log
format in the wild).  Until that module is present this falls back to a small built-in tailer and an
XID/fallen-off-bus/AER matcher, so the agent still alerts on the events that matter most.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge.codes import severity
from gpuclinic.model import Severity
from gpuclinic.watch.events import Condition

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\): "
                  r"(?P<xid>\d+),\s*(?P<rest>.*)")
_PID = re.compile(r"pid=['\"]?(?P<pid>\d+)")
_NAME = re.compile(r"name=(?P<name>[^,]+)")
_FALLEN = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)"
                     r":? GPU has fallen off the bus")
_AER = re.compile(r"(?:pcieport|nvidia) (?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d).*AER: "
                  r"(?P<what>.*)")
_GSP = re.compile(r"NVRM: .*GSP.*(?:timeout|error|failed)", re.I)
_UPTIME = re.compile(r"^\[\s*(?P<up>\d+\.\d+)\]")


def _fallback_parse(lines: Iterable[str], origin: str | None = None) -> Iterator[KernelEvent]:
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        up = _UPTIME.match(line)
        uptime = float(up.group("up")) if up else None
        m = _XID.search(line)
        if m:
            rest = m.group("rest")
            pid = _PID.search(rest)
            name = _NAME.search(rest)
            yield KernelEvent(kind="xid", line=line, uptime_s=uptime, pci_bus_id=normalize_bus_id(m.group("bus")),
                              xid=int(m.group("xid")), pid=int(pid.group("pid")) if pid else None,
                              process=name.group("name").strip() if name else None, message=rest, origin=origin,
                              lineno=n)
            continue
        m2 = _FALLEN.search(line)
        if m2:
            yield KernelEvent(kind="fallen_off_bus", line=line, uptime_s=uptime,
                              pci_bus_id=normalize_bus_id(m2.group("bus")), message="GPU has fallen off the bus",
                              origin=origin, lineno=n)
            continue
        m3 = _AER.search(line)
        if m3:
            yield KernelEvent(kind="aer", line=line, uptime_s=uptime, pci_bus_id=normalize_bus_id(m3.group("bus")),
                              message=m3.group("what"), origin=origin, lineno=n)
            continue
        if _GSP.search(line):
            yield KernelEvent(kind="gsp", line=line, uptime_s=uptime, message=line, origin=origin, lineno=n)


class LineParser:
    """Stateful line -> KernelEvent parser (multi-line messages need state across lines)."""

    def __init__(self, origin: str | None = None) -> None:
        self.origin = origin
        try:
            self._parse: Any = importlib.import_module("gpuclinic.sources.kernel_log").parse_lines
        except (ImportError, AttributeError):
            self._parse = _fallback_parse

    def feed(self, lines: list[str]) -> list[KernelEvent]:
        try:
            return list(self._parse(lines, self.origin))
        except Exception:  # a parser bug must not stop alerting: use the built-in matcher
            return list(_fallback_parse(lines, self.origin))


def _tail_files(paths: Sequence[str], stop: threading.Event, poll_s: float = 0.1) -> Iterator[str | None]:
    """Yield lines appended to ``paths`` (from their current end), surviving rotation and truncation.

    Yields ``None`` when idle so the caller can check ``stop``.
    """
    state: dict[str, tuple[int, int, Any]] = {}  # path -> (inode, offset, handle)

    def _open(p: str, at_end: bool) -> None:
        try:
            fh = open(p, "rb")
        except OSError:
            return
        st = os.fstat(fh.fileno())
        if at_end:
            fh.seek(0, os.SEEK_END)
        state[p] = (st.st_ino, fh.tell(), fh)

    for p in paths:
        _open(p, True)
    partial: dict[str, bytes] = {}
    while not stop.is_set():
        got = False
        for p in paths:
            if p not in state:
                _open(p, False)  # created (or re-created after rotation) since
                if p not in state:
                    continue
            ino, off, fh = state[p]
            data = fh.read()
            if data:
                got = True
                buf = partial.get(p, b"") + data
                *full, rest = buf.split(b"\n")
                partial[p] = rest
                for raw in full:
                    yield raw.decode("utf-8", "replace")
            state[p] = (ino, fh.tell(), fh)
            try:
                st = os.stat(p)
            except OSError:
                st = None
            if st is None or st.st_ino != ino or st.st_size < fh.tell():
                # rotated away or truncated: finish the old file, then read the new one from its start
                rest_data = fh.read()
                if rest_data:
                    for raw in (partial.pop(p, b"") + rest_data).split(b"\n"):
                        if raw:
                            yield raw.decode("utf-8", "replace")
                fh.close()
                del state[p]
                partial.pop(p, None)
                if st is not None:
                    _open(p, False)
        if not got:
            yield None
            time.sleep(poll_s)
    for _, _, fh in state.values():
        fh.close()


def follow_events(paths: Sequence[str] | None, stop: threading.Event) -> Iterator[KernelEvent | None]:
    """Kernel events as they are written (None when idle).  Live log when ``paths`` is None."""
    try:
        fol: Any = getattr(importlib.import_module("gpuclinic.sources.kernel_log"), "follow", None)
    except ImportError:
        fol = None
    if fol is not None:
        try:
            yield from fol(list(paths) if paths else None, stop, from_end=True, poll_s=0.1)
        except TypeError:  # an older follow() without poll_s
            yield from fol(list(paths) if paths else None, stop, from_end=True)
        return
    if not paths:
        return  # live following needs the kernel-log source
    parser = LineParser(origin=",".join(paths))
    for line in _tail_files(paths, stop):
        if line is None:
            yield None
            continue
        yield from parser.feed([line])


def xid_details(xid: int) -> tuple[Severity, str, str]:
    """(severity, title, remedy) for an Xid: the catalog's, exactly as doctor reports a fresh one."""
    from gpuclinic.knowledge.xid import lookup, unknown

    info = lookup(xid) or unknown(xid)
    title = info.description.split(". ")[0].split(": ", 1)[0].rstrip(".")
    remedy = " ".join(info.steps()) or info.description
    return info.severity, title, remedy + f" (`gpuclinic runbook xid.{xid}`)"


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
                         severity=severity("gpu.fallen_off_bus"), title=f"{where} has fallen off the bus", gpu=idx,
                         uuid=uuid, evidence=[line], remedy="Drain the node and reboot: a GPU reset cannot reach a GPU "
                         "that left the bus (`gpuclinic runbook gpu.fallen_off_bus`).", data={"pci_bus_id": bus},
                         hold_s=hold_s)
    if ev.kind == "aer":
        text = (ev.message or ev.line).lower()
        corrected = "corrected" in text and "uncorrected" not in text
        fatal = "fatal" in text and "non-fatal" not in text and "nonfatal" not in text
        code = "pcie.aer_corrected" if corrected else "pcie.aer_uncorrected"
        # one corrected error is "a few" to the doctor too (info); an uncorrected one is critical when fatal
        sev = severity(code, "few") if corrected else severity(code) if fatal else severity(code, "non_fatal")
        return Condition(key=f"kernel:{code}:{bus or '?'}", code=code, severity=sev,
                         title=f"PCIe AER error at {bus or 'a PCIe device'}", gpu=idx, uuid=uuid, evidence=[line],
                         remedy="PCIe errors point at a marginal link (riser, slot, cable). Run `gpuclinic doctor` for "
                         "link state; ask the provider to reseat the GPU if they repeat.", data={"pci_bus_id": bus},
                         hold_s=hold_s)
    if ev.kind == "gsp":
        return Condition(key=f"kernel:gsp.error:{bus or '?'}", code="gsp.error", severity=severity("gsp.error"),
                         title=f"GSP firmware error on {where}", gpu=idx, uuid=uuid, evidence=[line],
                         remedy="GSP firmware timeouts often need a GPU reset or reboot; if they repeat, try a newer "
                         "driver branch.", data={"pci_bus_id": bus}, hold_s=hold_s)
    return None
