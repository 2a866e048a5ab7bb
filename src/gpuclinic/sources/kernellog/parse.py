"""The stateful kernel-log parser: lines in any prefix format -> :class:`KernelEvent` objects."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.sources.kernellog.formats import (
    _RE_GLUE,
    CONTEXT_LINES,
    MAX_LINE_CHARS,
    _is_candidate,
    _looks_glued,
    _Prefix,
    _starts_new,
    _wants_context,
    _windows,
    split_prefix,
)
from gpuclinic.sources.kernellog.patterns import (
    _BDF,
    _CORRECTABLE_BITS,
    _MODULE_PATTERNS,
    _RE_AER_BIT,
    _RE_AER_BUS,
    _RE_AER_DOWNSTREAM,
    _RE_AER_FW_LAYER,
    _RE_AER_FW_STATUS,
    _RE_AER_RECOVERY,
    _RE_AER_RECV,
    _RE_AER_STATUS,
    _RE_API_MISMATCH,
    _RE_CAUSED,
    _RE_DRIVER_LOADED,
    _RE_FOB_MULTI,
    _RE_FOB_ONE,
    _RE_GPU_N,
    _RE_GSP,
    _RE_GSP_TIMEOUT,
    _RE_HW_SEV,
    _RE_INIT,
    _RE_LIMITED,
    _RE_LINK,
    _RE_MODESET_LOADED,
    _RE_NAME,
    _RE_NOT_SUPPORTED,
    _RE_NVL5,
    _RE_NVLINK,
    _RE_NVLINK_BAD,
    _RE_NVSWITCH,
    _RE_PCI_ENUM,
    _RE_PID,
    _RE_POWER_CABLES,
    _RE_PROBE,
    _RE_SXID,
    _RE_UUID,
    _RE_XID,
    _bus,
    _norm_sev,
)

# --------------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------------


@dataclass
class _Aer:
    event: KernelEvent
    device: str | None


@dataclass
class _Multi:
    """An NVRM message printed over several lines (fallen off the bus, API mismatch, unsupported GPU)."""

    kind: str
    parts: list[str]
    line: str
    prefix: _Prefix
    lineno: int | None


def _gsp_kind(low: str) -> str:
    """What a GSP line reports, from its lower-cased text (first matching word wins)."""
    if "heartbeat" in low:
        return "heartbeat"
    if "crash" in low or "halt" in low or "exception" in low:
        return "crash"
    if "needs to be reset" in low or "reset required" in low:
        return "reset_required"
    if "gsp timeout" in low or ("timeout" in low and "rpc" in low):
        return "rpc_timeout"
    if "init" in low or "bootstrap" in low or "gsp firmware" in low:
        return "init"
    if "logxid" in low or "gsp error" in low:
        return "xid_report"
    return "rpc"


class KernelLogParser:
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
            self.nvidia_devices.add(normalize_bus_id(m.group("dev")))

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
            out.append(self._xid(m, line, msg, p, lineno))
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
            self.nvidia_devices.add(normalize_bus_id(m.group("dev")))
            return True
        return False

    def _xid(self, m: re.Match[str], line: str, msg: str, p: _Prefix, lineno: int | None) -> KernelEvent:
        bus = normalize_bus_id(m.group("bus")) if m.group("bus") else None
        if bus is None:
            detail_bus = {"bus_redacted": True}
        else:
            detail_bus = {}
        rest = m.group("rest").strip()
        pid: int | None = None
        proc: str | None = None
        detail: dict[str, Any] = {}
        mp = _RE_PID.match(rest)
        if mp:
            v = mp.group("pid").strip("'")
            pid = int(v) if v.isdigit() else None
            rest = rest[mp.end() :]
        mn = _RE_NAME.match(rest)
        if mn:
            nm = mn.group("name").strip()
            proc = None if nm in ("<unknown>", "'<unknown>'", "") else nm
            rest = rest[mn.end() :]
        if m.group("gi"):
            detail["gpu_instance"] = m.group("gi")
        if m.group("ci"):
            detail["compute_instance"] = m.group("ci")
        mc = _RE_CAUSED.search(rest)
        if mc:
            detail["caused_by_xid"] = int(mc.group(1))
        m5 = _RE_NVL5.match(rest)
        if m5:
            detail.update(
                {
                    "unit": m5.group("unit"),
                    "fatal": m5.group("sev") == "Fatal",
                    "xc": m5.group("xc"),
                    "instance": m5.group("inst"),
                    "link": int(m5.group("link")),
                    "words": m5.group("words").split(),
                }
            )
        else:
            ml = _RE_LINK.search(rest)
            if ml and ("NVLink" in rest or "nvlink" in rest.lower() or "Link" in rest):
                detail["link"] = int(ml.group(1))
        self._last_xid_bus = bus
        self._last_xid_countdown = 40
        return self._ev(
            "xid",
            line,
            msg,
            p,
            lineno,
            pci_bus_id=bus,
            xid=int(m.group("xid")),
            pid=pid,
            process=proc,
            detail={"text": rest.strip(), **detail, **detail_bus},
        )

    def _sxid(
        self, m: re.Match[str], line: str, msg: str, p: _Prefix, lineno: int | None
    ) -> KernelEvent | None:
        rest = m.group("rest").strip()
        key = (normalize_bus_id(m.group("bus")), int(m.group("sxid")))
        continuation = bool(re.match(r"^(?:Severity \d|Data \{|Data\s*0x)", rest))
        if continuation and key in self._sxid_seen:
            return None  # a Severity/Data line of a record whose header was read
        if not continuation:
            self._sxid_seen.add(key)
            self._sxid_orphans.pop(key, None)
        detail: dict[str, Any] = {"sxid": key[1], "text": rest}
        low = rest.lower()
        if low.startswith("non-fatal") or low.startswith("nonfatal"):
            detail["fatal"] = False
        elif low.startswith("fatal"):
            detail["fatal"] = True
        ml = _RE_LINK.search(rest)
        if ml:
            detail["link"] = int(ml.group(1))
        sw = _RE_NVSWITCH.search(msg)
        if sw:
            detail["nvswitch"] = int(sw.group(1))
        ev = self._ev("sxid", line, msg, p, lineno, pci_bus_id=key[0], detail=detail)
        if continuation:
            # records of several switches interleave: the header may still come; if it never does, this
            # line is the only trace of that SXid and flush() reports it
            self._sxid_orphans.setdefault(key, ev)
            return None
        return ev

    def _nvrm(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        """An NVIDIA driver message: the first reader (in this order) that knows it turns it into events."""
        return any(
            read(line, msg, p, lineno, out)
            for read in (
                self._nvrm_identity,
                self._nvrm_gsp_timeout,
                self._nvrm_init,
                self._nvrm_gsp,
                self._nvrm_nvlink,
                self._nvrm_module,
            )
        )

    def _nvrm_identity(
        self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]
    ) -> bool:
        """UUID <-> bus id lines, the one-line "fallen off the bus", the start of a multi-line message."""
        m = _RE_UUID.search(msg)
        if m:
            bus = normalize_bus_id(m.group("bus"))
            d = {"uuid": m.group("uuid")}
            out.append(self._ev("uuid_map", line, msg, p, lineno, pci_bus_id=bus, detail=d))
            return True
        m = _RE_FOB_ONE.search(msg)
        if m:
            out.append(
                self._ev("fallen_off_bus", line, msg, p, lineno, pci_bus_id=normalize_bus_id(m.group("bus")))
            )
            return True
        if "The NVIDIA GPU" in msg or "API mismatch" in msg:
            kind = "api_mismatch" if "API mismatch" in msg else "gpu_message"
            idx = msg.find("The NVIDIA GPU") if kind == "gpu_message" else msg.find("API mismatch")
            self._multi = _Multi(kind=kind, parts=[msg[idx:].strip()], line=line, prefix=p, lineno=lineno)
            self._try_complete_multi(out)
            return True
        return False

    def _nvrm_gsp_timeout(
        self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]
    ) -> bool:
        m = _RE_GSP_TIMEOUT.search(msg)
        if not m:
            return False
        d: dict[str, Any] = {
            "gsp": "rpc_timeout",
            "timeout_s": int(m.group("secs")),
            "gpu_instance": int(m.group("gpu")),
        }
        if m.group("fn"):
            d["function"] = f"{m.group('fn')} ({m.group('fname')})"
        out.append(self._ev("gsp", line, msg, p, lineno, pci_bus_id=self._context_bus(), detail=d))
        return True

    def _nvrm_init(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        """The GPU did not initialise: RmInitAdapter and friends, a failed probe, unplugged power cables."""
        m = _RE_INIT.search(msg)
        if m:
            d: dict[str, Any] = {"what": m.group("what").rstrip("!")}
            if m.group("code"):
                d["code"] = m.group("code")
            mm = re.search(r"minor number (\d+)", msg)
            if mm:
                d["minor"] = int(mm.group(1))
            out.append(
                self._ev("init_failed", line, msg, p, lineno, pci_bus_id=_bus(m.group("bus")), detail=d)
            )
            return True
        m = _RE_PROBE.search(msg)
        if m and "nvidia" in msg:
            d = {"what": "probe failed", "error": int(m.group("err"))}
            bus = normalize_bus_id(m.group("bus"))
            out.append(self._ev("init_failed", line, msg, p, lineno, pci_bus_id=bus, detail=d))
            return True
        m = _RE_POWER_CABLES.search(msg) if ("ower" in msg or "POWER" in msg) else None
        if m:
            d = {"what": "power cables not connected"}
            where = _bus(m.group("bus") or m.group("bus2"))
            out.append(self._ev("init_failed", line, msg, p, lineno, pci_bus_id=where, detail=d))
            return True
        return False

    def _nvrm_gsp(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        if not ("GSP" in msg or "gsp" in msg or "Gsp" in msg or "heartbeat" in msg):
            return False
        m = _RE_GSP.search(msg)
        if not m:
            return False
        d: dict[str, Any] = {"gsp": _gsp_kind(msg.lower())}
        mg = _RE_GPU_N.search(msg)
        if mg:
            d["gpu_instance"] = int(mg.group(1))
        mb = re.search(rf"(?:PCI:)?({_BDF})", msg)
        bus = normalize_bus_id(mb.group(1)) if mb else self._context_bus()
        out.append(self._ev("gsp", line, msg, p, lineno, pci_bus_id=bus, detail=d))
        return True

    def _nvrm_nvlink(
        self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]
    ) -> bool:
        if not (
            _RE_NVLINK.search(msg)
            and _RE_NVLINK_BAD.search(msg)
            and "Nvlink Core is being initialized" not in msg
        ):
            return False
        d: dict[str, Any] = {}
        ml = _RE_LINK.search(msg)
        if ml:
            d["link"] = int(ml.group(1))
        mb = re.search(rf"(?:PCI:)?({_BDF})", msg)
        bus = normalize_bus_id(mb.group(1)) if mb else self._context_bus()
        out.append(self._ev("nvlink", line, msg, p, lineno, pci_bus_id=bus, detail=d))
        return True

    def _nvrm_module(
        self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]
    ) -> bool:
        """The driver loaded (its version), or a kernel-module problem (_MODULE_PATTERNS)."""
        d: dict[str, Any]
        m = _RE_DRIVER_LOADED.search(msg) or _RE_MODESET_LOADED.search(msg)
        if m:
            d = {"module": "loaded", "driver_version": m.group("ver"), "severity": "info"}
            out.append(self._ev("module", line, msg, p, lineno, detail=d))
            return True
        for rx, sub, sev in _MODULE_PATTERNS:
            mm2 = rx.search(msg)
            if mm2:
                d = {"module": sub, "severity": sev}
                gd = mm2.groupdict()
                if gd.get("sym"):
                    d["symbol"] = gd["sym"]
                if gd.get("n"):
                    d["devices"] = int(gd["n"])
                mb = re.search(rf"({_BDF})", msg)
                out.append(
                    self._ev(
                        "module", line, msg, p, lineno, pci_bus_id=_bus(mb.group(1)) if mb else None, detail=d
                    )
                )
                return True
        return False

    def _context_bus(self) -> str | None:
        return self._last_xid_bus if self._last_xid_countdown > 0 else None

    def _try_complete_multi(self, out: list[KernelEvent]) -> bool:
        mu = self._multi
        if mu is None:
            return False
        text = " ".join(mu.parts)
        if mu.kind == "gpu_message":
            m = _RE_FOB_MULTI.search(text)
            if m:
                d: dict[str, Any] = {"multiline": len(mu.parts) > 1}
                if m.group("pciid"):
                    d["pci_id"] = m.group("pciid").lower()
                out.append(
                    self._ev(
                        "fallen_off_bus",
                        mu.line,
                        "NVRM: " + text,
                        mu.prefix,
                        mu.lineno,
                        pci_bus_id=normalize_bus_id(m.group("bus")),
                        detail=d,
                    )
                )
                self._multi = None
                return True
            m = _RE_NOT_SUPPORTED.search(text)
            if m and re.search(r"driver\b|release\b|nvidia\.ko|GSP", m.group("rest")):
                out.append(
                    self._ev(
                        "module",
                        mu.line,
                        "NVRM: " + text,
                        mu.prefix,
                        mu.lineno,
                        pci_bus_id=normalize_bus_id(m.group("bus")),
                        detail={
                            "module": "gpu_not_supported",
                            "severity": "critical",
                            "pci_id": (m.group("pciid") or "").lower() or None,
                        },
                    )
                )
                self._multi = None
                return True
        elif mu.kind == "api_mismatch":
            m = _RE_API_MISMATCH.search(text)
            if m:
                d = {
                    "module": "api_mismatch",
                    "severity": "critical",
                    "client_version": m.group("client"),
                    "kernel_version": m.group("kernel"),
                }
                if m.group("who"):
                    d["client_process"] = m.group("who")
                out.append(self._ev("module", mu.line, "NVRM: " + text, mu.prefix, mu.lineno, detail=d))
                self._multi = None
                return True
        return False

    def _flush_multi(self, out: list[KernelEvent]) -> None:
        mu = self._multi
        self._multi = None
        if mu is None:
            return
        if mu.kind == "api_mismatch":
            out.append(
                self._ev(
                    "module",
                    mu.line,
                    "NVRM: " + " ".join(mu.parts),
                    mu.prefix,
                    mu.lineno,
                    detail={"module": "api_mismatch", "severity": "critical"},
                )
            )

    # -- AER ------------------------------------------------------------------------------------
    def _aer_start(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        m = _RE_AER_RECV.search(msg)
        if m:
            self._flush_aer(out)
            sev = _norm_sev(m.group("sev"), m.group("fatal"))
            src = m.group("src")
            src_bus = normalize_bus_id(src) if ":" in src else None
            prev = self._recv
            if (
                prev is not None
                and prev.detail.get("reporter") == normalize_bus_id(m.group("dev"))
                and (prev.pci_bus_id, prev.detail.get("source_id")) == (src_bus, None if src_bus else src)
            ):
                # "Multiple ... received" right after the single report of the same source: one record
                self._recv = None
                multiple = bool(m.group("multi")) or bool(prev.detail.get("multiple"))
            else:
                self._flush_recv(out)
                multiple = bool(m.group("multi"))
            self._last_reporter = (normalize_bus_id(m.group("dev")), 12)
            self._recv = self._ev(
                "aer",
                line,
                msg,
                p,
                lineno,
                pci_bus_id=src_bus,
                detail={
                    "severity": sev,
                    "reporter": normalize_bus_id(m.group("dev")),
                    "device": src_bus,
                    "multiple": multiple,
                    "source_id": None if src_bus else src,
                },
            )
            return True
        m = _RE_AER_BUS.search(msg)
        if m:
            self._flush_aer(out)
            dev = _bus(m.group("dev"))
            sev = _norm_sev(m.group("sev"), m.group("fatal"))
            d: dict[str, Any] = {
                "severity": sev,
                "type": m.group("type").strip(),
                "agent": m.group("agent"),
                "device": dev,
                "driver": m.group("drv"),
            }
            if m.group("id"):
                d["requester_id"] = m.group("id")
            recv = self._recv
            self._recv = None
            evline, evmsg = line, msg
            if recv is not None:
                d["reporter"] = recv.detail.get("reporter")
                d["multiple"] = recv.detail.get("multiple", False)
                d["received_line"] = recv.line
                if dev is None:
                    dev = recv.pci_bus_id
                    d["device"] = dev
            elif self._last_reporter is not None and self._last_reporter[1] > 0:
                d["reporter"] = self._last_reporter[0]  # same burst as the last "received" line
            else:
                d["reporter"] = dev
            self._aer = _Aer(self._ev("aer", evline, evmsg, p, lineno, pci_bus_id=dev, detail=d), dev)
            return True
        m = _RE_AER_FW_STATUS.search(msg)
        if m:
            self._flush_aer(out)
            dev = normalize_bus_id(m.group("dev"))
            d = {
                "severity": self._hw_sev and _norm_sev(self._hw_sev, None),
                "device": dev,
                "reporter": dev,
                "driver": m.group("drv"),
                "status": m.group("status"),
                "mask": m.group("mask"),
                "firmware_first": True,
            }
            self._hw_sev = None
            self._aer = _Aer(self._ev("aer", line, msg, p, lineno, pci_bus_id=dev, detail=d), dev)
            return True
        m = _RE_AER_DOWNSTREAM.search(msg)
        la = self._aer.event if self._aer is not None else self._last_aer
        if m and la is not None and "recovery" not in msg:
            dev = normalize_bus_id(m.group("dev"))
            if dev not in (la.pci_bus_id, la.detail.get("reporter")):
                below = la.detail.setdefault("downstream", [])
                if dev not in below:
                    below.append(dev)
                if m.group("drv") == "nvidia":
                    la.detail.setdefault("downstream_nvidia", []).append(dev)
            return True
        m = _RE_AER_RECOVERY.search(msg)
        if m:
            self._flush_aer(out)
            self._flush_recv(out)
            out.append(
                self._ev(
                    "aer",
                    line,
                    msg,
                    p,
                    lineno,
                    pci_bus_id=normalize_bus_id(m.group("dev")),
                    detail={
                        "severity": "recovery",
                        "recovery": m.group("res"),
                        "device": normalize_bus_id(m.group("dev")),
                    },
                )
            )
            return True
        return False

    def _aer_continue(self, msg: str, p: _Prefix, out: list[KernelEvent]) -> bool:
        a = self._aer
        if a is None:
            return False
        m = _RE_AER_STATUS.search(msg)
        if m and normalize_bus_id(m.group("dev")) == a.device:
            a.event.detail["vendor_device"] = m.group("vd").lower()
            a.event.detail["status"] = m.group("status")
            a.event.detail["mask"] = m.group("mask")
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        m = _RE_AER_BIT.search(msg)
        if m and normalize_bus_id(m.group("dev")) == a.device:
            bits = a.event.detail.setdefault("bits", [])
            bits.append(m.group("name").strip())
            if m.group("first"):
                a.event.detail["first"] = m.group("name").strip()
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        m = _RE_AER_FW_LAYER.search(msg)
        if m and normalize_bus_id(m.group("dev")) == a.device:
            a.event.detail["type"] = m.group("type").strip()
            a.event.detail["agent"] = m.group("agent").strip()
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        if m is None and ("TLP Header" in msg or "aer_uncor_severity" in msg or "tlp_header" in msg.lower()):
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        return False

    def _flush_aer(self, out: list[KernelEvent]) -> None:
        a = self._aer
        self._aer = None
        if a is None:
            return
        d = a.event.detail
        if not d.get("severity"):
            bits = set(d.get("bits") or [])
            d["severity"] = "corrected" if bits and bits <= _CORRECTABLE_BITS else "unknown"
        if d.get("vendor_device", "").startswith("10de:") and a.device:
            self.nvidia_devices.add(a.device)
        d["nvidia"] = bool(
            d.get("vendor_device", "").startswith("10de:")
            or d.get("driver") == "nvidia"
            or (a.device in self.nvidia_devices)
        )
        self._last_aer = a.event
        out.append(a.event)

    def _flush_recv(self, out: list[KernelEvent]) -> None:
        r = self._recv
        self._recv = None
        if r is not None:
            r.detail["nvidia"] = bool(r.pci_bus_id and r.pci_bus_id in self.nvidia_devices)
            out.append(r)


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
