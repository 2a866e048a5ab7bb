"""The watch agent: sample, evaluate rules, follow the kernel log, run the doctor, store, alert.

Threads and why:

* the main loop samples every ``interval`` through :class:`TimedSampler` (its own worker thread, so a
  hung NVML call is detected and reported rather than waited on), evaluates rules and flushes the store;
* a kernel-log thread handles XID/AER/GSP lines the moment they are written (not on the next tick);
* a doctor thread runs the full doctor checks every ``doctor_interval`` (they are slow; :mod:`.agent_doctor`);
* notifications go out from the notifier's own thread, so a slow webhook never delays sampling.

What the servers read of it is a :class:`.status.StatusSnapshot`.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge.codes import severity
from gpuclinic.knowledge.runbooks import remedy
from gpuclinic.model import Verdict
from gpuclinic.watch import agent_doctor
from gpuclinic.watch import reasons as R
from gpuclinic.watch.backend import (
    BackendInfo,
    Clock,
    KernelLineSource,
    RealClock,
    SamplerBackend,
    TimedSampler,
)
from gpuclinic.watch.config import WatchConfig
from gpuclinic.watch.events import Condition, Event, EventBook, IncidentTracker, TrackedIncident
from gpuclinic.watch.kernel import LineParser, condition_for, follow_events
from gpuclinic.watch.notify import Alert, Notifier
from gpuclinic.watch.rules import RuleEngine
from gpuclinic.watch.status import SERIES_FIELDS, StatusSnapshot, status_snapshot
from gpuclinic.watch.store import StoreError, WatchStore


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Agent:
    def __init__(
        self,
        cfg: WatchConfig,
        backend: SamplerBackend,
        *,
        clock: Clock | None = None,
        store: WatchStore | None = None,
        notifier: Notifier | None = None,
        kernel_logs: list[str] | None = None,
        follow_live_kernel: bool = False,
        log: Callable[[str], None] | None = None,
        history_points: int = 900,
        doctor: bool = True,
        bmc: Any = None,  # sources.bmc.live.BmcOptions: poll this BMC (sources/bmc/poller.py)
        bmc_interval_s: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock: Clock = clock or RealClock()
        self.backend = backend
        self.store = store
        self.notifier = notifier
        self.kernel_logs = list(kernel_logs or [])
        self.follow_live_kernel = follow_live_kernel
        self.log = log or _stderr
        self.host = socket.gethostname()
        self.doctor_enabled = doctor and cfg.agent.doctor_interval_s > 0
        self.rules = RuleEngine(cfg.rules, expect_gpus=cfg.agent.expect_gpus)
        self.book = EventBook(resolve_after_s=cfg.rules.resolve_after_s, disabled=cfg.rules.disabled)
        self.book.subscribe(self._on_event)
        self.incidents = IncidentTracker(grace_s=cfg.rules.incident_grace_s)
        self._batch = False
        self.incidents.subscribe(self._on_incident)
        self.info = BackendInfo(name="?")
        self.stop = threading.Event()
        self._lock = threading.RLock()
        self._latest: list[GpuFacts] = []
        self._series: dict[int, deque[tuple[Any, ...]]] = {}
        from gpuclinic.fleet.idle import IdleMeter

        self.idle = IdleMeter()  # idle GPU seconds for `gpuclinic fleet` (gpuclinic_gpu_idle_seconds_total)
        self._history_points = history_points
        self.xids: dict[tuple[str, str, int], tuple[int, float]] = {}
        self._kernel_seen: deque[KernelEvent] = deque(maxlen=500)
        self._parser = LineParser(origin="scenario")
        self.last_ok: float | None = None
        self.last_duration = 0.0
        self.stalled = False
        self.samples_total = 0
        self.sample_errors_total = 0
        self._err_streak = 0
        self._last_error: str | None = None
        self._last_flush = 0.0
        self._last_maint = 0.0
        self._store_error_logged: str | None = None
        self._threads: list[threading.Thread] = []
        self.sampler: TimedSampler | None = None
        self.doctor_verdict: Verdict | None = None
        self.started_at = self.clock.now()
        self.kernel_note: str | None = None
        self.room_poller: Any = None
        if bmc is not None:
            from gpuclinic.sources.bmc.poller import attach

            self.room_poller = attach(self, bmc, bmc_interval_s)

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, opened: BackendInfo | None = None) -> None:
        """Open the backend (unless the caller did) and start the helper threads (not the main loop)."""
        self.info = opened if opened is not None else self.backend.open()
        self.started_at = self.clock.now()
        self.sampler = TimedSampler(self.backend, self.cfg.agent.sample_timeout_s, self.clock)
        if self.store is not None:
            try:
                self.book.restore(self.store.events(open_only=True))
            except Exception as e:  # a damaged events table must not stop monitoring
                self.log(f"watch: could not restore open events: {e}")
        if self.kernel_logs or self.follow_live_kernel:
            self._spawn("gpuclinic-kernel", self._kernel_loop)
        if self.doctor_enabled:
            self._spawn("gpuclinic-doctor", self._doctor_loop)
        if self.room_poller is not None:
            self._spawn("gpuclinic-bmc", lambda: self.room_poller.run(self.stop))

    def _spawn(self, name: str, fn: Callable[[], None]) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def run(self, duration_s: float | None = None) -> None:
        """Run the sampling loop until :attr:`stop` is set (or ``duration_s`` of agent time passed)."""
        if self.sampler is None:
            self.start()
        interval = self.cfg.agent.interval_s
        t_end = None if duration_s is None else self.clock.now() + duration_s
        nxt = self.clock.now()
        while not self.stop.is_set():
            self.tick()
            nxt += interval
            now = self.clock.now()
            if t_end is not None and now >= t_end:
                break
            if nxt < now - interval:  # fell behind (e.g. a stall): do not burst to catch up
                nxt = now
            if self.clock.sleep(nxt - now, self.stop):
                break
        self.shutdown()

    def shutdown(self) -> None:
        self.stop.set()
        self._flush(force=True)
        if self.sampler is not None:
            self.sampler.close()
        for t in self._threads:
            t.join(timeout=1.0)
        if self.notifier is not None:
            self.notifier.flush(timeout=3.0)

    # -- one tick -------------------------------------------------------------------------------------
    def tick(self) -> None:
        """One sample through the rules; incidents are regrouped once, after everything this tick saw."""
        self._batch = True
        try:
            self._tick()
        finally:
            self._batch = False
        self.incidents.update(self.book.open_events(), self.clock.now())

    def _tick(self) -> None:
        assert self.sampler is not None
        res = self.sampler.sample()
        now = self.clock.now()
        if isinstance(self.backend, KernelLineSource):
            lines = self.backend.poll_kernel_lines()
            if lines:  # lines logged together (an Xid 79 and its "fallen off the bus") are one incident
                for kev in self._parser.feed(lines):
                    self.handle_kernel_event(kev)
        sampler_conds: list[Condition] = []
        if res.gpus is not None:
            self.stalled = False
            self._err_streak = 0
            self.last_ok = now
            self.last_duration = res.duration_s
            self.samples_total += 1
            self._record(now, res.gpus)
            room = getattr(self.backend, "room_facts", None)
            if (
                room is not None and self.room_poller is None
            ):  # a scenario's scripted BMC, through the room checks
                from gpuclinic.sources.bmc.poller import evaluate as evaluate_room

                evaluate_room(self, room())
            conds, points = self.rules.evaluate(now, res.gpus)
            for p in points:
                self.book.raise_condition(p, now)
            self.book.reconcile("rules", conds, now)
        else:
            self.sample_errors_total += 1
            self._err_streak += 1
            self.stalled = res.stalled
            if res.error != self._last_error:
                self.log(f"watch: sampling failed: {res.error}")
            if not res.stalled and self._err_streak >= self.cfg.rules.sample_error_count:
                sampler_conds.append(
                    Condition(
                        key="sampler:watch.sample_errors",
                        code="watch.sample_errors",
                        severity=severity("watch.sample_errors"),
                        title=f"GPU sampling keeps failing ({self._err_streak} times in a row)",
                        evidence=[res.error or "unknown error"],
                        remedy=remedy("watch.sample_errors"),
                    )
                )
        self._last_error = res.error
        age = now - (self.last_ok if self.last_ok is not None else self.started_at)
        if age >= self.cfg.rules.stale_after_s and res.gpus is None:
            sampler_conds.append(
                Condition(
                    key="sampler:watch.sampler_stalled",
                    code="watch.sampler_stalled",
                    severity=severity("watch.sampler_stalled"),
                    title=f"GPU sampler stalled: no fresh sample for {age:.0f} s",
                    evidence=[res.error or "no sample", f"last good sample {_ago(self.last_ok, now)}",
                              "metrics are stale until this clears"],
                    remedy=remedy("watch.sampler_stalled"),
                )
            )
        self.book.reconcile("sampler", sampler_conds, now)
        self.book.expire(now)
        self._flush()
        if self.store is not None and now - self._last_maint >= self.cfg.agent.rollup_interval_s:
            self._last_maint = now
            try:
                self.store.maintain(now)
            except StoreError as e:
                self._store_failed(str(e), now)

    def _record(self, now: float, gpus: list[GpuFacts]) -> None:
        with self._lock:
            self._latest = gpus
            for g in gpus:
                if g.lost:
                    continue
                mask = g.clock_event_reasons_mask
                if mask is None and g.clock_event_reasons:
                    mask = R.mask_of(g.clock_event_reasons)
                row = (
                    round(now, 3),
                    g.temperature_c,
                    g.slowdown_temp_c,
                    g.power_draw_w,
                    g.power_enforced_limit_w if g.power_enforced_limit_w is not None else g.power_limit_w,
                    g.sm_clock_mhz,
                    g.sm_clock_max_mhz,
                    g.utilization_gpu_pct,
                    g.memory_used_bytes,
                    g.memory_total_bytes,
                    mask,
                    g.memory_temperature_c,
                )
                self._series.setdefault(g.index, deque(maxlen=self._history_points)).append(row)
        self.idle.observe(now, gpus)
        if self.store is not None:
            self.store.add_samples(now, gpus)

    def _flush(self, force: bool = False) -> None:
        if self.store is None:
            return
        now = self.clock.now()
        if not force and now - self._last_flush < self.cfg.store.flush_interval_s * getattr(
            self.clock, "scale", 1.0
        ):
            return
        self._last_flush = now
        try:
            self.store.flush()
        except StoreError as e:
            self._store_failed(str(e), now)
            return
        if self._store_error_logged is not None:
            self.log("watch: store writable again; buffered samples written")
            self._store_error_logged = None
        self.book.reconcile("store", [], now)

    def _store_failed(self, err: str, now: float) -> None:
        assert self.store is not None
        if err != self._store_error_logged:
            self.log(
                f"watch: store write failed: {err}; keeping {self.store.buffered} sample rows in memory and "
                "still alerting"
            )
            self._store_error_logged = err
        self.book.reconcile(
            "store",
            [
                Condition(
                    key="store:watch.store_failed",
                    code="watch.store_failed",
                    severity=severity("watch.store_failed"),
                    title=f"watch store cannot write: {err}",
                    evidence=[
                        f"store {self.store.path}: {err}",
                        f"{self.store.buffered} sample rows held in memory",
                        "alerts and /metrics keep working; history has a gap until the store is writable",
                        "the agent writes the held samples as soon as it can (move the store with --db PATH)",
                    ],
                    remedy=remedy("watch.store_failed"),
                )
            ],
            now,
        )

    # -- events ---------------------------------------------------------------------------------------
    def _on_event(self, ev: Event, what: str) -> None:
        if self.store is not None:
            self.store.put_event(ev)
        gpu = f" GPU {ev.gpu}" if ev.gpu is not None else ""
        if what == "resolved":
            self.log(
                f"watch: RESOLVED {ev.code}{gpu}: {ev.title} (after {ev.data.get('duration_s', 0):.0f} s)"
            )
        else:
            self.log(f"watch: {what.upper()} {ev.severity.label} {ev.code}{gpu}: {ev.title}")
        if not self._batch:
            self.incidents.update(self.book.open_events(), self.clock.now())

    def _on_incident(self, t: TrackedIncident, what: str) -> None:
        """One alert per incident (and one when it resolves); its symptoms ride along in the same message."""
        inc = t.shown if what == "resolved" else t.incident
        gpu = f" GPU {inc.gpu.index}" if inc.gpu and inc.gpu.index is not None else ""
        self.log(
            f"watch: INCIDENT {what.upper()} {inc.severity.label} {inc.code}{gpu}: {inc.title}"
            + (f" (explains {', '.join(inc.symptoms)})" if inc.symptoms else "")
        )
        if self.notifier is None:
            return
        idx = inc.gpu.index if inc.gpu and inc.gpu.index is not None else None
        alert = Alert(
            key=t.id,
            code=inc.code,
            severity=inc.severity.label,
            title=inc.title,
            status="resolved" if what == "resolved" else "firing",
            host=self.host,
            gpu=idx,
            uuid=inc.gpu.uuid if inc.gpu else None,
            evidence=list(inc.evidence),
            remedy=remedy(inc.code, inc.gpu, inc.first_step),
            opened=t.opened,
            resolved=t.resolved,
            data={
                "incident": t.id,
                "symptoms": list(inc.symptoms),
                "runbook": inc.runbook,
                "family": inc.family.value,
            },
        )
        if what == "escalated":
            alert.key = f"{t.id}#{inc.severity.label}"  # a new message for the worse severity
        self.notifier.send(alert)

    def _bus_map(self) -> dict[str, tuple[int, str | None]]:
        with self._lock:
            latest = list(self._latest)
        out = {normalize_bus_id(g.pci_bus_id): (g.index, g.uuid) for g in latest if g.pci_bus_id}
        for kn in self.rules.known.values():
            if kn.pci_bus_id:
                out.setdefault(normalize_bus_id(kn.pci_bus_id), (kn.index, kn.uuid))
        return out

    def handle_kernel_event(self, kev: KernelEvent) -> None:
        now = self.clock.now()
        self._kernel_seen.append(kev)
        bus_map = self._bus_map()
        if kev.kind == "xid" and kev.xid is not None:
            bus = normalize_bus_id(kev.pci_bus_id) if kev.pci_bus_id else ""
            uuid = bus_map.get(bus, (None, None))[1] or ""
            k = (uuid, bus, kev.xid)
            with self._lock:
                n, _ = self.xids.get(k, (0, 0.0))
                self.xids[k] = (n + 1, now)
        cond = condition_for(kev, bus_map, self.cfg.rules.counter_hold_s)
        if cond is not None:
            self.book.raise_condition(cond, now)
            self._flush(force=True)

    def _kernel_loop(self) -> None:
        try:
            for kev in follow_events(self.kernel_logs or None, self.stop):
                if self.stop.is_set():
                    return
                if kev is not None:
                    self._batch = True  # events read together are grouped before anyone is told
                    self.handle_kernel_event(kev)
                elif self._batch:  # the follower caught up: group what arrived, alert once per incident
                    self._batch = False
                    self.incidents.update(self.book.open_events(), self.clock.now())
        except Exception as e:  # following failed (permissions, journalctl missing): say so, keep sampling
            self.kernel_note = f"kernel log not followed: {type(e).__name__}: {e}"
            self.log(f"watch: {self.kernel_note}")

    # -- doctor (its thread: agent_doctor.py) -------------------------------------------------------
    def doctor_snapshot(self) -> Snapshot:
        return agent_doctor.doctor_snapshot(self)

    def run_doctor(self) -> None:
        agent_doctor.run_doctor(self)

    def _doctor_loop(self) -> None:
        agent_doctor.doctor_loop(self)

    # -- views ----------------------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        worst = max((ev.severity for ev in self.book.open_events()), default=None)
        return Verdict.from_severity(worst)

    def status_snapshot(self) -> StatusSnapshot:
        return status_snapshot(self)

    def series(self, gpu: int | None = None, since: float | None = None) -> dict[int, list[tuple[Any, ...]]]:
        with self._lock:
            out = {}
            for idx, dq in sorted(self._series.items()):
                if gpu is not None and idx != gpu:
                    continue
                rows = list(dq)
                if since is not None:
                    rows = [r for r in rows if r[0] > since]
                out[idx] = rows
            return out

    def uuid_of(self, g: GpuFacts) -> str:
        """The GPU's UUID, remembered from earlier samples when a lost GPU stops reporting it."""
        if g.uuid:
            return g.uuid
        kn = self.rules.known.get(self.rules.key(g))
        return (kn.uuid if kn else None) or ""


def _ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "never"
    return f"{now - ts:.0f} s ago"


__all__ = ["SERIES_FIELDS", "Agent", "StatusSnapshot"]
