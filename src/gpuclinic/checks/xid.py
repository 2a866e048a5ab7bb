"""Checks on kernel log events: Xid, fallen off the bus, init failures, GSP, NVLink/SXid, PCIe AER.

Each check groups :class:`KernelEvent` objects per GPU (matched by PCI bus id to ``snap.gpus``, or
to the UUID the driver printed for that bus) and turns them into findings whose evidence is the real
log lines.  Meaning and NVIDIA's actions come from the Xid catalog (``knowledge/xid.py``).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from gpuclinic.checks import CheckSkipped, check
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge.xid import XidInfo, classify, lookup, unknown
from gpuclinic.model import Family, Finding, GpuRef, Severity

SOURCE = "kernel log"
MAX_EVIDENCE = 4
NVLINK_XIDS = frozenset({74, 108, 136, 137, 144, 145, 146, 147, 148, 149, 150, 155})
# A GPU with this many corrected AER errors, or this rate, is "frequent" (links retrain, replays cost bandwidth).
AER_FREQUENT_COUNT = 100
AER_FREQUENT_PER_HOUR = 10.0


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


def _previous_boot_flags(events: Sequence[KernelEvent], snap: Snapshot) -> dict[int, bool]:
    """id(event) -> True when it was logged before the newest boot seen in its own log."""
    last: dict[str | None, int] = {}
    for e in snap.kernel_events:
        b = int(e.detail.get("boot", 0) or 0)
        last[e.origin] = max(last.get(e.origin, 0), b)
    return {id(e): bool(e.detail.get("previous_boot")) or int(e.detail.get("boot", 0) or 0) < last.get(e.origin, 0)
            for e in events}


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


def _evidence(events: Sequence[KernelEvent], extra: Iterable[str] = (), limit: int = MAX_EVIDENCE) -> list[str]:
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


# --------------------------------------------------------------------------------------------------
# xid.<N>
# --------------------------------------------------------------------------------------------------

_RE_RECOVERY = re.compile(r"from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")


# the catalog category of Xids that report no fault (SMBPBI test messages, recovery-action changes)
INFORMATIONAL = "informational"


@check("xid", codes=["xid.*"], what="Xid errors in the kernel log")
def xid_findings(snap: Snapshot) -> list[Finding]:
    _require_log(snap)
    uuids = _uuid_map(snap)
    xids = [e for e in snap.kernel_events if e.kind == "xid" and e.xid is not None]
    prev = _previous_boot_flags(xids, snap)
    groups: dict[tuple[str | None, int], list[KernelEvent]] = {}
    for e in xids:
        assert e.xid is not None
        groups.setdefault((e.pci_bus_id, e.xid), []).append(e)
    per_bus: dict[str | None, list[KernelEvent]] = {}
    for e in xids:
        per_bus.setdefault(e.pci_bus_id, []).append(e)
    gsp_by_bus: dict[str | None, list[KernelEvent]] = {}
    for e in snap.kernel_events:
        if e.kind == "gsp":
            gsp_by_bus.setdefault(e.pci_bus_id, []).append(e)

    findings: list[Finding] = []
    for (bus, n), evs in groups.items():
        info = lookup(n) or unknown(n)
        sev = info.severity
        family = info.family
        notes: list[str] = []
        if sev == Severity.INFO and info.category != INFORMATIONAL:
            # NVIDIA's bucket is IGNORE, but the driver reported a fault: a node with it is not HEALTHY
            sev = Severity.WARNING
            notes.append("NVIDIA's catalog says no immediate action; it is still a fault the driver reported")
        data = _base_data(evs)
        data.update({
            "xid": n, "name": info.name, "description": info.description, "category": info.category,
            "action": info.action, "nvidia_immediate_action": info.immediate_action,
            "nvidia_investigatory_action": info.investigatory_action, "catalog_source": info.source,
        })
        same_gpu_other = [e for e in per_bus.get(bus, []) if e.xid != n]
        extra_evidence: list[str] = []
        first_step: str | None = None

        if classify(n).application:
            other_gpus = {b for (b, x) in groups if x == n and b != bus}
            distinct = len({e.pid for e in evs if e.pid is not None} | {e.process for e in evs if e.process})
            data["other_gpus_with_same_xid"] = len(other_gpus)
            if len(evs) >= 3 and not other_gpus and distinct >= 2:
                sev = Severity.CRITICAL
                first_step = (f"Xid {n} repeats on this GPU only, from different programs: that points at the "
                              "GPU, not the code. Drain it and run `dcgmi diag -r 3` (and NVIDIA field "
                              "diagnostics if that fails).")
                data["suspect_hardware"] = True
            elif other_gpus:
                notes.append(f"the same Xid also appears on {len(other_gpus)} other GPU(s): most likely the "
                             "application, not this GPU")
        if n == 45:
            causes = sorted({int(c) for e in evs if (c := e.detail.get("caused_by_xid")) is not None}
                            | {x for e in same_gpu_other if (x := e.xid) is not None and x != 45})
            if causes:
                sev = Severity.INFO
                data["caused_by"] = causes
                first_step = ("This Xid only reports cleanup after Xid "
                              + ", ".join(str(c) for c in causes) + ": act on that one.")
        if n == 48:
            follow = sorted({x for e in same_gpu_other if (x := e.xid) in (63, 64)})
            data["followed_by"] = follow
            if follow:
                first_step = (f"Xid 48 was followed by Xid {'/'.join(map(str, follow))}: drain the GPU, let jobs "
                              "finish, then reset it so the bad memory row is remapped"
                              + (" (Xid 64: remapping failed; plan an RMA)" if 64 in follow else "") + ".")
            else:
                first_step = ("Xid 48 was not followed by Xid 63/64: drain the GPU and run field "
                              "diagnostics; check `nvidia-smi -q -d ROW_REMAPPER,ECC`.")
        if n == 154:
            m = next((mm for e in evs if (mm := _RE_RECOVERY.search(e.message or e.line))), None)
            if m:
                new = m.group(2)
                data["recovery_action"] = new
                sev = Severity.INFO if new.strip().lower() == "none" else Severity.CRITICAL
                first_step = f"The driver now asks for: {new}. Do that before giving the GPU new work."
        if n in (119, 120):
            g = gsp_by_bus.get(bus, [])
            extra_evidence = [e.line for e in g[:3]]
            if g:
                data["gsp_lines"] = len(g)
        if n in NVLINK_XIDS:
            links = sorted({int(lk) for e in evs if (lk := e.detail.get("link")) is not None})
            if links:
                data["links"] = links
            units = sorted({str(u) for e in evs if (u := e.detail.get("unit"))})
            if units:
                data["units"] = units
            if n in range(144, 151) and not any(e.detail.get("fatal") for e in evs) and any(
                    "fatal" in e.detail for e in evs):
                sev = min(sev, Severity.WARNING)
                notes.append("all of these NVLink5 errors are marked Nonfatal")
        mig = sorted({str(gi) for e in evs if (gi := e.detail.get("gpu_instance"))})
        if mig:
            data["mig_gpu_instances"] = mig
        if info.is_unused:
            notes.append("NVIDIA lists this code as unused on current GPUs; seeing it is unexpected")

        if all(prev.get(id(e)) for e in evs):
            data["previous_boot"] = True
            sev = Severity.WARNING if sev == Severity.CRITICAL else Severity.INFO
            notes.append("all of these were logged before the last reboot; watch whether it comes back")

        count = len(evs)
        short = info.description.split(". ")[0].split(": ", 1)[0].rstrip(".")
        title = f"Xid {n} ({info.name}): {short}" + (f" — {count} times" if count > 1 else "")
        if notes:
            data["notes"] = notes
        if info.notes:
            data["catalog_notes"] = info.notes
        remedy = _steps(first_step, *info.steps())
        findings.append(Finding(
            code=f"xid.{n}", severity=sev, family=family, title=title,
            evidence=_evidence(evs, extra_evidence), remedy=remedy, gpu=gpu_ref(snap, bus, uuids),
            data=data, source=SOURCE))
    return findings


# --------------------------------------------------------------------------------------------------
# gpu.fallen_off_bus
# --------------------------------------------------------------------------------------------------


@check("kernel.fallen_off_bus", codes=["gpu.fallen_off_bus"], what="GPUs that fell off the bus (kernel log)")
def fallen_off_bus(snap: Snapshot) -> list[Finding]:
    if not snap.kernel_events:
        return []
    uuids = _uuid_map(snap)
    evs = [e for e in snap.kernel_events if e.kind == "fallen_off_bus" or (e.kind == "xid" and e.xid == 79)]
    prev = _previous_boot_flags(evs, snap)
    by_bus: dict[str | None, list[KernelEvent]] = {}
    for e in evs:
        by_bus.setdefault(e.pci_bus_id, []).append(e)
    aer = [e for e in snap.kernel_events if e.kind == "aer"]
    out: list[Finding] = []
    for bus, group in by_bus.items():
        ref = gpu_ref(snap, bus, uuids)
        related = [e for e in aer if bus and (bus in (e.pci_bus_id, e.detail.get("device"), e.detail.get("reporter"))
                                              or bus in (e.detail.get("downstream") or [])
                                              or _is_parent_of(snap, e.detail.get("device") or e.pci_bus_id, bus))]
        data = _base_data(group)
        data["xid79"] = any(e.kind == "xid" for e in group)
        data["aer_events_on_path"] = len(related)
        sev = Severity.CRITICAL
        if all(prev.get(id(e)) for e in group):
            sev = Severity.WARNING
            data["previous_boot"] = True
        g = snap.gpu_by_bus_id(bus) if bus else None
        if g is not None and not g.lost and all(prev.get(id(e)) for e in group):
            data["visible_now"] = True
        label = ref.label() if ref else "A GPU"
        title = f"{label} fell off the PCIe bus: the driver can no longer reach it"
        if sev != Severity.CRITICAL:
            title += " (before the last reboot)"
        remedy = _steps(
            "Drain the server: the GPU cannot be used again without a reboot (a GPU reset cannot reach it).",
            "Reboot the server; if the GPU is still missing in `nvidia-smi`, power-cycle it (cold boot).",
            "Look at what came just before it in the log: PCIe AER errors point at the slot/riser/cable, "
            "Xid 48/62/119 at the GPU, temperature or power events at cooling or the power supply.",
            "If it happens again: check GPU power cables and PSU capacity, temperatures, reseat the GPU, "
            "update the system BIOS and the driver; then ask the provider to replace the GPU.",
        )
        out.append(Finding(
            code="gpu.fallen_off_bus", severity=sev, family=Family.GPU_FAULT, title=title,
            evidence=_evidence(group, [e.line for e in related[-2:]]), remedy=remedy, gpu=ref, data=data,
            source=SOURCE))
    return out


def _is_parent_of(snap: Snapshot, bridge: str | None, gpu_bus: str) -> bool:
    if not bridge:
        return False
    for d in snap.pci_devices:
        if normalize_bus_id(d.bus_id) == gpu_bus and d.parent_bus_id and normalize_bus_id(d.parent_bus_id) == bridge:
            return True
    return False


# --------------------------------------------------------------------------------------------------
# gpu.init_failed
# --------------------------------------------------------------------------------------------------


@check("kernel.init_failed", codes=["gpu.init_failed"], what="GPU initialisation failures (kernel log)")
def init_failed(snap: Snapshot) -> list[Finding]:
    evs = [e for e in snap.kernel_events if e.kind == "init_failed"]
    if not evs:
        return []
    uuids = _uuid_map(snap)
    prev = _previous_boot_flags(evs, snap)
    by_bus: dict[str | None, list[KernelEvent]] = {}
    for e in evs:
        by_bus.setdefault(e.pci_bus_id, []).append(e)
    # lines without a bus id ("rm_init_adapter failed for device bearing minor number 0") join a
    # single GPU's group when only one GPU failed
    if None in by_bus and len(by_bus) == 2:
        other = next(k for k in by_bus if k is not None)
        by_bus[other].extend(by_bus.pop(None))
    out: list[Finding] = []
    for bus, group in by_bus.items():
        ref = gpu_ref(snap, bus, uuids)
        data = _base_data(group)
        whats = sorted({str(e.detail.get("what")) for e in group})
        codes = sorted({str(e.detail["code"]) for e in group if e.detail.get("code")})
        data["what"] = whats
        if codes:
            data["rm_codes"] = codes
        sev = Severity.CRITICAL
        g = snap.gpu_by_bus_id(bus) if bus else None
        if g is not None and not g.lost:
            sev = Severity.WARNING
            data["usable_now"] = True
        if all(prev.get(id(e)) for e in group):
            sev = min(sev, Severity.WARNING)
            data["previous_boot"] = True
        power = any("power" in str(e.detail.get("what")) for e in group)
        label = ref.label() if ref else "A GPU"
        title = f"{label} failed to initialise in the NVIDIA driver ({', '.join(whats)})"
        remedy = _steps(
            "Check the GPU's auxiliary power cables and the power supply: the driver says they are missing."
            if power else None,
            "Run `nvidia-smi`; if the GPU is missing, reload the driver (`modprobe -r nvidia_uvm nvidia_drm "
            "nvidia_modeset nvidia && modprobe nvidia`) or reboot, and read the NVRM lines printed just before.",
            "Make sure the driver supports this GPU and that its firmware matches (GSP firmware ships with the "
            "driver; a partial upgrade breaks it) — reinstall the driver package if unsure.",
            "In the system BIOS enable Above 4G decoding / large BAR support; a GPU without its memory window "
            "cannot initialise.",
            "If it keeps failing on one GPU only, reseat it or ask the provider to replace it.",
        )
        out.append(Finding(code="gpu.init_failed", severity=sev, family=Family.GPU_FAULT, title=title,
                           evidence=_evidence(group), remedy=remedy, gpu=ref, data=data, source=SOURCE))
    return out


# --------------------------------------------------------------------------------------------------
# gsp.error
# --------------------------------------------------------------------------------------------------


@check("kernel.gsp", codes=["gsp.error"], what="GSP firmware errors (kernel log)")
def gsp_error(snap: Snapshot) -> list[Finding]:
    gsp = [e for e in snap.kernel_events if e.kind == "gsp" or (e.kind == "xid" and e.xid in (119, 120))]
    if not gsp:
        return []
    uuids = _uuid_map(snap)
    prev = _previous_boot_flags(gsp, snap)
    by_bus: dict[str | None, list[KernelEvent]] = {}
    for e in gsp:
        by_bus.setdefault(e.pci_bus_id, []).append(e)
    out: list[Finding] = []
    for bus, group in by_bus.items():
        kinds = Counter("rpc_timeout" if e.xid == 119 else "error" if e.xid == 120 else str(e.detail.get("gsp"))
                        for e in group)
        serious = {"rpc_timeout", "error", "crash", "heartbeat", "init", "xid_report"} & set(kinds)
        if not serious:
            continue  # RPC history dumps alone are context, not a fault
        sev = Severity.CRITICAL
        data = _base_data(group)
        data["kinds"] = dict(kinds)
        inst = sorted({int(i) for e in group if (i := e.detail.get("gpu_instance")) is not None})
        if inst:
            data["driver_gpu_numbers"] = inst
        if all(prev.get(id(e)) for e in group):
            sev = Severity.WARNING
            data["previous_boot"] = True
        ref = gpu_ref(snap, bus, uuids)
        label = ref.label() if ref else ("GPU" + (f" (driver GPU{inst[0]})" if inst else ""))
        what = ("stopped answering the driver (RPC timeout)" if "rpc_timeout" in kinds else
                "crashed" if "crash" in kinds else "missed its heartbeat" if "heartbeat" in kinds else
                "failed to start" if "init" in kinds else "reported an error")
        xids = sorted({int(x) for e in group if (x := e.xid) is not None})
        if xids:
            data["xids"] = xids
        title = f"{label}: the GPU System Processor (GSP firmware) {what}"
        remedy = _steps(
            "Stop the jobs on this GPU and reset it (`nvidia-smi -r -i <index>`), or reboot the server.",
            "Update the NVIDIA driver: several GSP RPC timeouts were driver bugs fixed in later releases "
            "(e.g. 525.105.17 fixed the 525-series timeouts).",
            "If it recurs on the current driver, disable GSP offload as a test where the driver allows it "
            "(`NVreg_EnableGpuFirmware=0`, closed kernel modules only) and report it with `nvidia-bug-report.sh`.",
        )
        out.append(Finding(code="gsp.error", severity=sev, family=Family.GPU_FAULT, title=title,
                           evidence=_evidence(group), remedy=remedy, gpu=ref, data=data, source=SOURCE))
    return out


# --------------------------------------------------------------------------------------------------
# nvlink.error (log side)
# --------------------------------------------------------------------------------------------------


@check("kernel.nvlink", codes=["nvlink.error"], what="NVLink and NVSwitch errors (kernel log)")
def nvlink_errors(snap: Snapshot) -> list[Finding]:
    evs = [e for e in snap.kernel_events
           if e.kind in ("nvlink", "sxid") or (e.kind == "xid" and e.xid in NVLINK_XIDS)]
    if not evs:
        return []
    uuids = _uuid_map(snap)
    prev = _previous_boot_flags(evs, snap)
    groups: dict[tuple[str, str | None], list[KernelEvent]] = {}
    for e in evs:
        groups.setdefault(("switch" if e.kind == "sxid" else "gpu", e.pci_bus_id), []).append(e)
    out: list[Finding] = []
    for (where, bus), group in groups.items():
        links = sorted({int(lk) for e in group if (lk := e.detail.get("link")) is not None})
        fatal = any(e.detail.get("fatal") is True or (e.kind == "xid" and e.xid == 74 and "fatal" in (e.message or "").lower())
                    for e in group)
        nonfatal_only = all(e.detail.get("fatal") is False for e in group)
        sev = Severity.CRITICAL if fatal else Severity.WARNING
        if nonfatal_only and len(group) < 10:
            sev = Severity.WARNING
        data = _base_data(group)
        data["links"] = links
        data["fatal"] = fatal
        if all(prev.get(id(e)) for e in group):
            sev = Severity.WARNING if sev == Severity.CRITICAL else Severity.INFO
            data["previous_boot"] = True
        if where == "switch":
            sxids = sorted({int(e.detail["sxid"]) for e in group if "sxid" in e.detail})
            switches = sorted({int(s) for e in group if (s := e.detail.get("nvswitch")) is not None})
            data["sxids"] = sxids
            data["nvswitches"] = switches
            title = (f"NVSwitch {bus} reported {'fatal ' if fatal else ''}SXid "
                     + ", ".join(map(str, sxids)) + (f" on link(s) {', '.join(map(str, links))}" if links else ""))
            ref = None
            remedy = _steps(
                "Check `nvidia-smi nvlink -s` and Fabric Manager's log (`journalctl -u nvidia-fabricmanager`).",
                "A fatal SXid needs the GPUs on that switch reset (or the node rebooted) and Fabric Manager "
                "restarted; drain the node first.",
                "Repeated SXids on the same link point at the NVLink cable/tray: report it to the provider with "
                "`nvidia-bug-report.sh` output.",
            )
        else:
            xids = sorted({int(x) for e in group if (x := e.xid) is not None})
            data["xids"] = xids
            ref = gpu_ref(snap, bus, uuids)
            label = ref.label() if ref else "A GPU"
            title = (f"{label}: {'fatal ' if fatal else ''}NVLink errors"
                     + (f" on link(s) {', '.join(map(str, links))}" if links else "")
                     + (f" (Xid {', '.join(map(str, xids))})" if xids else ""))
            remedy = _steps(
                "Check link state and error counters: `nvidia-smi nvlink -s -i <index>` and `nvidia-smi nvlink -e`.",
                "Fatal NVLink errors need a GPU reset (or reboot) before multi-GPU jobs work again; drain first.",
                "If the same link keeps failing, reseat the NVLink bridge/cable or GPU tray and run "
                "`dcgmi diag -r 3`; then ask the provider to inspect it.",
            )
        out.append(Finding(code="nvlink.error", severity=sev, family=Family.GPU_FAULT, title=title,
                           evidence=_evidence(group), remedy=remedy, gpu=ref, data=data, source=SOURCE))
    return out


# --------------------------------------------------------------------------------------------------
# pcie.aer_corrected / pcie.aer_uncorrected
# --------------------------------------------------------------------------------------------------


def _aer_target(snap: Snapshot, e: KernelEvent) -> tuple[str | None, str]:
    """(GPU bus id or device bus id, where) for an AER event: on the GPU, on the bridge above it, or other."""
    dev = e.detail.get("device") or e.pci_bus_id
    dev = str(dev) if dev else None
    if dev and snap.gpu_by_bus_id(dev) is not None:
        return dev, "gpu"
    if dev:
        for d in snap.pci_devices:
            if d.parent_bus_id and normalize_bus_id(d.parent_bus_id) == dev and d.is_gpu:
                return normalize_bus_id(d.bus_id), "bridge_above_gpu"
        for d in snap.pci_devices:
            if normalize_bus_id(d.bus_id) == dev and d.is_gpu:
                return dev, "gpu"
    if e.detail.get("nvidia"):
        return dev, "gpu"
    # the kernel's recovery lines named the devices below the reporting port: a GPU among them
    below = [str(b) for b in (e.detail.get("downstream") or [])]
    for b in below:
        if snap.gpu_by_bus_id(b) is not None:
            return b, "bridge_above_gpu"
    nv = [str(b) for b in (e.detail.get("downstream_nvidia") or [])]
    if nv:
        return nv[0], "bridge_above_gpu"
    return dev, "other"


@check("kernel.aer", codes=["pcie.aer_corrected", "pcie.aer_uncorrected"], what="PCIe AER errors (kernel log)")
def aer_errors(snap: Snapshot) -> list[Finding]:
    evs = [e for e in snap.kernel_events if e.kind == "aer" and e.detail.get("severity") != "recovery"]
    if not evs:
        return []
    uuids = _uuid_map(snap)
    recov = [e for e in snap.kernel_events if e.kind == "aer" and e.detail.get("severity") == "recovery"]
    topology_known = bool(snap.pci_devices) or bool(snap.gpus)
    groups: dict[tuple[str | None, str, str], list[KernelEvent]] = {}
    for e in evs:
        target, where = _aer_target(snap, e)
        level = str(e.detail.get("severity") or "unknown")
        cls = "corrected" if level == "corrected" else "uncorrected"
        groups.setdefault((target, where, cls), []).append(e)
    out: list[Finding] = []
    for (target, where, cls), group in groups.items():
        if where == "other" and cls == "corrected" and topology_known:
            continue  # corrected errors on a NIC/NVMe path are not a GPU problem
        data = _base_data(group)
        count = len(group)
        data["where"] = where
        data["devices"] = sorted({str(d) for e in group if (d := e.detail.get("device"))})
        data["reporters"] = sorted({str(r) for e in group if (r := e.detail.get("reporter"))})
        data["types"] = dict(Counter(str(e.detail.get("type")) for e in group if e.detail.get("type")))
        bits = Counter(b for e in group for b in (e.detail.get("bits") or []))
        if bits:
            data["error_bits"] = dict(bits)
        multiple = sum(1 for e in group if e.detail.get("multiple"))
        if multiple:
            data["multiple_error_reports"] = multiple
        span = _span_s(group)
        rate_h = (count / (span / 3600.0)) if span and span > 0 else None
        data["span_s"] = span
        data["rate_per_hour"] = round(rate_h, 2) if rate_h is not None else None
        ref = gpu_ref(snap, target, uuids) if where != "other" else None
        label = ref.label() if ref else f"PCIe device {target or '?'}"
        place = {"gpu": "", "bridge_above_gpu": " (on the PCIe bridge/switch port above it)", "other": ""}[where]
        rate_txt = (f"{count} in {span / 3600:.1f} h ({rate_h:.1f}/h)" if rate_h is not None and span
                    else f"{count} logged")
        lines = [ln for e in group[:2] for ln in (e.detail.get("lines") or [])][:3]
        if cls == "corrected":
            frequent = count >= AER_FREQUENT_COUNT or (rate_h is not None and count >= 10
                                                        and rate_h >= AER_FREQUENT_PER_HOUR)
            sev = Severity.WARNING if frequent else Severity.INFO
            data["frequent"] = frequent
            title = f"{label}: PCIe corrected errors (AER){place}: {rate_txt}"
            remedy = _steps(
                "Corrected errors are fixed by the link itself, but each one costs a replay; frequent ones "
                "mean a marginal link that can degrade or drop." if frequent else
                "A few corrected errors are normal; watch whether the count grows.",
                "Compare with `nvidia-smi -q -d PCIE` (replay counter, current vs max link gen/width).",
                "If they keep coming: reseat the GPU/riser/cable, check the slot, update the system BIOS; "
                "ask the provider to move the job or inspect the slot.",
            )
            code = "pcie.aer_corrected"
        else:
            fatal = any(e.detail.get("severity") == "fatal" for e in group)
            sev = Severity.CRITICAL if fatal else Severity.WARNING
            data["fatal"] = fatal
            near = {str(d) for e in group for d in (e.detail.get("device"), e.detail.get("reporter")) if d}
            failed = [e for e in recov if e.detail.get("recovery") == "failed" and e.pci_bus_id in near]
            if failed:
                sev = Severity.CRITICAL
                data["recovery_failed"] = True
                lines.append(failed[0].line)
            kind = "fatal" if fatal else "non-fatal"
            title = f"{label}: PCIe uncorrected ({kind}) errors (AER){place}: {rate_txt}"
            remedy = _steps(
                "Drain the server: an uncorrected PCIe error can corrupt transfers or make the GPU fall off "
                "the bus." if fatal else
                "Check that jobs on this GPU still complete correctly; a non-fatal uncorrected error can "
                "abort transfers.",
                "Reboot to retrain the link, then watch `dmesg` for new AER lines.",
                "Reseat the GPU/riser/cable, check its power, update the system BIOS; if it recurs, ask the "
                "provider to inspect the slot or replace the GPU.",
            )
            code = "pcie.aer_uncorrected"
        out.append(Finding(code=code, severity=sev, family=Family.PCIE_POWER, title=title,
                           evidence=_evidence(group, lines), remedy=remedy, gpu=ref, data=data, source=SOURCE))
    return out


# --------------------------------------------------------------------------------------------------
# pcie.bandwidth_limited (kernel boot message)
# --------------------------------------------------------------------------------------------------


@check("kernel.pcie_limited", codes=["pcie.bandwidth_limited"], what="PCIe bandwidth limits at boot (kernel log)")
def bandwidth_limited(snap: Snapshot) -> list[Finding]:
    evs = [e for e in snap.kernel_events if e.kind == "pcie_limited"]
    if not evs:
        return []
    uuids = _uuid_map(snap)
    nvidia_pci = {normalize_bus_id(d.bus_id) for d in snap.pci_devices if d.is_gpu}
    latest: dict[str, KernelEvent] = {}
    for e in evs:
        if not e.pci_bus_id:
            continue
        is_gpu = (snap.gpu_by_bus_id(e.pci_bus_id) is not None or e.pci_bus_id in nvidia_pci
                  or bool(e.detail.get("nvidia")))
        if is_gpu:
            latest[e.pci_bus_id] = e
    out: list[Finding] = []
    for bus, e in latest.items():
        d = e.detail
        width, cap_w = int(d.get("width", 0)), int(d.get("capable_width", 0))
        narrow = width and cap_w and width < cap_w
        sev = Severity.WARNING if narrow else Severity.INFO
        ref = gpu_ref(snap, bus, uuids)
        label = ref.label() if ref else f"GPU {bus}"
        title = (f"{label}: kernel reports {d.get('available_gbps')} Gb/s available PCIe bandwidth, limited by "
                 f"a {d.get('speed_gts')} GT/s x{width} link at {d.get('limited_at')} (capable of "
                 f"{d.get('capable_gbps')} Gb/s at {d.get('capable_speed_gts')} GT/s x{cap_w})")
        remedy = _steps(
            "The link trained narrower than the GPU supports: check the slot (x16 electrical?), riser and "
            "seating, and the BIOS lane bifurcation settings." if narrow else
            "GPUs lower their link speed when idle, so a speed limit at boot is usually harmless; compare "
            "`nvidia-smi -q -d PCIE` under load.",
            "Under load, `nvidia-smi -q -d PCIE` should show the maximum generation and width.",
        )
        out.append(Finding(code="pcie.bandwidth_limited", severity=sev, family=Family.PCIE_POWER, title=title,
                           evidence=[e.line], remedy=remedy, gpu=ref, data={**d, "narrow": bool(narrow)},
                           source=SOURCE))
    return out


# --------------------------------------------------------------------------------------------------
# driver.kernel_module
# --------------------------------------------------------------------------------------------------

_MODULE_TEXT: dict[str, tuple[str, str]] = {
    "api_mismatch": ("the NVIDIA user-space libraries and the loaded kernel module are different versions",
                     "Reboot so the kernel module matching the installed driver is loaded (or reload it: "
                     "`modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`); in a "
                     "container, do not install a driver inside the image."),
    "unknown_symbol": ("the nvidia module does not fit the running kernel (unknown symbol)",
                       "Rebuild the module for this kernel (`dkms autoinstall`, or reinstall the driver package "
                       "with headers for `uname -r`) and reboot."),
    "symbol_version": ("the nvidia module was built for another kernel",
                       "Rebuild the module for this kernel (`dkms autoinstall`) or boot the kernel it was built for."),
    "no_gpu_found": ("the driver found no NVIDIA GPU it could use",
                     "Check `lspci -d 10de:`; if the GPU is listed, check driver support and the NVRM lines above "
                     "it; if not, the GPU is not visible on PCIe (seating, power, BIOS)."),
    "probe_failed": ("the NVIDIA probe routine failed for a GPU",
                     "Read the NVRM lines just before it; common causes are an unsupported GPU, a missing "
                     "BAR window (enable Above 4G decoding) or another driver (nouveau) holding the GPU."),
    "probe_not_called": ("another driver claimed the GPU before nvidia (often nouveau or vfio-pci)",
                         "Blacklist nouveau (`/etc/modprobe.d/blacklist-nouveau.conf`), rebuild the initramfs "
                         "and reboot; check `lspci -k -d 10de:`."),
    "bar_invalid": ("the PCI memory window (BAR) assigned to the GPU is invalid",
                    "Enable Above 4G decoding / Resizable BAR in the system BIOS and update it; then reboot."),
    "vbios_copy_failed": ("the driver could not read the GPU's VBIOS",
                          "Reboot; if it persists, the GPU or its slot is faulty: reseat it or ask for a replacement."),
    "gpu_not_supported": ("this driver does not support the installed GPU",
                          "Install a driver branch that supports this GPU (see NVIDIA's supported-products list); "
                          "GPUs older than Turing have no GSP and need the proprietary kernel modules, not the open "
                          "ones."),
    "firmware_missing": ("the driver's GSP firmware file is missing or from another version",
                         "Reinstall the driver package so /lib/firmware/nvidia/<version>/gsp_*.bin matches the loaded "
                         "module (a partial upgrade leaves the old firmware), then reboot."),
    "insert_failed": ("the nvidia kernel module could not be loaded",
                      "Run `modprobe nvidia` and read `dmesg`; Secure Boot may need the module signed, or the "
                      "module must be rebuilt for this kernel."),
    "unknown_parameter": ("a nvidia module option is not understood by this driver version",
                          "Remove or fix the option in /etc/modprobe.d/*.conf."),
    "resource": ("the driver could not claim the GPU's resources",
                 "Check that no other driver holds the GPU (`lspci -k -d 10de:`) and that the BIOS assigns "
                 "its memory windows (Above 4G decoding)."),
    "load_failure": ("the NVIDIA driver reported a failure while loading",
                     "Read the NVRM lines around it; reinstall the driver if files are missing."),
}


@check("kernel.module", codes=["driver.kernel_module"], what="NVIDIA kernel module errors (kernel log)")
def module_errors(snap: Snapshot) -> list[Finding]:
    evs = [e for e in snap.kernel_events if e.kind == "module" and e.detail.get("severity") in ("critical", "warning")]
    if not evs:
        return []
    prev = _previous_boot_flags(evs, snap)
    groups: dict[str, list[KernelEvent]] = {}
    for e in evs:
        groups.setdefault(str(e.detail.get("module")), []).append(e)
    out: list[Finding] = []
    for sub, group in groups.items():
        what, fix = _MODULE_TEXT.get(sub, ("the NVIDIA kernel module reported a problem",
                                           "Read the NVRM lines around it."))
        sev = Severity.CRITICAL if any(e.detail.get("severity") == "critical" for e in group) else Severity.WARNING
        data = _base_data(group)
        data["problem"] = sub
        for k in ("client_version", "kernel_version", "symbol", "devices"):
            vals = sorted({str(v) for e in group if (v := e.detail.get(k)) is not None})
            if vals:
                data[k] = vals
        loaded_later = any(e.kind == "module" and e.detail.get("module") == "loaded" for e in snap.kernel_events
                           if not prev.get(id(e)))
        if all(prev.get(id(e)) for e in group) or (sub != "api_mismatch" and snap.gpus and loaded_later):
            sev = Severity.INFO
            data["resolved_later"] = True
        title = f"NVIDIA kernel module: {what}"
        if sub == "api_mismatch" and data.get("client_version"):
            title += f" (libraries {data['client_version'][0]}, module {data.get('kernel_version', ['?'])[0]})"  # type: ignore[index]
        out.append(Finding(code="driver.kernel_module", severity=sev, family=Family.SOFTWARE, title=title,
                           evidence=_evidence(group), remedy=_steps(fix), data=data, source=SOURCE))
    return out


def describe_xid(n: int) -> XidInfo:
    """Catalog entry or a stand-in; used by ``explain`` and renderers."""
    return lookup(n) or unknown(n)
