"""The stateful kernel-log parser: lines in any prefix format -> :class:`KernelEvent` objects."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog.aer import AerReaders, _Aer
from gpuclinic.sources.kernellog.formats import (
    _RE_GLUE,
    _is_candidate,
    _looks_glued,
    _Prefix,
    _starts_new,
    _wants_context,
    _windows,
    split_prefix,
)
from gpuclinic.sources.kernellog.keywords import (
    CONTEXT_LINES,
    MAX_LINE_CHARS,
)
from gpuclinic.sources.kernellog.nvrm import NvrmReaders, _Multi
from gpuclinic.sources.kernellog.patterns import (
    _RE_HW_SEV,
    _RE_LIMITED,
    _RE_PCI_ENUM,
    _RE_SXID,
    _RE_XID,
    _bus,
    _norm_bus,
)

# --------------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------------


class KernelLogParser(NvrmReaders, AerReaders):
    """Turns kernel log lines into :class:`KernelEvent` objects; keeps state for multi-line messages.

    Feed lines with :meth:`feed`; call :meth:`flush` at the end (or when a live log goes quiet) to
    emit messages still waiting for continuation lines.
    """

    def __init__(self, origin: str | None = None, year: int | None = None) -> None:
        self.origin = origin
        self.year = year
        self._aer: _Aer | None = None
        self._recv: KernelEvent | None = None  # "error message received from X": waits for its details
        self._multi: _Multi | None = None
        self._hw_sev: str | None = None  # APEI "[Hardware Error]: event severity: corrected"
        self._last_reporter: tuple[str, int] | None = None  # (root port, lines it stays valid)
        self._last_aer: KernelEvent | None = None
        self._last_xid_bus: str | None = None
        self._last_xid_countdown = 0
        # SXid records: (switch, SXid) headers seen, and Severity/Data lines whose header is not (yet) seen
        self._sxid_seen: set[tuple[str | None, int]] = set()
        self._sxid_orphans: dict[tuple[str | None, int], KernelEvent] = {}
        self._gsp_ahead: list[KernelEvent] = []
        self.nvidia_devices: set[str] = set()
        self.boot = 0  # how many reboots (uptime resets) were seen so far
        self._last_uptime: float | None = None

    # -- public ---------------------------------------------------------------------------------
    def feed(self, line: str, lineno: int | None = None) -> list[KernelEvent]:
        out: list[KernelEvent] = []
        if len(line) > MAX_LINE_CHARS:
            texts = _windows(line)
        else:
            texts = [line]
        for text in texts:
            if "#012" in text:  # rsyslog escapes the newlines of multi-line messages as "#012"
                text = text.replace("#012", " ")
            parts = _RE_GLUE.split(text) if text.count("NVRM") > 1 or _looks_glued(text) else [text]
            for part in parts:
                if part.strip():
                    self._feed_one(part, lineno, out)
        return out

    def flush(self) -> list[KernelEvent]:
        out: list[KernelEvent] = []
        self._release_gsp_ahead(out, self._context_bus())
        self._flush_multi(out)
        self._flush_aer(out)
        self._flush_recv(out)
        out.extend(self._sxid_orphans.values())
        self._sxid_orphans.clear()
        return out

    # -- internals ------------------------------------------------------------------------------
    def _ev(self, kind: str, line: str, msg: str, p: _Prefix, lineno: int | None, **kw: Any) -> KernelEvent:
        if p.uptime is not None:
            # uptime going backwards means the machine rebooted between these lines
            if self._last_uptime is not None and p.uptime + 30 < self._last_uptime:
                self.boot += 1
            self._last_uptime = p.uptime
        kw.setdefault("detail", {})
        if self.boot:
            kw["detail"]["boot"] = self.boot
        ev = KernelEvent(
            kind=kind,
            line=line.strip()[:MAX_LINE_CHARS],
            time=p.time,
            uptime_s=p.uptime,
            message=msg.strip()[:MAX_LINE_CHARS],
            origin=self.origin,
            lineno=lineno,
            **kw,
        )
        if p.time_text:
            ev.detail["time_text"] = p.time_text  # syslog stamp without a year (any year in time is a guess)
        if p.host:
            ev.detail["host"] = p.host
        return ev

    def _feed_one(self, raw: str, lineno: int | None, out: list[KernelEvent]) -> None:
        aer, recv = self._aer, self._recv
        if aer is None and recv is None and self._multi is None and not _is_candidate(raw):
            return  # a context line with nothing waiting for it
        mark = len(out)
        self._feed_one_inner(raw, lineno, out)
        if len(out) > mark and (aer is not None or recv is not None):
            # a new message arrived while an AER record waited for detail lines: it is complete
            first = [ev for ev in out[mark:] if ev.kind == "aer"]
            if (aer is not None and self._aer is aer) or (recv is not None and self._recv is recv):
                if not first:
                    tmp: list[KernelEvent] = []
                    if self._aer is aer:
                        self._flush_aer(tmp)
                    if self._recv is recv:
                        self._flush_recv(tmp)
                    out[mark:mark] = tmp

    def _feed_one_inner(self, raw: str, lineno: int | None, out: list[KernelEvent]) -> None:
        msg, p = split_prefix(raw, self.year)
        line = raw.rstrip("\r\n")
        if self._last_xid_countdown > 0:
            self._last_xid_countdown -= 1
        if self._last_reporter is not None:
            self._last_reporter = (self._last_reporter[0], self._last_reporter[1] - 1)
        if self._gsp_ahead and not ("Xid" in msg or "_kgspLog" in msg):
            self._release_gsp_ahead(out, self._context_bus())
        # Multi-line NVRM messages: continuation lines start with "NVRM: " and match nothing else.
        if self._multi is not None and self._continue_multi(msg, out):
            return
        # AER continuation lines (status/mask, bits, firmware-first layer)
        if self._aer is not None and self._aer_continue(msg, p, out):
            return
        if "Hardware Error" in msg:
            hw = _RE_HW_SEV.search(msg)
            if hw:
                self._hw_sev = hw.group("sev").lower()
                return
        aerish = "AER" in msg or "Bus Error" in msg or "aer_" in msg
        if "Xid" in msg and self._xid_line(line, msg, p, lineno, out):
            return
        if ("NVRM" in msg or "nvidia" in msg or "NVIDIA" in msg) and not aerish:
            if self._nvrm(line, msg, p, lineno, out):
                return
        if (aerish or "PCIe" in msg) and self._pcie_line(line, msg, p, lineno, out, aerish):
            return
        m = _RE_PCI_ENUM.search(msg) if "10de" in msg else None
        if m:
            self.nvidia_devices.add(_norm_bus(m.group("dev")))

    def _continue_multi(self, msg: str, out: list[KernelEvent]) -> bool:
        """A continuation of the waiting multi-line NVRM message (True: used); else that message ends."""
        assert self._multi is not None
        if msg.startswith("NVRM:") and not _starts_new(msg):
            self._multi.parts.append(msg[5:].strip())
            if not self._try_complete_multi(out) and len(self._multi.parts) >= 6:
                self._flush_multi(out)
            return True
        self._flush_multi(out)
        return False

    def _xid_line(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        m = _RE_XID.search(msg)
        if m:
            self._flush_aer(out)
            xev = self._xid(m, line, msg, p, lineno)
            if self._gsp_ahead:
                self._release_gsp_ahead(out, xev.pci_bus_id)
            out.append(xev)
            return True
        m = _RE_SXID.search(msg)
        if m:
            ev = self._sxid(m, line, msg, p, lineno)
            if ev is not None:
                out.append(ev)
            return True
        return False

    def _pcie_line(
        self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent], aerish: bool
    ) -> bool:
        """An AER record start, a "bandwidth limited by" line, or a PCI enumeration of an NVIDIA device."""
        if aerish and self._aer_start(line, msg, p, lineno, out):
            return True
        m = _RE_LIMITED.search(msg)
        if m:
            dev = _bus(m.group("dev"))
            d = {
                "available_gbps": float(m.group("avail")), "speed_gts": float(m.group("speed")),
                "width": int(m.group("width")), "limited_at": _bus(m.group("at")),
                "capable_gbps": float(m.group("cap")), "capable_speed_gts": float(m.group("capspeed")),
                "capable_width": int(m.group("capwidth")), "nvidia": bool(dev and dev in self.nvidia_devices),
                "driver": m.group("drv"),
            }
            out.append(self._ev("pcie_limited", line, msg, p, lineno, pci_bus_id=dev, detail=d))
            return True
        m = _RE_PCI_ENUM.search(msg)
        if m:
            self.nvidia_devices.add(_norm_bus(m.group("dev")))
            return True
        return False


def parse_lines(
    lines: Iterable[str], origin: str | None = None, *, year: int | None = None
) -> Iterator[KernelEvent]:
    """Parse kernel log lines (any format) into events; stateful across lines for multi-line messages.

    ``year`` completes syslog timestamps that carry none ("Mar  4 10:11:12"); without it such events
    keep the text in ``detail["time_text"]`` and ``time`` stays None.
    """
    yield from parse_numbered(enumerate(lines, start=1), origin, year=year)


def parse_numbered(
    lines: Iterable[tuple[int, str]], origin: str | None = None, *, year: int | None = None
) -> Iterator[KernelEvent]:
    """:func:`parse_lines` for ``(line number, text)`` pairs: kernel lines picked out of a mixed input keep
    their line numbers in it."""
    parser = KernelLogParser(origin, year)
    ctx = 0
    for lineno, line in lines:
        if _is_candidate(line):
            ctx = CONTEXT_LINES if _wants_context(line) else ctx
        elif ctx > 0:
            ctx -= 1
        else:
            continue
        yield from parser.feed(line, lineno)
    yield from parser.flush()
