"""Xid detector: every Xid in the kernel log, with the catalog's meaning, class and NVIDIA's actions.

Meaning and actions come from the Xid catalog (``knowledge/xid.py``), the class (application, hardware,
fatal to the job, reset, reboot, RMA) from ``knowledge/data/xid_classes.json``.
"""

from __future__ import annotations

import re

from gpuclinic.checks import check
from gpuclinic.checks._kernel import (
    NVLINK_XIDS,
    SOURCE,
    _base_data,
    _evidence,
    _previous_boot_flags,
    _require_log,
    _steps,
    _uuid_map,
    gpu_ref,
)
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import severity
from gpuclinic.knowledge.xid import XidInfo, classify, lookup, unknown
from gpuclinic.model import Finding, Severity

# --------------------------------------------------------------------------------------------------
# xid.<N>
# --------------------------------------------------------------------------------------------------

_RE_RECOVERY = re.compile(r"from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")


# the catalog category of Xids that report no fault (SMBPBI test messages, recovery-action changes)
INFORMATIONAL = "informational"


@check("xid", codes=["xid.*"], what="Xid errors in the kernel log")
def xid_findings(snap: Snapshot) -> list[Finding]:  # noqa: C901  (split pending, issue 14)
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
            sev = severity(f"xid.{n}", "catalog_ignore_fault")
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
                sev = severity(f"xid.{n}", "repeats_on_one_gpu")
                first_step = (
                    f"Xid {n} repeats on this GPU only, from different programs: that points at the "
                    "GPU, not the code. Drain it and run `dcgmi diag -r 3` (and NVIDIA field "
                    "diagnostics if that fails)."
                )
                data["suspect_hardware"] = True
            elif other_gpus:
                notes.append(
                    f"the same Xid also appears on {len(other_gpus)} other GPU(s): most likely the "
                    "application, not this GPU"
                )
        if n == 45:
            causes = sorted(
                {int(c) for e in evs if (c := e.detail.get("caused_by_xid")) is not None}
                | {x for e in same_gpu_other if (x := e.xid) is not None and x != 45}
            )
            if causes:
                sev = severity(f"xid.{n}", "explained_by_other_xid")
                data["caused_by"] = causes
                first_step = (
                    "This Xid only reports cleanup after Xid "
                    + ", ".join(str(c) for c in causes)
                    + ": act on that one."
                )
        if n == 48:
            follow = sorted({x for e in same_gpu_other if (x := e.xid) in (63, 64)})
            data["followed_by"] = follow
            if follow:
                first_step = (
                    f"Xid 48 was followed by Xid {'/'.join(map(str, follow))}: drain the GPU, let jobs "
                    "finish, then reset it so the bad memory row is remapped"
                    + (" (Xid 64: remapping failed; plan an RMA)" if 64 in follow else "")
                    + "."
                )
            else:
                first_step = (
                    "Xid 48 was not followed by Xid 63/64: drain the GPU and run field "
                    "diagnostics; check `nvidia-smi -q -d ROW_REMAPPER,ECC`."
                )
        if n == 154:
            m = next((mm for e in evs if (mm := _RE_RECOVERY.search(e.message or e.line))), None)
            if m:
                new = m.group(2)
                data["recovery_action"] = new
                sev = severity(
                    f"xid.{n}", "recovery_none" if new.strip().lower() == "none" else "recovery_required"
                )
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
            if (
                n in range(144, 151)
                and not any(e.detail.get("fatal") for e in evs)
                and any("fatal" in e.detail for e in evs)
            ):
                sev = min(sev, severity(f"xid.{n}", "nonfatal_nvlink5"))
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
        findings.append(
            Finding(
                code=f"xid.{n}",
                severity=sev,
                family=family,
                title=title,
                evidence=_evidence(evs, extra_evidence),
                remedy=remedy,
                gpu=gpu_ref(snap, bus, uuids),
                data=data,
                source=SOURCE,
            )
        )
    return findings


def describe_xid(n: int) -> XidInfo:
    """Catalog entry or a stand-in; used by ``explain`` and renderers."""
    return lookup(n) or unknown(n)
