"""Xid detector: every Xid in the kernel log, with the catalog's meaning, class and NVIDIA's actions.

Meaning and actions come from the Xid catalog (``knowledge/xid.py``), the class (application, hardware,
fatal to the job, reset, reboot, RMA) from ``knowledge/data/xid_classes.json``.
"""

from __future__ import annotations

from gpuclinic import lazyre
from gpuclinic.checks import check
from gpuclinic.checks._kernel import (
    NVLINK_XIDS,
    _base_data,
    _by_bus,
    _previous_boot_flags,
    _require_log,
    _uuid_map,
    gpu_ref,
    kernel_finding,
)
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import severity
from gpuclinic.knowledge.xid import XidInfo, classify, lookup, unknown
from gpuclinic.model import Finding, Severity
from gpuclinic.record import field, record

# --------------------------------------------------------------------------------------------------
# xid.<N>
# --------------------------------------------------------------------------------------------------

_RE_RECOVERY = lazyre.compile(r"from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")


# the catalog category of Xids that report no fault (SMBPBI test messages, recovery-action changes)
INFORMATIONAL = "informational"


@check("xid", codes=["xid.*"], what="Xid errors in the kernel log")
def xid_findings(snap: Snapshot) -> list[Finding]:
    _require_log(snap)
    uuids = _uuid_map(snap)
    xids = [e for e in snap.kernel_events if e.kind == "xid" and e.xid is not None]
    ctx = _Context(
        prev=_previous_boot_flags(xids, snap),
        groups={},
        per_bus=_by_bus(xids),
        gsp_by_bus=_by_bus(e for e in snap.kernel_events if e.kind == "gsp"),
    )
    for e in xids:
        assert e.xid is not None
        ctx.groups.setdefault((e.pci_bus_id, e.xid), []).append(e)
    findings: list[Finding] = []
    for (bus, n), evs in ctx.groups.items():
        j = _judge(ctx, bus, n, evs)
        count = len(evs)
        title = f"Xid {n} ({j.info.name}): {j.info.summary}" + (f" — {count} times" if count > 1 else "")
        if j.conclusion:
            j.data["conclusion"] = j.conclusion
        if j.notes:
            j.data["notes"] = j.notes
        if j.info.notes:
            j.data["catalog_notes"] = j.info.notes
        gpu = gpu_ref(snap, bus, uuids)
        extra = j.extra_evidence
        findings.append(kernel_finding(f"xid.{n}", j.sev, j.info.family, title, evs, gpu, j.data, extra))
    return findings


@record
class _Context:
    """The node's Xids indexed the ways the rules look at them."""

    prev: dict[int, bool]  # id(event) -> logged before the newest boot
    groups: dict[tuple[str | None, int], list[KernelEvent]]  # (bus, xid) -> events
    per_bus: dict[str | None, list[KernelEvent]]
    gsp_by_bus: dict[str | None, list[KernelEvent]]


@record
class _Judgement:
    """One (GPU, Xid) group as the rules leave it: severity, notes, data, what a rule concluded about this
    case (``data["conclusion"]``; the remedy is the runbook's), extra evidence."""

    info: XidInfo
    sev: Severity
    data: dict[str, object]
    notes: list[str] = field(default_factory=list)
    conclusion: str | None = None
    extra_evidence: list[str] = field(default_factory=list)


def _judge(ctx: _Context, bus: str | None, n: int, evs: list[KernelEvent]) -> _Judgement:
    """The catalog's view of Xid ``n`` on this GPU, then each rule that applies to it, in order."""
    info = lookup(n) or unknown(n)
    j = _Judgement(info=info, sev=info.severity, data=_base_data(evs))
    if j.sev == Severity.INFO and info.category != INFORMATIONAL:
        # NVIDIA's bucket is IGNORE, but the driver reported a fault: a node with it is not HEALTHY
        j.sev = severity(f"xid.{n}", "catalog_ignore_fault")
        j.notes.append("NVIDIA's catalog says no immediate action; it is still a fault the driver reported")
    j.data.update({
        "xid": n, "name": info.name, "description": info.description, "category": info.category,
        "action": info.action, "nvidia_immediate_action": info.immediate_action,
        "nvidia_investigatory_action": info.investigatory_action, "catalog_source": info.source,
    })
    same_gpu_other = [e for e in ctx.per_bus.get(bus, []) if e.xid != n]
    if classify(n).application:
        _application_rule(j, ctx, bus, n, evs)
    if n == 45:
        _xid45_rule(j, n, evs, same_gpu_other)
    if n == 48:
        _xid48_rule(j, same_gpu_other)
    if n == 154:
        _xid154_rule(j, n, evs)
    if n in (119, 120):
        g = ctx.gsp_by_bus.get(bus, [])
        j.extra_evidence = [e.line for e in g[:3]]
        if g:
            j.data["gsp_lines"] = len(g)
    if n in NVLINK_XIDS:
        _nvlink_rule(j, n, evs)
    mig = sorted({str(gi) for e in evs if (gi := e.detail.get("gpu_instance"))})
    if mig:
        j.data["mig_gpu_instances"] = mig
    if info.is_unused:
        j.notes.append("NVIDIA lists this code as unused on current GPUs; seeing it is unexpected")
    if all(ctx.prev.get(id(e)) for e in evs):
        j.data["previous_boot"] = True
        j.sev = Severity.WARNING if j.sev == Severity.CRITICAL else Severity.INFO
        j.notes.append("all of these were logged before the last reboot; watch whether it comes back")
    return j


def _application_rule(j: _Judgement, ctx: _Context, bus: str | None, n: int, evs: list[KernelEvent]) -> None:
    """An application Xid repeating on one GPU only, from different programs, points at the GPU."""
    other_gpus = {b for (b, x) in ctx.groups if x == n and b != bus}
    # a program is named by its pid and its name on the same line: count each, never their union (one
    # Hyprland with pid=904 is one program, not two)
    distinct = max(len({e.pid for e in evs if e.pid is not None}), len({e.process for e in evs if e.process}))
    j.data["other_gpus_with_same_xid"] = len(other_gpus)
    if len(evs) >= 3 and not other_gpus and distinct >= 2:
        j.sev = severity(f"xid.{n}", "repeats_on_one_gpu")
        j.conclusion = (
            f"Xid {n} repeats on this GPU only, from different programs: that points at the "
            "GPU, not the code. Drain it and run `dcgmi diag -r 3` (and NVIDIA field "
            "diagnostics if that fails)."
        )
        j.data["suspect_hardware"] = True
    elif other_gpus:
        j.notes.append(
            f"the same Xid also appears on {len(other_gpus)} other GPU(s): most likely the "
            "application, not this GPU"
        )


def _xid45_rule(j: _Judgement, n: int, evs: list[KernelEvent], same_gpu_other: list[KernelEvent]) -> None:
    """Xid 45 (preemptive cleanup) only reports another Xid's consequence."""
    causes = sorted(
        {int(c) for e in evs if (c := e.detail.get("caused_by_xid")) is not None}
        | {x for e in same_gpu_other if (x := e.xid) is not None and x != 45}
    )
    if causes:
        j.sev = severity(f"xid.{n}", "explained_by_other_xid")
        j.data["caused_by"] = causes
        j.conclusion = (
            "This Xid only reports cleanup after Xid "
            + ", ".join(str(c) for c in causes)
            + ": act on that one."
        )
        # a cause the line names whose own line is not in the log (a grep, a cut paste, a bug report that
        # kept only these lines): the fault is known all the same, so this finding carries its severity
        seen = {e.xid for e in same_gpu_other}
        unseen = [c for c in causes if c not in seen]
        if unseen:
            infos = [lookup(c) or unknown(c) for c in unseen]
            j.sev = max(j.sev, *(i.severity for i in infos))
            j.data["cause_not_logged"] = unseen
            j.conclusion = (
                "Xid 45 names Xid " + ", ".join(f"{c} ({i.name})" for c, i in zip(unseen, infos, strict=True))
                + " as its cause, whose own line is not in this log: act on that Xid "
                + "(`gpuclinic runbook xid." + str(unseen[0]) + "`)."
            )


def _xid48_rule(j: _Judgement, same_gpu_other: list[KernelEvent]) -> None:
    """A double-bit error (48) followed by a remap event (63) or failure (64) on the same GPU."""
    follow = sorted({x for e in same_gpu_other if (x := e.xid) in (63, 64)})
    j.data["followed_by"] = follow
    if follow:
        j.conclusion = (
            f"Xid 48 was followed by Xid {'/'.join(map(str, follow))}: drain the GPU, let jobs "
            "finish, then reset it so the bad memory row is remapped"
            + (" (Xid 64: remapping failed; plan an RMA)" if 64 in follow else "")
            + "."
        )
    else:
        j.conclusion = (
            "Xid 48 was not followed by Xid 63/64: drain the GPU and run field "
            "diagnostics; check `nvidia-smi -q -d ROW_REMAPPER,ECC`."
        )


def _xid154_rule(j: _Judgement, n: int, evs: list[KernelEvent]) -> None:
    """Xid 154 says which recovery action the driver now asks for."""
    m = next((mm for e in evs if (mm := _RE_RECOVERY.search(e.message or e.line))), None)
    if m:
        new = m.group(2)
        j.data["recovery_action"] = new
        j.sev = severity(
            f"xid.{n}", "recovery_none" if new.strip().lower() == "none" else "recovery_required"
        )
        j.conclusion = f"The driver now asks for: {new}. Do that before giving the GPU new work."


def _nvlink_rule(j: _Judgement, n: int, evs: list[KernelEvent]) -> None:
    """NVLink Xids: which links and units; NVLink5 errors all marked Nonfatal are milder."""
    links = sorted({int(lk) for e in evs if (lk := e.detail.get("link")) is not None})
    if links:
        j.data["links"] = links
    units = sorted({str(u) for e in evs if (u := e.detail.get("unit"))})
    if units:
        j.data["units"] = units
    if (
        n in range(144, 151)
        and not any(e.detail.get("fatal") for e in evs)
        and any("fatal" in e.detail for e in evs)
    ):
        j.sev = min(j.sev, severity(f"xid.{n}", "nonfatal_nvlink5"))
        j.notes.append("all of these NVLink5 errors are marked Nonfatal")


def describe_xid(n: int) -> XidInfo:
    """Catalog entry or a stand-in; used by ``explain`` and renderers."""
    return lookup(n) or unknown(n)
