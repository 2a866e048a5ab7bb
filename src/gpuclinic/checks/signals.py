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
from gpuclinic.checks._kernel import gpu_ref
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Family, Finding, Severity

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
        "container.no_gpu_visible",
        "gpu.missing",
        "driver.not_loaded",
        "error.*",
    ],
    what="fault signatures in the evidence",
)
def signals(snap: Snapshot) -> Iterable[Finding]:
    groups: dict[tuple[str, str | None], list[Signal]] = {}
    for s in snap.signals:
        groups.setdefault((s.code, s.pci_bus_id), []).append(s)
    for (code, bus), sigs in groups.items():
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
            gpu=gpu_ref(snap, bus) if bus else None,
            source=first.source,
            data={"signature": first.data.get("signature"), "lines": len(sigs)},
        )
