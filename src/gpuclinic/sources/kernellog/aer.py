"""PCIe AER records: a "received from" line, its detail header, then status/mask, bit and TLP lines
assembled into one event per error (native AER and firmware-first/APEI layouts).

Kept apart from the line dispatch (:mod:`.parse`) and the NVIDIA driver messages (:mod:`.nvrm`): an AER
record spans lines and devices (root port, downstream GPU), so it is assembled, not matched line by line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog.formats import _Prefix
from gpuclinic.sources.kernellog.patterns import (
    _CORRECTABLE_BITS,
    _RE_AER_BIT,
    _RE_AER_BUS,
    _RE_AER_DOWNSTREAM,
    _RE_AER_FW_LAYER,
    _RE_AER_FW_STATUS,
    _RE_AER_RECOVERY,
    _RE_AER_RECV,
    _RE_AER_STATUS,
    _bus,
    _norm_bus,
    _norm_sev,
)


class _Aer:
    """The AER record being assembled and the device it is about."""

    __slots__ = ("device", "event")

    def __init__(self, event: KernelEvent, device: str | None) -> None:
        self.event = event
        self.device = device


class AerReaders:
    """Mixin: AER record assembly; state lives in the parser (the open record, the pending "received"
    line, the APEI severity, the last reporter)."""

    _aer: _Aer | None
    _recv: KernelEvent | None
    _hw_sev: str | None
    _last_reporter: tuple[str, int] | None
    _last_aer: KernelEvent | None
    nvidia_devices: set[str]

    if TYPE_CHECKING:  # provided by KernelLogParser

        def _ev(
            self, kind: str, line: str, msg: str, p: _Prefix, lineno: int | None, **kw: Any
        ) -> KernelEvent: ...

    def _aer_start(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        m = _RE_AER_RECV.search(msg)
        if m:
            self._flush_aer(out)
            sev = _norm_sev(m.group("sev"), m.group("fatal"))
            src = m.group("src")
            src_bus = _norm_bus(src) if ":" in src else None
            prev = self._recv
            if (
                prev is not None
                and prev.detail.get("reporter") == _norm_bus(m.group("dev"))
                and (prev.pci_bus_id, prev.detail.get("source_id")) == (src_bus, None if src_bus else src)
            ):
                # "Multiple ... received" right after the single report of the same source: one record
                self._recv = None
                multiple = bool(m.group("multi")) or bool(prev.detail.get("multiple"))
            else:
                self._flush_recv(out)
                multiple = bool(m.group("multi"))
            self._last_reporter = (_norm_bus(m.group("dev")), 12)
            self._recv = self._ev(
                "aer",
                line,
                msg,
                p,
                lineno,
                pci_bus_id=src_bus,
                detail={
                    "severity": sev,
                    "reporter": _norm_bus(m.group("dev")),
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
            dev = _norm_bus(m.group("dev"))
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
            dev = _norm_bus(m.group("dev"))
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
                    pci_bus_id=_norm_bus(m.group("dev")),
                    detail={
                        "severity": "recovery",
                        "recovery": m.group("res"),
                        "device": _norm_bus(m.group("dev")),
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
        if m and _norm_bus(m.group("dev")) == a.device:
            a.event.detail["vendor_device"] = m.group("vd").lower()
            a.event.detail["status"] = m.group("status")
            a.event.detail["mask"] = m.group("mask")
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        m = _RE_AER_BIT.search(msg)
        if m and _norm_bus(m.group("dev")) == a.device:
            bits = a.event.detail.setdefault("bits", [])
            bits.append(m.group("name").strip())
            if m.group("first"):
                a.event.detail["first"] = m.group("name").strip()
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        m = _RE_AER_FW_LAYER.search(msg)
        if m and _norm_bus(m.group("dev")) == a.device:
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

