"""GPU presence: lost (fallen off the bus), invisible to NVML, fewer than expected, hung, or asking
for a recovery action."""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic.checks import CheckSkipped, check
from gpuclinic.checks._hw import kernel_lines, ref, unreadable_finding, unreadable_findings
from gpuclinic.checks._kernel import (
    _base_data,
    _by_bus,
    _is_parent_of,
    _previous_boot_flags,
    _uuid_map,
    gpu_ref,
    kernel_finding,
)
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge.codes import finding, severity
from gpuclinic.model import Family, Finding, GpuRef, Severity


@check("gpu.presence", codes=["gpu.missing"], what="GPU presence (NVML vs PCI bus)")
def gpu_missing(snap: Snapshot) -> Iterable[Finding]:
    if snap.nvml_available is None and not snap.gpus and not snap.pci_read:
        raise CheckSkipped("no GPU readings (NVML) and no PCI bus listing in the input")
    out: list[Finding] = []
    for g in snap.gpus:
        if g.lost and not (g.lost_reason or "").startswith("unresponsive"):
            ev = [g.lost_reason or "GPU is lost"]
            pd = next(
                (d for d in snap.pci_devices if g.pci_bus_id and d.bus_id == normalize_bus_id(g.pci_bus_id)),
                None,
            )
            if pd is not None:
                ev.append(f"PCI: {pd.bus_id} still listed in sysfs (driver {pd.driver or 'none'})")
            ev += kernel_lines(snap, g.pci_bus_id, ("xid", "fallen_off_bus"))
            out.append(
                finding(
                    "gpu.missing",
                    title=_lost_title(g.index, g.pci_bus_id, g.lost_reason or ""),
                    evidence=ev,
                    gpu=ref(g),
                    data={"reason": "lost"},
                    source="nvml",
                )
            )
    nvml_buses = {normalize_bus_id(g.pci_bus_id) for g in snap.gpus if g.pci_bus_id}
    in_container = bool(snap.container and snap.container.in_container)
    if snap.nvml_available and snap.pci_read:
        for d in snap.pci_devices:
            if not d.is_gpu or d.bus_id in nvml_buses:
                continue
            out.append(_pci_only(d.bus_id, d.driver, d.device_id, in_container))
    if snap.expect_gpus is not None:
        usable = [g for g in snap.gpus if not g.lost and not g.unreadable.get("nvml")]
        if len(usable) < snap.expect_gpus:
            ev = [f"usable GPUs (NVML) = {len(usable)}, expected (--expect-gpus) = {snap.expect_gpus}"]
            lost = [g for g in snap.gpus if g.lost]
            if lost:
                ev.append(
                    "lost/unresponsive: "
                    + ", ".join(f"GPU {g.index} {g.pci_bus_id or ''}".strip() for g in lost)
                )
            if snap.pci_read:
                ev.append(f"NVIDIA GPUs on the PCI bus = {sum(1 for d in snap.pci_devices if d.is_gpu)}")
            out.append(
                finding(
                    "gpu.missing",
                    title=f"Only {len(usable)} of {snap.expect_gpus} expected GPUs are usable",
                    evidence=ev,
                    data={"usable": len(usable), "expected": snap.expect_gpus},
                    source="nvml",
                )
            )
    return out


def _lost_title(index: int, bus: str | None, reason: str) -> str:
    """Say what the source actually saw: lost from the bus, no handle, or readings failing."""
    where = f"GPU {index} ({bus or 'bus ?'})"
    low = reason.lower()
    if "fallen off" in low or "gpu_is_lost" in low or "gpu is lost" in low:
        return f"{where} is lost: it has fallen off the bus"
    if "handle" in low:
        return f"{where} cannot be reached: the driver cannot get a handle for it (GPU lost or failed)"
    return f"{where} is not responding: its readings fail"


# Why NVML cannot use a GPU the PCI bus lists: reason -> (severity condition in codes.json, title).
_PCI_ONLY: dict[str, tuple[str | None, str]] = {
    "not_in_container": (
        "not_in_container", "GPU {bus} is on the host's PCI bus but not visible in this container"
    ),
    "vfio": ("vfio", "GPU {bus} is bound to vfio-pci (passed through to a VM), not to the nvidia driver"),
    "pci_only": (None, "GPU {bus} is on the PCI bus and bound to nvidia, but NVML cannot see it"),
    "other_driver": (
        "other_driver", "GPU {bus} is on the PCI bus but bound to {driver}, so NVML cannot use it"
    ),
}


def _pci_only(bus: str, driver: str | None, device_id: str | None, in_container: bool) -> Finding:
    reason = (
        "not_in_container" if in_container
        else "vfio" if driver == "vfio-pci"
        else "pci_only" if driver == "nvidia"
        else "other_driver"
    )
    when, title = _PCI_ONLY[reason]
    data: dict[str, object] = {"reason": reason}
    if reason == "other_driver":
        data["driver"] = driver
    return finding(
        "gpu.missing",
        when=when,
        title=title.format(bus=bus, driver=driver or "no driver"),
        evidence=[
            f"PCI: {bus} NVIDIA GPU (device {device_id or '?'}) bound to driver {driver or 'none'}",
            "NVML: no GPU with this bus id",
        ],
        gpu=GpuRef(pci_bus_id=bus),
        data=data,
        source="pci",
    )


@check("gpu.unresponsive", codes=["gpu.unresponsive"], what="GPU responsiveness")
def gpu_unresponsive(snap: Snapshot) -> Iterable[Finding]:
    out = []
    for g in snap.gpus:
        if g.lost and (g.lost_reason or "").startswith("unresponsive"):
            ev = [g.lost_reason or "unresponsive"] + kernel_lines(snap, g.pci_bus_id, ("xid", "gsp"))
            out.append(
                finding(
                    "gpu.unresponsive",
                    title=f"GPU {g.index} ({g.pci_bus_id or 'bus ?'}) does not answer NVML: driver or GPU "
                          "firmware hung",
                    evidence=ev,
                    gpu=ref(g),
                    source="nvml",
                )
            )
    return out


_ACTION_TEXT = {
    "gpu_reset": (
        "the GPU needs a reset",
        severity("gpu.recovery_action"),
    ),
    "node_reboot": (
        "the node needs a reboot",
        severity("gpu.recovery_action"),
    ),
    "drain_p2p": (
        "peer-to-peer traffic must be drained",
        severity("gpu.recovery_action", "drain_p2p"),
    ),
    "drain_and_reset": (
        "the GPU must be drained and reset",
        severity("gpu.recovery_action"),
    ),
    "recover_imex_domain": (
        "the IMEX domain must be recovered",
        severity("gpu.recovery_action"),
    ),
    "bus_reset": (
        "the GPU needs a PCIe bus reset",
        severity("gpu.recovery_action"),
    ),
    "system_reboot": (
        "the system needs a reboot",
        severity("gpu.recovery_action"),
    ),
}


@check("gpu.recovery_action", codes=["gpu.recovery_action"], what="GPU recovery action (NVML)")
def gpu_recovery_action(snap: Snapshot) -> Iterable[Finding]:
    out = []
    for g in snap.gpus:
        reset = unreadable_finding(
            g, "gpu.recovery_action", "requires a reset", "NVML_ERROR_RESET_REQUIRED",
            "GPU {index}: NVML answers 'GPU requires reset'", action="reset_required",
        )
        if reset:
            out.append(reset)
        act = g.recovery_action
        if not act or act == "none":
            continue
        text, sev = _ACTION_TEXT.get(
            act, (f"the driver asks for recovery action {act}", severity("gpu.recovery_action"))
        )
        out.append(
            Finding(
                code="gpu.recovery_action",
                severity=sev,
                family=Family.GPU_FAULT,
                title=f"GPU {g.index}: the driver reports {text}",
                evidence=[f"NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = {act}"],
                gpu=ref(g),
                data={"action": act},
                source="nvml",
            )
        )
    return out


@check("gpu.inforom", codes=["gpu.inforom"], what="GPU InfoROM")
def gpu_inforom(snap: Snapshot) -> Iterable[Finding]:
    return unreadable_findings(
        snap, "gpu.inforom", "corrupted InfoROM", "NVML_ERROR_CORRUPTED_INFOROM",
        "GPU {index} InfoROM is corrupted: ECC and error history cannot be trusted",
    )


# --------------------------------------------------------------------------------------------------
# gpu.fallen_off_bus
# --------------------------------------------------------------------------------------------------


@check("kernel.fallen_off_bus", codes=["gpu.fallen_off_bus"], what="GPUs off the bus (kernel log, lspci)")
def fallen_off_bus(snap: Snapshot) -> list[Finding]:
    out = _fallen_off_bus_kernel(snap) if snap.kernel_events else []
    told = {f.gpu.pci_bus_id for f in out if f.gpu is not None}
    return out + _not_answering(snap, told)


def _not_answering(snap: Snapshot, told: set[str | None]) -> list[Finding]:
    """The NVIDIA cards lspci read as all ones (``(rev ff)``): the same fault seen from the bus, one finding
    per card (its GPU, audio and USB functions together), unless the kernel log said it already."""
    cards: dict[str, list[str]] = {}
    for d in snap.pci_devices:
        if d.config_unreadable:
            cards.setdefault(d.bus_id.rsplit(".", 1)[0], []).append(d.bus_id)
    for functions in cards.values():
        functions.sort()
    out: list[Finding] = []
    for card, functions in cards.items():
        bus = f"{card}.0"
        if bus in told:
            continue
        gpu = gpu_ref(snap, bus)
        label = gpu.label() if gpu else f"The GPU at {bus}"
        out.append(
            Finding(
                code="gpu.fallen_off_bus",
                severity=severity("gpu.fallen_off_bus"),
                family=Family.GPU_FAULT,
                title=f"{label} fell off the PCIe bus: it no longer answers (lspci reads all ones)",
                evidence=[f"lspci: {f} (rev ff): its configuration space reads all ones" for f in functions],
                gpu=gpu,
                data={"functions": functions, "source": "lspci"},
                source="lspci",
            )
        )
    return out


def _fallen_off_bus_kernel(snap: Snapshot) -> list[Finding]:
    uuids = _uuid_map(snap)
    evs = [e for e in snap.kernel_events if e.kind == "fallen_off_bus" or (e.kind == "xid" and e.xid == 79)]
    prev = _previous_boot_flags(evs, snap)
    by_bus = _by_bus(evs)
    aer = [e for e in snap.kernel_events if e.kind == "aer"]
    out: list[Finding] = []
    for bus, group in by_bus.items():
        ref = gpu_ref(snap, bus, uuids)
        related = [
            e
            for e in aer
            if bus
            and (
                bus in (e.pci_bus_id, e.detail.get("device"), e.detail.get("reporter"))
                or bus in (e.detail.get("downstream") or [])
                or _is_parent_of(snap, e.detail.get("device") or e.pci_bus_id, bus)
            )
        ]
        data = _base_data(group)
        data["xid79"] = any(e.kind == "xid" for e in group)
        data["aer_events_on_path"] = len(related)
        sev = severity("gpu.fallen_off_bus")
        if all(prev.get(id(e)) for e in group):
            sev = severity("gpu.fallen_off_bus", "before_boot")
            data["previous_boot"] = True
        g = snap.gpu_by_bus_id(bus) if bus else None
        if g is not None and not g.lost and all(prev.get(id(e)) for e in group):
            data["visible_now"] = True
        label = ref.label() if ref else "A GPU"
        title = f"{label} fell off the PCIe bus: the driver can no longer reach it"
        if sev != Severity.CRITICAL:
            title += " (before the last reboot)"
        aer_lines = [e.line for e in related[-2:]]
        code = "gpu.fallen_off_bus"
        out.append(kernel_finding(code, sev, Family.GPU_FAULT, title, group, ref, data, aer_lines))
    return out


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
    by_bus = _by_bus(evs)
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
        sev = severity("gpu.init_failed")
        g = snap.gpu_by_bus_id(bus) if bus else None
        if g is not None and not g.lost:
            sev = severity("gpu.init_failed", "transient")
            data["usable_now"] = True
        if all(prev.get(id(e)) for e in group):
            sev = min(sev, severity("gpu.init_failed", "before_boot"))
            data["previous_boot"] = True
        if any("power" in str(e.detail.get("what")) for e in group):
            data["aux_power_missing"] = True  # the driver says its power cables are missing
        label = ref.label() if ref else "A GPU"
        title = f"{label} failed to initialise in the NVIDIA driver ({', '.join(whats)})"
        out.append(kernel_finding("gpu.init_failed", sev, Family.GPU_FAULT, title, group, ref, data))
    return out
