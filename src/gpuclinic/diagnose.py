"""Snapshot -> findings -> report: the middle of the pipeline, shared by doctor, explain, watch and run."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from gpuclinic import __version__
from gpuclinic.checks import run_checks
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.incidents import group
from gpuclinic.model import Family, Finding, GpuRef, Incident, Severity, Skipped, Verdict
from gpuclinic.record import field, record

REPORT_SCHEMA = "gpuclinic.report/2"


@record
class GpuVerdict:
    """One GPU's verdict and the codes behind it (the per-GPU table and JSON ``gpus``)."""

    ref: GpuRef
    name: str | None
    verdict: Verdict
    codes: list[str] = field(default_factory=list)
    readings: bool = True  # False: nothing was read from it, so HEALTHY would be a guess

    @property
    def label(self) -> str:
        """The verdict as shown: ``unknown`` for a GPU nothing was read from and nothing found about."""
        if not self.readings and self.verdict == Verdict.HEALTHY:
            return "unknown"
        return self.verdict.value


@record
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

    def explain_summary(self) -> dict[str, Any]:
        """What explain found: the cause, its kind and severity, or that no known cause was found."""
        # (a reading summary and a note that the input was read only in part are not causes)
        not_causes = ("explain.no_match", "software.inventory", "room.status", "evidence.partial")
        real = [i for i in self.incidents if i.code not in not_causes]
        if not real:
            return {"cause_found": False, "summary": "no known cause found"}
        top = real[0]
        root = next((f for f in self.findings if f.incident == top.id and f.code == top.code), None)
        k = cause_kind(root) if root is not None else "software"
        return {"cause_found": True, "cause": top.code, "kind": k, "severity": top.severity.label,
                "summary": f"cause found: {k} ({top.severity.label})"}

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
                    "verdict": gv.label,
                    "readings": gv.readings,
                    "findings": gv.codes,
                }
                for gv in self.gpu_verdicts
            ],
            "incidents": [i.to_dict() for i in self.incidents],
            **({"explain": self.explain_summary()} if self.command == "explain" else {}),
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


def _failed_reads(snap: Snapshot) -> list[Skipped]:
    """GPU fields answered by an error ("ERR!", "[Unknown Error]"): said, never passed over as healthy."""
    if not any(g.unreadable for g in snap.gpus):
        return []  # (and the nvidia-smi reader stays off the doctor's start-up path)
    from gpuclinic.sources.smi_common import failed_reads

    out = []
    for g in snap.gpus:
        bad = failed_reads(g)
        if bad:
            whys = " / ".join(sorted(set(bad.values())))
            out.append(Skipped(f"GPU {g.index}: {', '.join(sorted(bad))}", f"the GPU answered {whys}"))
    return out


def build_report(
    snap: Snapshot, findings: list[Finding], skipped: list[Skipped], command: str = "doctor"
) -> Report:
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
        gvs.append(
            GpuVerdict(
                ref=ref,
                name=g.name,
                verdict=Verdict.from_severity(sev),
                codes=[f.code for f in mine],
                readings=g.has_readings,
            )
        )
        if g.pci_bus_id:
            seen.add(normalize_bus_id(g.pci_bus_id))
    # GPUs known only from findings (e.g. a log names a bus id NVML no longer shows)
    for f in findings:
        if (
            f.gpu
            and f.gpu.index is None
            and f.gpu.pci_bus_id
            and normalize_bus_id(f.gpu.pci_bus_id) not in seen
        ):
            bid = normalize_bus_id(f.gpu.pci_bus_id)
            seen.add(bid)
            ref = GpuRef(pci_bus_id=bid, uuid=f.gpu.uuid)
            mine = [x for x in findings if x.gpu is not None and _same_gpu(x.gpu, ref)]
            sev = max((x.severity for x in mine), default=None)
            gvs.append(
                GpuVerdict(
                    ref=ref, name=None, verdict=Verdict.from_severity(sev), codes=[x.code for x in mine]
                )
            )
    incidents = group(findings, snap, first_step=first_step_for)
    _point_symptoms_at_their_cause(findings, incidents)
    if command == "explain":
        verdict = explain_verdict(findings)
    return Report(
        snapshot=snap,
        incidents=incidents,
        findings=findings,
        skipped=list(snap.skipped) + [s for s in [*skipped, *_failed_reads(snap)] if s not in snap.skipped],
        verdict=verdict,
        gpu_verdicts=gvs,
        generated_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=command,
    )


def _point_symptoms_at_their_cause(findings: list[Finding], incidents: list[Incident]) -> None:
    """A symptom's own advice would compete with (or contradict) its cause's runbook: point it there."""
    from gpuclinic.knowledge.runbooks import runbook_command

    by = {i.id: i for i in incidents}
    for f in findings:
        inc = by.get(f.incident or "")
        if inc is None or inc.code == f.code:
            continue
        pointer = runbook_command(inc.code, inc.gpu)
        f.remedy = (
            f"A symptom of {inc.code} ({inc.title}): follow its runbook, `{pointer}`. "
            f"First step: {inc.first_step}"
        )


def cause_kind(f: Finding) -> str:
    """hardware / software / configuration / job / network for a finding (signatures: by the family they
    report: a registry reset or an NCCL socket failure is the network's, not the software's)."""
    from gpuclinic.knowledge.codes import info, kind

    if f.code.startswith("error.") or info(f.code) is None:
        if f.family in (Family.GPU_FAULT, Family.PCIE_POWER, Family.HEAT):
            return "hardware"
        return "network" if f.family == Family.NETWORK else "software"
    return kind(f.code)


def explain_verdict(findings: list[Finding]) -> Verdict:
    """explain drains only on hardware evidence about a node; a software cause is at most a warning."""
    hard = [f for f in findings if cause_kind(f) == "hardware"]
    if any(f.severity == Severity.CRITICAL for f in hard):
        return Verdict.DRAIN
    if any(f.severity >= Severity.WARNING for f in findings):
        return Verdict.WARNING
    return Verdict.HEALTHY


def first_step_for(code: str, f: Finding) -> str:
    """An incident's first step: the runbook's for ``code``, filled in for the finding's GPU; for a code
    whose detector computes its fix (an error signature's, ``remedy_computed``), the first sentence of
    that fix, the finding's own remedy (:func:`runbooks.finding_remedy` decides which, for both)."""
    from gpuclinic.incidents import first_sentence
    from gpuclinic.knowledge.runbooks import finding_remedy, first_step

    if code == f.code and f.remedy:
        own = finding_remedy(code, f.gpu, f.remedy)
        if own == f.remedy and own != first_step(code, f.gpu):  # the detector's own, exact fix
            return first_sentence(own)
    return first_step(code, f.gpu) or first_sentence(f.remedy)


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
