"""Snapshot -> findings -> report: the middle of the pipeline, shared by doctor, explain, watch and run."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from gpuclinic import __version__
from gpuclinic.checks import run_checks
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.incidents import group
from gpuclinic.model import Finding, GpuRef, Incident, Severity, Skipped, Verdict

REPORT_SCHEMA = "gpuclinic.report/2"


@dataclass
class GpuVerdict:
    ref: GpuRef
    name: str | None
    verdict: Verdict
    codes: list[str] = field(default_factory=list)


@dataclass
class Report:
    """Everything a renderer needs; renderers know nothing about hardware beyond this."""

    snapshot: Snapshot
    findings: list[Finding]
    skipped: list[Skipped]
    verdict: Verdict
    gpu_verdicts: list[GpuVerdict]
    generated_at: str
    command: str = "doctor"
    incidents: list[Incident] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def to_dict(self, *, include_facts: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": REPORT_SCHEMA,
            "gpuclinic_version": __version__,
            "command": self.command,
            "generated_at": self.generated_at,
            "hostname": self.snapshot.hostname,
            "origin": self.snapshot.origin,
            "inputs": list(self.snapshot.inputs),
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "gpus": [
                {
                    **gv.ref.to_dict(),
                    "name": gv.name,
                    "verdict": gv.verdict.value,
                    "findings": gv.codes,
                }
                for gv in self.gpu_verdicts
            ],
            "incidents": [i.to_dict() for i in self.incidents],
            "findings": [f.to_dict() for f in self.findings],
            "skipped": [s.to_dict() for s in self.skipped],
        }
        if include_facts:
            d["facts"] = self.snapshot.to_dict()
        return d


def _attach_gpu(snap: Snapshot, f: Finding) -> None:
    """Fill in missing index/uuid/bus id of a finding's GPU from the snapshot."""
    if f.gpu is None:
        return
    g = None
    if f.gpu.pci_bus_id:
        g = snap.gpu_by_bus_id(f.gpu.pci_bus_id)
    if g is None and f.gpu.index is not None:
        g = next((x for x in snap.gpus if x.index == f.gpu.index), None)
    if g is None and f.gpu.uuid:
        g = next((x for x in snap.gpus if x.uuid == f.gpu.uuid), None)
    if g is not None:
        f.gpu = GpuRef(index=g.index, pci_bus_id=g.pci_bus_id, uuid=g.uuid)
    elif f.gpu.pci_bus_id:
        f.gpu = GpuRef(index=f.gpu.index, pci_bus_id=normalize_bus_id(f.gpu.pci_bus_id), uuid=f.gpu.uuid)


def build_report(snap: Snapshot, findings: list[Finding], skipped: list[Skipped], command: str = "doctor") -> Report:
    """Rank findings, compute node and per-GPU verdicts."""
    for f in findings:
        _attach_gpu(snap, f)
    findings = merge_duplicates(sorted(findings, key=Finding.sort_key))
    worst = max((f.severity for f in findings), default=None)
    verdict = Verdict.from_severity(worst)
    gvs: list[GpuVerdict] = []
    seen: set[str] = set()
    for g in snap.gpus:
        ref = GpuRef(index=g.index, pci_bus_id=g.pci_bus_id, uuid=g.uuid)
        mine = [f for f in findings if f.gpu is not None and _same_gpu(f.gpu, ref)]
        sev = max((f.severity for f in mine), default=None)
        gvs.append(GpuVerdict(ref=ref, name=g.name, verdict=Verdict.from_severity(sev), codes=[f.code for f in mine]))
        if g.pci_bus_id:
            seen.add(normalize_bus_id(g.pci_bus_id))
    # GPUs known only from findings (e.g. a log names a bus id NVML no longer shows)
    for f in findings:
        if f.gpu and f.gpu.index is None and f.gpu.pci_bus_id and normalize_bus_id(f.gpu.pci_bus_id) not in seen:
            bid = normalize_bus_id(f.gpu.pci_bus_id)
            seen.add(bid)
            ref = GpuRef(pci_bus_id=bid, uuid=f.gpu.uuid)
            mine = [x for x in findings if x.gpu is not None and _same_gpu(x.gpu, ref)]
            sev = max((x.severity for x in mine), default=None)
            gvs.append(GpuVerdict(ref=ref, name=None, verdict=Verdict.from_severity(sev), codes=[x.code for x in mine]))
    incidents = group(findings, snap, first_step=_first_step)
    return Report(
        snapshot=snap,
        incidents=incidents,
        findings=findings,
        skipped=list(snap.skipped) + [s for s in skipped if s not in snap.skipped],
        verdict=verdict,
        gpu_verdicts=gvs,
        generated_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=command,
    )


def _first_step(code: str, f: Finding) -> str:
    """The first step of the runbook for ``code``, filled in for the finding's GPU."""
    try:
        from gpuclinic.knowledge.runbooks import first_step
    except ImportError:
        first_step = None
    if first_step is not None:
        step = first_step(code, f.gpu)
        if step:
            return step
    from gpuclinic.incidents import _first_line

    return _first_line(f.remedy)


def _gpu_key(ref: GpuRef | None) -> str:
    if ref is None:
        return ""
    if ref.pci_bus_id:
        return normalize_bus_id(ref.pci_bus_id)
    return ref.uuid or (str(ref.index) if ref.index is not None else "?")


def merge_duplicates(findings: list[Finding]) -> list[Finding]:
    """Fold findings with the same code on the same GPU into one.

    Several sources can see one fault (AER from the kernel log and from sysfs counters, NVLink
    errors from XID lines and from NVML counters); the reader wants one finding with all the
    evidence, not two.  Input is sorted worst first, so the kept finding has the highest severity
    and its title and remedy; the others add their evidence lines and data.
    """
    kept: dict[tuple[str, str], Finding] = {}
    out: list[Finding] = []
    for f in findings:
        key = (f.code, _gpu_key(f.gpu))
        first = kept.get(key)
        if first is None:
            kept[key] = f
            out.append(f)
            continue
        for ev in f.evidence:
            if ev not in first.evidence:
                first.evidence.append(ev)
        for k, v in f.data.items():
            if k not in first.data:
                first.data[k] = v
        also = first.data.setdefault("merged_from", [])
        if isinstance(also, list):
            also.append(f.title)
    return out


def _same_gpu(a: GpuRef, b: GpuRef) -> bool:
    if a.pci_bus_id and b.pci_bus_id:
        return normalize_bus_id(a.pci_bus_id) == normalize_bus_id(b.pci_bus_id)
    if a.uuid and b.uuid:
        return a.uuid == b.uuid
    return a.index is not None and a.index == b.index


def diagnose(snap: Snapshot, *, command: str = "doctor") -> Report:
    findings, skipped = run_checks(snap)
    return build_report(snap, findings, skipped, command=command)


def worst(findings: list[Finding]) -> Severity | None:
    return max((f.severity for f in findings), default=None)
