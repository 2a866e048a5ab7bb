"""The NVIDIA driver's messages (Xid, SXid, GSP, init failures, NVLink, module load, the multi-line
"fallen off the bus"), each turned into events: the per-family extractors of :class:`.parse.KernelLogParser`.

Kept apart from the line dispatch (:mod:`.parse`) and the PCIe AER records (:mod:`.aer`): each family's
message grammar changes with driver releases, and is read and tested on its own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuclinic import lazyre
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog.formats import _Prefix
from gpuclinic.sources.kernellog.patterns import (
    _BDF,
    _MODULE_PATTERNS,
    _RE_API_MISMATCH,
    _RE_CAUSED,
    _RE_DRIVER_LOADED,
    _RE_FOB_MULTI,
    _RE_FOB_ONE,
    _RE_GPU_N,
    _RE_GSP,
    _RE_GSP_TIMEOUT,
    _RE_INIT,
    _RE_LINK,
    _RE_MODESET_LOADED,
    _RE_NAME,
    _RE_NOT_SUPPORTED,
    _RE_NVL5,
    _RE_NVLINK,
    _RE_NVLINK_BAD,
    _RE_NVSWITCH,
    _RE_PID,
    _RE_POWER_CABLES,
    _RE_PROBE,
    _RE_UUID,
    _bus,
    _norm_bus,
)

_RE_MSG_BUS = lazyre.compile(rf"(?:PCI:)?({_BDF})")  # the address in a GSP or NVLink message


def _old_bus(text: str | None) -> str | None:
    """The bus id of an old driver's "Xid (0001:00)" (bus in four hex digits, then the slot)."""
    if not text:
        return None
    b, d = text.split(":")
    return f"0000:{int(b, 16):02x}:{d.lower()}.0" if int(b, 16) < 256 else None


class _Multi:
    """An NVRM message printed over several lines (fallen off the bus, API mismatch, unsupported GPU)."""

    __slots__ = ("kind", "line", "lineno", "parts", "prefix")

    def __init__(
        self, *, kind: str, parts: list[str], line: str, prefix: _Prefix, lineno: int | None
    ) -> None:
        self.kind = kind
        self.parts = parts
        self.line = line
        self.prefix = prefix
        self.lineno = lineno


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
    if "failed to process received event" in low:  # an RC (channel error) event from GSP, lost
        return "error"
    return "rpc"


class NvrmReaders:
    """Mixin: the NVRM/Xid/SXid readers; state lives in the parser (``_multi``, the last Xid's bus, SXid
    records)."""

    _multi: _Multi | None
    _last_xid_bus: str | None
    _last_xid_countdown: int
    _sxid_seen: set[tuple[str | None, int]]
    _sxid_orphans: dict[tuple[str | None, int], KernelEvent]
    _gsp_ahead: list[KernelEvent]  # GSP banner heads waiting for the Xid line they announce

    if TYPE_CHECKING:  # provided by KernelLogParser

        def _ev(
            self, kind: str, line: str, msg: str, p: _Prefix, lineno: int | None, **kw: Any
        ) -> KernelEvent: ...

    def _xid(self, m: re.Match[str], line: str, msg: str, p: _Prefix, lineno: int | None) -> KernelEvent:
        bus = _norm_bus(m.group("bus")) if m.group("bus") else _old_bus(m.group("old"))
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
            if detail["link"] < 0:  # "Link -1": the unit's error is not one link's
                del detail["link"]
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
        key = (_norm_bus(m.group("bus")), int(m.group("sxid")))
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
            bus = _norm_bus(m.group("bus"))
            d = {"uuid": m.group("uuid")}
            out.append(self._ev("uuid_map", line, msg, p, lineno, pci_bus_id=bus, detail=d))
            return True
        m = _RE_FOB_ONE.search(msg)
        if m:
            out.append(
                self._ev("fallen_off_bus", line, msg, p, lineno, pci_bus_id=_norm_bus(m.group("bus")))
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
            bus = _norm_bus(m.group("bus"))
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
        mb = _RE_MSG_BUS.search(msg)
        named = _norm_bus(mb.group(1)) if mb else None
        ev = self._ev("gsp", line, msg, p, lineno, pci_bus_id=named, detail=d)
        if mb is None and "_kgspLog" in msg and ("GSP Timeout" in msg or "check logs above" in msg):
            # the head of _kgspLogXid119's banner: the Xid line it announces comes next and names the GPU
            # (the Xid just before it is another GPU's as often as not)
            self._gsp_ahead.append(ev)
            return True
        if named is None:
            ev.pci_bus_id = self._context_bus()
        out.append(ev)
        return True

    def _release_gsp_ahead(self, out: list[KernelEvent], bus: str | None) -> None:
        """Banner heads waiting for their Xid: on ``bus`` (that Xid's), else on the Xid before them."""
        for ev in self._gsp_ahead:
            ev.pci_bus_id = bus
            out.append(ev)
        self._gsp_ahead.clear()

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
        bus = self._bus_in(msg)
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

    def _bus_in(self, msg: str) -> str | None:
        """The PCI address a GSP or NVLink message names, else the one of the Xid just before it."""
        mb = _RE_MSG_BUS.search(msg)
        return _norm_bus(mb.group(1)) if mb else self._context_bus()

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
                        pci_bus_id=_norm_bus(m.group("bus")),
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
                        pci_bus_id=_norm_bus(m.group("bus")),
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

