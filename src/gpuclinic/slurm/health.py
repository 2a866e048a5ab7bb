"""Slurm health check, prolog and epilog decisions on top of the doctor.

Slurm ignores a HealthCheckProgram's exit status ("any action must be performed by the program"),
so the check drains the node itself, with a short ``gpuclinic:`` reason.  It undoes only its own
drains: a node drained by an admin or another tool keeps its state and reason.  The doctor runs in
quick mode so the check fits in HealthCheckTimeout (60 s before Slurm 26.05) and in a prolog.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.diagnose import Report, diagnose
from gpuclinic.model import GpuRef, Severity, Verdict
from gpuclinic.slurm.scontrol import REASON_PREFIX, NodeState, Scontrol, clean_reason

#: Environment variables naming a Slurm job's GPUs, most specific to the node first.  SLURM_JOB_GPUS
#: and SLURM_STEP_GPUS hold the node's own (absolute) indices; CUDA_VISIBLE_DEVICES may be renumbered
#: inside a device cgroup, so it comes last.
GPU_ENV = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Problem:
    """One blocking cause: a root-cause code on a GPU (or the node)."""

    code: str
    gpu: GpuRef | None
    title: str

    def label(self) -> str:
        return f"{self.code} {self.gpu.label()}" if self.gpu else self.code


@dataclass
class Judgement:
    verdict: Verdict | None  # None: could not judge (no GPU data)
    problems: list[Problem] = field(default_factory=list)  # critical causes, worst first
    why_unjudged: str = ""

    def reason(self) -> str:
        """``gpuclinic: gpu.fallen_off_bus GPU 4`` (+N more)."""
        if not self.problems:
            return f"{REASON_PREFIX} drain verdict"
        extra = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return clean_reason(f"{REASON_PREFIX} {self.problems[0].label()}{extra}")


def run_doctor(scenario: str | None = None, *, kernel_logs: Iterable[str] = ()) -> Report:
    """The doctor in quick mode (no timed host sampling), or on a simulated node."""
    if scenario:
        from gpuclinic.sources.scenarios import load_scenario

        return diagnose(load_scenario(scenario))
    from gpuclinic.collect import CollectOptions, collect_live

    return diagnose(collect_live(CollectOptions(quick=True, kernel_logs=list(kernel_logs))))


def critical_problems(report: Report) -> list[Problem]:
    """Root causes that call for a drain: open critical incidents when the report has them (issue 9's
    model), else critical findings, the first (worst-ranked) per GPU: the rest on that GPU are
    usually its symptoms (XID 79, gpu.missing and AER under gpu.fallen_off_bus)."""
    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    incidents: list[Any] = list(getattr(report, "incidents", None) or [])
    items: list[Any] = incidents or list(report.findings)
    for it in items:
        if getattr(it, "severity", None) != Severity.CRITICAL:
            continue
        gpu = getattr(it, "gpu", None)
        key = (
            ("", gpu.label())
            if gpu is not None and not incidents
            else (str(it.code), gpu.label() if gpu else "")
        )
        if key in seen:
            continue
        seen.add(key)
        out.append(Problem(code=str(it.code), gpu=gpu, title=str(getattr(it, "title", ""))))
    return out


def judge(report: Report) -> Judgement:
    """The report's verdict, except that a "healthy" with no GPU seen at all is no verdict."""
    if not report.snapshot.gpus and report.verdict == Verdict.HEALTHY:
        why = "; ".join(f"{s.what}: {s.why}" for s in report.skipped[:2]) or "no GPU seen"
        return Judgement(verdict=None, why_unjudged=f"no GPUs seen ({why})")
    return Judgement(verdict=report.verdict, problems=critical_problems(report))


@dataclass
class Action:
    """What the health check did to the node, for the log line and the tests."""

    kind: str  # drained | redrained | resumed | kept | left_alone | none | report_only
    message: str


def reconcile(j: Judgement, node: NodeState, sc: Scontrol | None) -> Action:
    """Bring the node's drain state in line with the judgement, touching only gpuclinic's own drains.

    ``sc`` None means report only: decide and describe, change nothing.
    """
    name = node.name
    if j.verdict is None:
        return Action("none", f"could not judge ({j.why_unjudged}); node {name} left as it is")
    if j.verdict == Verdict.DRAIN:
        want = j.reason()
        if node.drained and not node.ours:
            who = f" by {node.reason_user}" if node.reason_user else ""
            return Action(
                "left_alone",
                f"{name} already {node.state}{who} ({node.reason or 'no reason'}); "
                f"not touched. gpuclinic would drain: {want}",
            )
        if node.ours and node.reason == want:
            return Action("kept", f"{name} stays drained: {want}")
        if sc is not None:
            sc.drain(name, want)
        return Action("redrained" if node.ours else "drained", f"drained {name}: {want}")
    # healthy or warning: undo our own drain only
    if node.drained and node.ours:
        if sc is not None:
            sc.resume(name)
        return Action("resumed", f"resumed {name} (was: {node.reason}); verdict now {j.verdict.value}")
    if node.drained:
        return Action(
            "left_alone",
            f"{name} is {node.state} ({node.reason or 'no reason'}), not by gpuclinic; not touched",
        )
    return Action("none", f"{name} {j.verdict.value}; nothing to do")


def job_gpu_tokens(env: dict[str, str] | None = None) -> tuple[str | None, list[str] | None]:
    """(which variable, its tokens) for the job's GPUs; (None, None) when no variable names them."""
    env = dict(os.environ) if env is None else env
    for var in GPU_ENV:
        raw = env.get(var)
        if raw is None:
            continue
        toks = [t.strip() for t in raw.split(",") if t.strip()]
        if var == "CUDA_VISIBLE_DEVICES" and raw.strip() in ("", "NoDevFiles"):
            return var, []
        return var, toks
    return None, None


def blocking_for_job(report: Report, tokens: list[str] | None) -> list[Problem]:
    """Critical problems that touch the job's GPUs, or the node as a whole (no GPU named).

    ``tokens`` None means every GPU (no job GPU variable was set).  Tokens are indices or UUIDs.
    """
    probs = critical_problems(report)
    if tokens is None:
        return probs
    idx = {int(t) for t in tokens if t.isdigit()}
    uuids = [t.lower() for t in tokens if t.lower().startswith(("gpu-", "mig-"))]

    def mine(g: GpuRef | None) -> bool:
        if g is None:
            return True
        if g.index is not None and g.index in idx:
            return True
        return bool(g.uuid) and any(str(g.uuid).lower().startswith(u) for u in uuids)

    return [p for p in probs if mine(p.gpu)]


Say = Callable[[str], None]
