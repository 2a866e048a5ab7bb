"""The watch agent's doctor thread: the full doctor checks every ``doctor_interval``, their findings
turned into the agent's conditions.

Kept apart from the agent's sampling and kernel-log loops (:mod:`.agent`): the doctor is slow, runs on its
own thread, and a finding already open from a faster source (kernel log, rules) must not be raised twice.
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING

from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Severity
from gpuclinic.watch.events import Condition

if TYPE_CHECKING:
    from gpuclinic.watch.agent import Agent


def doctor_snapshot(agent: Agent) -> Snapshot:
    """What the doctor judges: the scenario's latest samples, or a quick live collection."""
    if agent.info.name.startswith("scenario:"):
        with agent._lock:
            gpus = list(agent._latest)
        return Snapshot(
            origin="scenario",
            hostname=agent.host,
            driver_version=agent.info.driver_version,
            cuda_driver_version=agent.info.cuda_driver_version,
            nvml_available=True,
            gpus=gpus,
            kernel_events=list(agent._kernel_seen),
            kernel_log_read=True,
            taken_at=_dt.datetime.fromtimestamp(agent.clock.now(), _dt.timezone.utc).isoformat(),
        )
    from gpuclinic.collect import CollectOptions, collect_live

    snap = collect_live(
        CollectOptions(
            quick=True,
            kernel_logs=list(agent.kernel_logs),
            expect_gpus=agent.cfg.agent.expect_gpus,
            nvml_timeout_s=agent.cfg.agent.sample_timeout_s * 3,
        )
    )
    if agent.room_poller is not None:  # the poller's facts: the doctor must not poll the BMC a second time
        snap.room = agent.room_poller.latest() or snap.room
    return snap


def run_doctor(agent: Agent) -> None:
    """One doctor pass: its findings become the "doctor" source's conditions (gone = resolved)."""
    from gpuclinic.diagnose import diagnose

    report = diagnose(agent.doctor_snapshot())
    now = agent.clock.now()
    agent.doctor_verdict = report.verdict
    others = {(ev.code, ev.gpu) for ev in agent.book.open_events() if not ev.key.startswith("doctor:")}
    conds = []
    for f in report.findings:
        if f.severity == Severity.INFO:
            continue
        idx = f.gpu.index if f.gpu else None
        if (f.code, idx) in others:
            continue  # already open from a faster source (kernel log, rules)
        ident = (f.gpu.uuid or f.gpu.pci_bus_id or str(f.gpu.index)) if f.gpu else "node"
        conds.append(Condition.of_finding(f, f"doctor:{f.code}:{ident}", "doctor"))
    agent.book.reconcile("doctor", conds, now)


def doctor_loop(agent: Agent) -> None:
    # first run after a couple of samples so the scenario/NVML state exists
    if agent.clock.sleep(min(5.0, agent.cfg.agent.doctor_interval_s), agent.stop):
        return
    while not agent.stop.is_set():
        try:
            agent.run_doctor()
        except Exception as e:  # the doctor failing must not stop monitoring
            agent.log(f"watch: doctor checks failed: {type(e).__name__}: {e}")
        if agent.clock.sleep(agent.cfg.agent.doctor_interval_s, agent.stop):
            return
