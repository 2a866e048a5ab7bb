"""What /metrics, the JSON API and the dashboard show of a running agent: one consistent copy
(:class:`StatusSnapshot`) taken under the agent's lock, and the columns of its in-memory series.

Kept apart from the agent's loops (:mod:`.agent`) so the servers read a plain value, not the agent's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.model import Verdict
from gpuclinic.watch.events import Event

if TYPE_CHECKING:
    from gpuclinic.watch.agent import Agent

SERIES_FIELDS = (
    "ts",
    "temp",
    "slowdown",
    "power",
    "power_limit",
    "sm_clock",
    "sm_clock_max",
    "util",
    "mem_used",
    "mem_total",
    "reasons",
    "mem_temp",
)


@dataclass
class StatusSnapshot:
    """A consistent copy of what /metrics and the dashboard show."""

    gpus: list[GpuFacts]
    driver_version: str | None
    backend: str
    xids: dict[tuple[str, str, int], tuple[int, float]]
    open_events: list[Event]
    gpu_count: int
    gpus_expected: int
    last_ok: float | None
    sample_age: float
    sample_duration: float
    stalled: bool
    samples_total: int
    sample_errors_total: int
    store_error: str | None
    store_errors_total: int
    store_buffered: int
    notify_sent: int
    notify_failed: int
    notify_spooled: int
    verdict: Verdict
    now: float
    notes: list[str] = field(default_factory=list)

    @property
    def verdict_code(self) -> int:
        return self.verdict.exit_code


def status_snapshot(agent: Agent) -> StatusSnapshot:
    """The agent's state now, copied under its lock."""
    now = agent.clock.now()
    with agent._lock:
        gpus = list(agent._latest)
        xids = dict(agent.xids)
    st = agent.store
    n = agent.notifier
    return StatusSnapshot(
        gpus=gpus,
        driver_version=agent.info.driver_version,
        backend=agent.info.name,
        xids=xids,
        open_events=agent.book.open_events(),
        gpu_count=len(gpus),
        gpus_expected=max(agent.cfg.agent.expect_gpus or 0, len(agent.rules.known)),
        last_ok=agent.last_ok,
        sample_age=round(now - (agent.last_ok or agent.started_at), 3),
        sample_duration=agent.last_duration,
        stalled=agent.stalled,
        samples_total=agent.samples_total,
        sample_errors_total=agent.sample_errors_total,
        store_error=st.error if st else None,
        store_errors_total=st.errors_total if st else 0,
        store_buffered=st.buffered if st else 0,
        notify_sent=n.sent_total if n else 0,
        notify_failed=n.failed_total if n else 0,
        notify_spooled=n.spooled if n else 0,
        verdict=agent.verdict(),
        now=now,
        notes=[x for x in (agent.kernel_note,) if x],
    )
