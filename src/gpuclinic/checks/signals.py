"""Findings from fault signatures seen in saved evidence (``Snapshot.signals``).

The segmenting evidence reader (``sources/signals.py``) records every line that matches a known fault
signature - fabric manager and persistence-daemon failures, kernel Oops in the NVIDIA driver, IOMMU
faults naming a GPU, and the ``explain`` error signatures - so no input reads HEALTHY while such a line
is in it.  Severity, title, remedy and source come from the signature data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuclinic.checks import check
from gpuclinic.checks._kernel import gpu_ref, sole_gpu_bus
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.model import Family, Finding, GpuRef, Severity

if TYPE_CHECKING:  # annotations only
    from gpuclinic.facts.evidence import Signal

_SEV = {"info": Severity.INFO, "warning": Severity.WARNING, "critical": Severity.CRITICAL}
MAX_EVIDENCE = 4


@check(
    "evidence.signals",
    codes=[
        "driver.fabric_manager_missing",
        "persistenced.failed",
        "driver.kernel_module",
        "pcie.iommu_fault",
        "pcie.link_degraded",
        "pcie.aer_corrected",
        "pcie.aer_uncorrected",
        "container.no_gpu_visible",
        "gpu.missing",
        "driver.not_loaded",
        "dcgm.diag_fail",
        "host.hung_task",
        "host.cpu_lockup",
        "host.storage_error",
        "evidence.partial",
        "k8s.gpu_fenced",
        "k8s.mig_strategy",
        "k8s.gpu_time_sliced",
        "fabric.ib_rate_degraded",
        "room.component_unhealthy",
        "error.*",
    ],
    what="fault signatures in the evidence",
)
def signals(snap: Snapshot) -> Iterable[Finding]:
    groups: dict[tuple[str, str | None, int | None], list[Signal]] = {}
    link_read = any(d.current_link_width for d in snap.pci_devices)
    only = sole_gpu_bus(snap)
    for s in snap.signals:
        if link_read and str(s.data.get("signature", "")).startswith("lspci_lnksta"):
            continue  # the lspci reader read this link: the pcie detector judges it against LnkCap
        if s.data.get("signature") in _READ_BY_SMI and _smi_read_reset(snap):
            continue  # an nvidia-smi reader took that answer: checks/gpu.py reports it per GPU
        if s.code in _READ_BY_REDFISH and snap.room is not None and snap.room.components:
            continue  # the Redfish reader read the parts' Status: checks/bmc_health.py reports them
        idx = s.data.get("gpu_index")
        bus = s.pci_bus_id
        if bus is None and only and idx is None and "NVRM" in s.line:
            bus = only  # a driver line naming no GPU, in a log whose driver lines name one GPU only
        groups.setdefault((s.code, bus, idx if isinstance(idx, int) else None), []).append(s)
    for (code, bus, idx), sigs in groups.items():
        first = sigs[0]
        ev = [f"{s.input}:{s.lineno}: {s.line}" if s.lineno else s.line for s in sigs[:MAX_EVIDENCE]]
        if len(sigs) > MAX_EVIDENCE:
            ev.append(f"... {len(sigs) - MAX_EVIDENCE} more line(s)")
        hints = [h for s in sigs for h in s.data.get("hints", [])]
        ev += list(dict.fromkeys(hints))
        yield Finding(
            code=code,
            severity=_SEV.get(first.severity, Severity.WARNING),
            family=Family(first.family),
            title=first.title + (f" ({bus})" if bus else ""),
            evidence=ev,
            remedy=first.remedy,
            gpu=gpu_ref(snap, bus) if bus else _by_index(snap, idx),
            source=first.source,
            data={"signature": first.data.get("signature"), "lines": len(sigs)},
        )


# signatures of an NVML answer the nvidia-smi readers also take (a GPU's ``unreadable`` field)
_READ_BY_SMI = {"nvml_answer_requires_reset"}
_READ_BY_REDFISH = {"room.component_unhealthy"}  # a Status line of a document the Redfish reader read


def _smi_read_reset(snap: Snapshot) -> bool:
    """A GPU reader saw an NVML 'requires reset' answer (``sources/smi_common.note_unreadable``)."""
    return any(
        g.recovery_action or any("requires reset" in v.lower() for v in g.unreadable.values())
        for g in snap.gpus
    )


def _by_index(snap: Snapshot, idx: int | None) -> GpuRef | None:
    """The GPU an error message names by index (``GPU 7 has a total capacity ...``), with its bus id and
    UUID when the evidence also lists that GPU."""
    if idx is None:
        return None
    g = next((g for g in snap.gpus if g.index == idx), None)
    if g is None:
        return GpuRef(index=idx)
    return GpuRef(index=idx, pci_bus_id=normalize_bus_id(g.pci_bus_id) if g.pci_bus_id else None, uuid=g.uuid)
