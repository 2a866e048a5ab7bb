"""One attempt of a supervised job: start it, pass its output through, watch it, gather evidence.

Why a module of its own: an attempt is process and pipe handling on a poll loop (signals to the
job's process group, the kill deadline, a fatal GPU fault's grace period, hang detection from the
heartbeat, output and GPU activity) that ends in the evidence classify.py judges.  The loop that
decides whether to restart, and records it all, is runner.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpuclinic.model import Incident
from gpuclinic.supervise.classify import AttemptEvidence, Classification, event_on_job, is_fatal_event
from gpuclinic.supervise.gpus import GpuSource, JobGpu, NoGpus
from gpuclinic.supervise.gpuwatch import GpuWatcher
from gpuclinic.supervise.jobspec import Notifier, RunOptions
from gpuclinic.supervise.kernel import KernelWindow, LiveKernelFollower, find_oom_kills, parse_gpu_events
from gpuclinic.supervise.ledger import Ledger
from gpuclinic.supervise.procs import OutputPump, Tracker, cleanup, killpg, reap_zombies


@dataclass
class AttemptResult:
    evidence: AttemptEvidence
    started_at: float
    ended_at: float
    returncode: int | None


def cgroup_oom_kills() -> int | None:
    """``oom_kill`` from this cgroup's memory.events (cgroup v2): counts OOM kills inside containers,
    where the kernel log is usually not readable."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    rel = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    if rel is None:
        return None
    try:
        with open(os.path.join("/sys/fs/cgroup", rel.lstrip("/"), "memory.events")) as f:
            for ln in f:
                k, _, v = ln.partition(" ")
                if k == "oom_kill":
                    return int(v)
    except (OSError, ValueError):
        return None
    return None


@dataclass
class _AttemptWatch:
    """What the polling loop of one attempt carries from one tick to the next."""

    mem_peak: float
    hang_reason: str | None = None
    fault: str | None = None
    fault_deadline: float | None = None
    last_scan: float = 0.0
    last_fault_check: float = 0.0


class _AttemptRunner:
    """The supervisor's state, and how it runs one attempt (the base of ``Supervisor``)."""

    def __init__(
        self,
        opts: RunOptions,
        *,
        source: GpuSource | None = None,
        notifier: Notifier | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.opts = opts
        self.source: GpuSource = source or NoGpus("no GPU source")
        self.notifier = notifier
        self._say = say or (lambda m: print(f"gpuclinic: {m}", file=sys.stderr, flush=True))
        self.run_id: int | None = None
        self.ledger: Ledger | None = None
        self.interruptions: list[tuple[Classification, str]] = []
        self.incidents: list[Incident] = []  # the last interruption's, grouped the doctor's way
        self.exit_code = 0
        self.run_dir: Path | None = None
        self._stop_signal: int | None = None
        self._escalate = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._kill_deadline: float | None = None
        self._ledger_broken = False
        self.pump: OutputPump | None = None
        self._hup = False
        self._console_gone = False

    # ------------------------------------------------------------ helpers
    def say(self, msg: str) -> None:
        """A gpuclinic line to stderr and the log; a vanished terminal only silences stderr."""
        if not self._console_gone:
            try:
                self._say(msg)
            except (OSError, ValueError):
                self._console_gone = True
        if self.pump is not None:
            self.pump.note(f"gpuclinic: {msg}")

    def _on_signal(self, signum: int) -> None:
        """SIGINT/SIGTERM to us: forward to the job's group; a second one kills it at once.

        SIGUSR1/SIGUSR2 are passed on (``gpuclinic.train`` turns SIGUSR1 into "checkpoint now").
        SIGHUP (the ssh session ended) is ignored: supervision goes on and output goes on into the log.
        """
        proc = self._proc
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            if proc is not None and proc.poll() is None:
                killpg(proc.pid, signum)
            return
        if signum == signal.SIGHUP:
            self._hup = True
            return
        if self._stop_signal is None:
            self._stop_signal = signum
            if proc is not None and proc.poll() is None:
                killpg(proc.pid, signum)
                self._kill_deadline = time.monotonic() + self.opts.stop_timeout_s
        else:
            self._escalate = True
            if proc is not None:
                killpg(proc.pid, signal.SIGKILL)

    def _watch_tick(
        self,
        proc: subprocess.Popen[bytes],
        w: _AttemptWatch,
        follower: LiveKernelFollower | None,
        watcher: GpuWatcher,
        tracker: Tracker,
        job_gpus: list[JobGpu],
        started: float,
        t0: float,
        heartbeat: Path,
    ) -> None:
        """One poll while the job runs: SIGHUP note, process scan, kill deadline, fatal GPU fault, hang."""
        o = self.opts
        now = time.monotonic()
        if self._hup:
            self._hup = False
            self.say("terminal hung up (SIGHUP): still supervising; the job's output goes on into the log")
        if now - w.last_scan >= 0.5:
            tracker.scan()
            with contextlib.suppress(Exception):
                w.mem_peak = max(w.mem_peak, psutil.virtual_memory().percent)
            w.last_scan = now
        if self._kill_deadline is not None and now >= self._kill_deadline:
            self.say(f"job did not stop within {o.stop_timeout_s:g}s: killing its process group")
            killpg(proc.pid, signal.SIGKILL)
            for p in tracker.alive():
                with contextlib.suppress(psutil.Error):
                    p.kill()
            self._kill_deadline = None
        if (
            w.fault is None
            and o.gpu_fault_grace_s is not None
            and self._stop_signal is None
            and now - w.last_fault_check >= 0.2
        ):
            w.last_fault_check = now
            w.fault = self._live_fatal_fault(follower, watcher, started, job_gpus, tracker.pids | {proc.pid})
            if w.fault:
                w.fault_deadline = now + o.gpu_fault_grace_s
                self.say(
                    f"fatal GPU fault on the job's GPU: {w.fault}; stopping the job "
                    f"{'now' if o.gpu_fault_grace_s <= 0 else f'in {o.gpu_fault_grace_s:g}s'} "
                    "unless it exits"
                )
        if w.fault_deadline is not None and now >= w.fault_deadline:
            w.fault_deadline = None
            if self._kill_deadline is None:
                killpg(proc.pid, signal.SIGTERM)
                self._kill_deadline = now + o.stop_timeout_s
        if w.hang_reason is None and o.hang_timeout_s and self._stop_signal is None and w.fault is None:
            w.hang_reason = self._hang_check(t0, started, heartbeat, watcher)
            if w.hang_reason:
                self.say(f"hang detected: {w.hang_reason}; stopping the job")
                killpg(proc.pid, signal.SIGTERM)
                self._kill_deadline = now + o.stop_timeout_s

    def _attempt(
        self,
        argv: list[str],
        env: dict[str, str],
        window: KernelWindow,
        follower: LiveKernelFollower | None,
        tracker: Tracker,
        watcher: GpuWatcher,
        job_gpus: list[JobGpu],
        heartbeat: Path,
    ) -> AttemptResult:
        o = self.opts
        pump = self.pump
        assert pump is not None
        window.mark()
        tracker.reset()
        pump.reset()
        oom0 = cgroup_oom_kills()
        started = time.time()
        t0 = time.monotonic()
        watcher.begin(job_gpus)
        mem_peak = psutil.virtual_memory().percent
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=o.cwd,
                start_new_session=True,
            )
        except OSError as e:
            ev = AttemptEvidence(
                returncode=127, output_tail=f"gpuclinic: cannot start {argv[0]}: {e.strerror}"
            )
            self.say(f"cannot start {argv[0]}: {e.strerror}")
            return AttemptResult(ev, started, time.time(), 127)
        self._proc = proc
        if self._stop_signal is not None:  # a stop arrived while we were launching
            killpg(proc.pid, self._stop_signal)
            self._kill_deadline = time.monotonic() + o.stop_timeout_s
        assert proc.stdout is not None and proc.stderr is not None
        pump.attach(os.dup(proc.stdout.fileno()), 1)
        pump.attach(os.dup(proc.stderr.fileno()), 2)
        proc.stdout.close()
        proc.stderr.close()
        w = _AttemptWatch(mem_peak=mem_peak)
        while True:
            try:
                proc.wait(timeout=o.poll_s)
                break
            except subprocess.TimeoutExpired:
                pass
            self._watch_tick(proc, w, follower, watcher, tracker, job_gpus, started, t0, heartbeat)
        hang_reason, mem_peak = w.hang_reason, w.mem_peak
        ended = time.time()
        self._kill_deadline = None
        self._proc = None
        rc = proc.returncode
        tracker.scan()
        leftovers = cleanup(proc.pid, tracker, min(o.stop_timeout_s, 3.0))
        if leftovers:
            self.say(
                f"killed {len(leftovers)} leftover process(es) of the job: "
                f"{', '.join(map(str, leftovers[:10]))}"
            )
        if not pump.join(2.0):
            self.say("warning: job output still open after exit (a descendant escaped); not waiting for it")
        reap_zombies()
        # the kernel may log a fault a moment after the process dies
        if follower is not None and follower.available and o.settle_s > 0:
            time.sleep(o.settle_s)
        lines = window.read()
        kevents = parse_gpu_events(lines, origin="kernel log")
        if follower is not None:
            seen = {e.line for e in kevents}
            kevents += [e for e in follower.since(started) if e.line not in seen]
        simulated = getattr(self.source, "kernel_events", None)  # scenario backend: its fault happens now
        if callable(simulated):
            kevents += simulated()
        oom1 = cgroup_oom_kills()
        ev = AttemptEvidence(
            returncode=rc,
            output_tail=pump.tail_text(),
            user_stop_signal=self._stop_signal,
            hang_reason=hang_reason,
            kernel_events=kevents,
            oom_kills=find_oom_kills(lines),
            cgroup_oom_kills=max(0, (oom1 or 0) - (oom0 or 0))
            if oom0 is not None and oom1 is not None
            else 0,
            gpu_faults=list(watcher.faults),
            job_pids=set(tracker.pids) | {proc.pid},
            job_gpus=[g.ref() for g in job_gpus],
            mem_peak_pct=mem_peak,
            kernel_note=window.why_not,
        )
        return AttemptResult(ev, started, ended, rc)

    def _live_fatal_fault(
        self,
        follower: LiveKernelFollower | None,
        watcher: GpuWatcher,
        started: float,
        job_gpus: list[JobGpu],
        pids: set[int],
    ) -> str | None:
        """A fault seen while the job runs after which it cannot continue on that GPU."""
        for f in list(watcher.faults):
            if f.fatal:
                return f"{f.gpu.label()}: {f.what}"
        if follower is not None and follower.available:
            refs = [g.ref() for g in job_gpus]
            for k in follower.since(started):
                if is_fatal_event(k) and event_on_job(k, refs, pids)[0]:
                    return k.line.strip()[:300]
        return None

    def _hang_check(self, t0: float, started_wall: float, heartbeat: Path, watcher: GpuWatcher) -> str | None:
        limit = self.opts.hang_timeout_s
        assert limit is not None
        now = time.monotonic()
        try:
            hb = heartbeat.stat().st_mtime
        except OSError:
            hb = None
        if hb is not None and hb >= started_wall - 1:
            age = time.time() - hb
            if age > limit:
                return f"heartbeat file {heartbeat} not touched for {age:.0f}s (limit {limit:g}s)"
            return None  # heartbeats are fresh: silence is fine
        assert self.pump is not None
        last = max(self.pump.last_output, watcher.last_activity, t0)
        idle = now - last
        if idle > limit:
            gpu = "" if isinstance(watcher.source, NoGpus) else " and no GPU activity"
            return f"no output{gpu} for {idle:.0f}s (limit {limit:g}s)"
        return None
