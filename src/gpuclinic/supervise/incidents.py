"""An interruption as incidents: what the attempt saw, judged by the doctor's detectors and grouped by
``incidents.py``, so ``run`` names a fault exactly as ``doctor`` and ``watch`` do.

When a job dies (or is stopped for a fatal GPU fault), classify.py says *why the job ended*; this module
says *what is wrong with the machine*, with the shared model: the kernel-log lines of the attempt and the
watcher's samples of the job's GPUs become a :class:`Window` of snapshots that the GPU detectors
``observe()``; the interruption itself is one more finding (``run.interruption.<class>``); the
correlation rules (``knowledge/data/correlation.json``) make the hardware fault the root cause and the
interruption its symptom.  The result is a doctor report (``gpuclinic.report/2``, command ``run``).
"""

from __future__ import annotations

import datetime as _dt
import socket
from collections.abc import Sequence
from typing import Any

from gpuclinic.checks import Window, detectors
from gpuclinic.diagnose import Report, build_report
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge import codes as K
from gpuclinic.knowledge.runbooks import remedy
from gpuclinic.model import Finding, Incident, Skipped
from gpuclinic.supervise.classify import AttemptEvidence, Classification, class_info, event_on_job

# the failure classes a job's GPUs can show during a run (kernel log and NVML); the rest (software,
# network, host, room) are judged by the pre-flight doctor, not per attempt
RUN_DETECTORS = ("gpu_presence", "xid", "gsp", "hbm", "pcie", "nvlink", "heat", "power")


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


def interruption_finding(cls: Classification) -> Finding | None:
    """The interruption as a finding (``run.interruption.<class>``); none for a planned stop or success."""
    if not cls.interrupted or cls.planned:
        return None
    code = f"run.interruption.{cls.cls}"
    return Finding(
        code=code,
        severity=K.severity(code),
        family=K.family(code),
        title=f"Job interrupted: {class_info(cls.cls)['title']}: {cls.summary}",
        evidence=list(cls.evidence),
        remedy=cls.remedy,
        gpu=cls.gpu,
        data={"class": cls.cls},
        source="gpuclinic run",
    )


def attempt_window(
    ev: AttemptEvidence,
    samples: Sequence[tuple[float, list[GpuFacts]]],
    *,
    at: float,
    host: str | None = None,
) -> Window:
    """One snapshot per sample of the job's GPUs, each with the attempt's kernel events on the job's GPUs
    (so the kernel detectors see them whatever sample is newest); a single GPU-less one without samples."""
    kernel = [k for k in ev.kernel_events if event_on_job(k, ev.job_gpus, ev.job_pids)[0]]
    expect = len(ev.job_gpus) or None
    snaps = [
        Snapshot(
            origin="run",
            hostname=host,
            nvml_available=True if gpus else None,
            gpus=list(gpus),
            expect_gpus=expect if gpus else None,
            kernel_events=kernel,
            kernel_log_read=ev.kernel_note is None,
            taken_at=_iso(t),
        )
        for t, gpus in (samples or [(at, [])])
    ]
    span = max(0.0, (samples[-1][0] - samples[0][0])) if samples else 0.0
    return Window(tuple(snaps), span_s=span)


def attempt_report(
    ev: AttemptEvidence,
    cls: Classification,
    samples: Sequence[tuple[float, list[GpuFacts]]] = (),
    *,
    at: float,
    host: str | None = None,
) -> Report:
    """The attempt's findings (the run detectors over its window, and the interruption) as a report."""
    window = attempt_window(ev, samples, at=at, host=host or socket.gethostname())
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    dets = detectors()
    for name in RUN_DETECTORS:
        found, sk = dets[name].observe(window)
        findings += found
        skipped += sk
    inter = interruption_finding(cls)
    if inter is not None:
        findings.append(inter)
    return build_report(window.latest, findings, skipped, command="run")


def incident_lines(incidents: Sequence[Incident]) -> list[str]:
    """Incidents as the supervisor prints them: the cause, what it explains, the first step of its runbook."""
    out: list[str] = []
    for i in incidents:
        where = f" {i.gpu.label()}" if i.gpu else ""
        also = f" (explains {', '.join(i.symptoms)})" if i.symptoms else ""
        out.append(f"incident {i.severity.label} {i.code}{where}: {i.title}{also}")
        if i.first_step:
            out.append(f"  first step: {remedy(i.code, i.gpu, i.first_step)}")
    return out


def report_json(rep: Report) -> dict[str, Any]:
    """The report as doctor writes it with ``--json`` (schema ``gpuclinic.report/2``), without the facts."""
    return rep.to_dict(include_facts=False)
