"""The supervisor loop: start the job, watch it, classify how it ended, restart or stop, record it all."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gpuclinic import train
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.model import GpuRef
from gpuclinic.supervise.classify import (
    COMPLETED,
    DEFAULT_RETRY,
    AttemptEvidence,
    Classification,
    GpuFault,
    classify,
    event_on_job,
    is_fatal_event,
    signal_name,
)
from gpuclinic.supervise.gpus import GpuSource, JobGpu, NoGpus, exclude, parse_visible, resolve, visible_value
from gpuclinic.supervise.kernel import KernelWindow, LiveKernelFollower, find_oom_kills, parse_gpu_events
from gpuclinic.supervise.ledger import Ledger
from gpuclinic.supervise.procs import (
    OutputPump,
    Tracker,
    become_subreaper,
    cleanup,
    killpg,
    on_signals,
    reap_zombies,
    restore_signals,
)

Notifier = Callable[[dict[str, Any]], None]


@dataclass
class RunOptions:
    cmd: list[str]
    max_restarts: int = 3
    backoff_s: float = 10.0
    backoff_max_s: float = 600.0
    retry_on: frozenset[str] = frozenset(DEFAULT_RETRY)
    exclude_bad_gpu: bool = False
    min_gpus: int = 1
    checkpoint_dir: Path | None = None
    hang_timeout_s: float | None = None
    gpu_fault_grace_s: float | None = (
        60.0  # stop a job still running this long after a fatal fault on its GPU
    )
    heartbeat: Path | None = None
    stop_timeout_s: float = 30.0
    log_path: Path | None = None
    kernel_logs: list[str] = field(default_factory=list)
    watch_kernel: bool = True
    sample_interval_s: float = 5.0
    poll_s: float = 0.1
    settle_s: float = 0.5
    db_path: Path | None = None
    echo: bool = True
    env: dict[str, str] | None = None  # base environment (default: ours)
    cwd: str | None = None


@dataclass
class AttemptResult:
    evidence: AttemptEvidence
    started_at: float
    ended_at: float
    returncode: int | None


def substitute(cmd: list[str], *, resume: str | None, ngpus: int, attempt: int) -> list[str]:
    """Fill ``{resume}``, ``{ngpus}``, ``{attempt}`` in the arguments.

    Without a checkpoint an argument holding ``{resume}`` is dropped, and so is an option right
    before a bare ``{resume}`` (``--resume {resume}``), so the first start runs from scratch.
    """
    out: list[str] = []
    for a in cmd:
        if "{resume}" in a:
            if resume is None:
                if a == "{resume}" and out and out[-1].startswith("-") and "=" not in out[-1]:
                    out.pop()
                continue
            a = a.replace("{resume}", resume)
        out.append(a.replace("{ngpus}", str(ngpus)).replace("{attempt}", str(attempt)))
    return out


_SECRET_WORDS = {
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "pass",
    "auth",
    "credential",
    "credentials",
}
_SECRET_VAL = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16})\b"
)


def _secret_option(name: str) -> bool:
    """``--hf-token``, ``--api_key``, ``--wandb.key``, ``--hftoken`` yes; ``--tokenizer``, ``--keep`` no."""
    parts = [p for p in re.split(r"[-_.]", name.lstrip("-").lower()) if p]
    return any(p in _SECRET_WORDS or p.endswith(("token", "secret", "password")) for p in parts)


def redact_argv(argv: list[str]) -> list[str]:
    """The command as it may be shown, logged and stored: values of token/secret/password options and
    well-known token formats (Hugging Face, GitHub, OpenAI, Slack, AWS) become ``***``."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        name, eq, _ = a.partition("=")
        if name.startswith("-") and _secret_option(name):
            if eq:
                out.append(f"{name}=***")
                continue
            hide_next = True
        out.append(_SECRET_VAL.sub("***", a))
    return out


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


class GpuWatcher:
    """Samples the job's GPUs: activity for hang detection, faults (lost, new ECC) as evidence."""

    def __init__(self, source: GpuSource, interval_s: float, on_fault: Callable[[GpuFault], None]) -> None:
        self.source = source
        self.interval_s = interval_s
        self.on_fault = on_fault
        self.job: list[JobGpu] = []
        self.faults: list[GpuFault] = []
        self.last_activity = 0.0
        self.why_not: str | None = None
        self._baseline: dict[str, GpuFacts] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, job: list[JobGpu]) -> None:
        with self._lock:
            self.job = list(job)
            self.faults = []
            self._baseline = {}
            self.last_activity = 0.0
        if self._thread is None and not isinstance(self.source, NoGpus):
            self._thread = threading.Thread(target=self._loop, name="gpuclinic-gpu-watch", daemon=True)
            self._thread.start()

    def _key(self, g: GpuFacts | JobGpu) -> str:
        if g.uuid:
            return g.uuid
        if g.pci_bus_id:
            return normalize_bus_id(g.pci_bus_id)
        return f"#{g.index}"

    def _mine(self, gpus: list[GpuFacts]) -> tuple[list[GpuFacts], list[JobGpu]]:
        with self._lock:
            job = list(self.job)
        if not job:
            return gpus, []
        keys = {self._key(j) for j in job}
        found = [g for g in gpus if self._key(g) in keys]
        present = {self._key(g) for g in found}
        missing = [j for j in job if self._key(j) not in present]
        return found, missing

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as e:  # never take the supervisor down
                self.why_not = f"GPU sampling failed: {type(e).__name__}: {e}"
            self._stop.wait(self.interval_s)

    def sample_once(self) -> None:
        gpus = self.source.sample()
        mine, missing = self._mine(gpus)
        new: list[GpuFault] = []
        with self._lock:
            for j in missing:
                if self._baseline and j.uuid and j.uuid in self._baseline:
                    new.append(GpuFault(j.ref(), "GPU disappeared from NVML during the run", fatal=True))
            for g in mine:
                ref = GpuRef(
                    index=g.index,
                    pci_bus_id=normalize_bus_id(g.pci_bus_id) if g.pci_bus_id else None,
                    uuid=g.uuid,
                )
                base = self._baseline.setdefault(self._key(g), g)
                if (g.utilization_gpu_pct or 0) >= 1:
                    self.last_activity = time.monotonic()
                if g.lost and not base.lost:
                    new.append(
                        GpuFault(ref, f"GPU is lost ({g.lost_reason or 'fell off the bus'})", fatal=True)
                    )
                if (g.ecc_volatile_uncorrected or 0) > (base.ecc_volatile_uncorrected or 0):
                    new.append(
                        GpuFault(
                            ref,
                            f"uncorrectable ECC errors {base.ecc_volatile_uncorrected or 0} -> "
                            f"{g.ecc_volatile_uncorrected} during the run",
                        )
                    )
                if g.remapped_rows_failure and not base.remapped_rows_failure:
                    new.append(GpuFault(ref, "row remapping failed during the run"))
                if g.remapped_rows_pending and not base.remapped_rows_pending:
                    new.append(GpuFault(ref, "row remap pending (uncorrectable memory error) during the run"))
                if g.retired_pages_pending and not base.retired_pages_pending:
                    new.append(GpuFault(ref, "page retirement pending (double-bit ECC) during the run"))
                # a fault is reported once per attempt: move the baseline forward
                self._baseline[self._key(g)] = g
            for f in new:
                if all((f.gpu, f.what) != (x.gpu, x.what) for x in self.faults):
                    self.faults.append(f)
        for f in new:
            self.on_fault(f)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with contextlib.suppress(Exception):
            self.source.close()


@dataclass
class _AttemptWatch:
    """What the polling loop of one attempt carries from one tick to the next."""

    mem_peak: float
    hang_reason: str | None = None
    fault: str | None = None
    fault_deadline: float | None = None
    last_scan: float = 0.0
    last_fault_check: float = 0.0


class Supervisor:
    """Runs ``opts.cmd`` until it completes, cannot be retried, or the user stops it."""

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

    def _ledger_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a Ledger method; a broken ledger is reported once and never stops the job."""
        if self.ledger is None or self._ledger_broken:
            return None
        if method != "start_run" and self.run_id is None:
            return None
        try:
            return getattr(self.ledger, method)(*args, **kwargs)
        except sqlite3.Error as e:
            self._ledger_broken = True
            self.say(f"warning: cannot write the run ledger ({e}); the job continues")
            return None

    def _notify(self, alert: dict[str, Any]) -> None:
        if self.notifier is None:
            return
        try:
            self.notifier(alert)
        except Exception as e:
            self.say(f"warning: notification failed: {type(e).__name__}: {e}")

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

    # ------------------------------------------------------------ main loop
    def run(self) -> int:
        o = self.opts
        become_subreaper()
        state = (
            Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gpuclinic" / "runs"
        )
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        self.run_dir = state / stamp
        log_path = o.log_path or (self.run_dir / "output.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        heartbeat = o.heartbeat or (self.run_dir / "heartbeat")
        heartbeat.parent.mkdir(parents=True, exist_ok=True)
        base_env = dict(o.env if o.env is not None else os.environ)

        try:
            ids = self.source.identities()
        except Exception as e:
            self.say(f"could not read GPU identities: {type(e).__name__}: {e}")
            ids = []
        job_gpus = resolve(parse_visible(base_env.get("CUDA_VISIBLE_DEVICES")), ids)
        initial_gpus = list(job_gpus)
        if isinstance(self.source, NoGpus):
            self.say(f"not watching GPUs: {self.source.why}")

        from gpuclinic.store import connect

        try:
            self.ledger = Ledger(connect(o.db_path))
        except (sqlite3.Error, OSError) as e:
            self.say(f"warning: run ledger unavailable ({e}); the job runs without it")
        started = time.time()
        self.run_id = self._ledger_call(
            "start_run",
            started_at=started,
            host=socket.gethostname(),
            command=redact_argv(o.cmd),
            cwd=o.cwd or os.getcwd(),
            gpus=[g.label() for g in job_gpus],
            log_path=str(log_path),
        )

        follower = LiveKernelFollower(o.kernel_logs) if o.watch_kernel else None
        if follower is not None:
            follower.start()
        window = KernelWindow(o.kernel_logs)
        tracker = Tracker()
        watcher = GpuWatcher(
            self.source,
            o.sample_interval_s,
            lambda f: self.say(f"GPU fault during the run: {f.gpu.label()}: {f.what}"),
        )
        prev = on_signals(
            self._on_signal, (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
        )
        status = "failed"
        try:
            with open(log_path, "ab") as log:
                self.pump = OutputPump(log, echo=o.echo)
                attempt = 0
                restarts = 0
                while True:
                    attempt += 1
                    resume = train.latest_checkpoint(o.checkpoint_dir) if o.checkpoint_dir else None
                    argv = substitute(
                        o.cmd,
                        resume=str(resume) if resume else None,
                        ngpus=len(job_gpus) or 1,
                        attempt=attempt,
                    )
                    env = self._attempt_env(base_env, heartbeat, attempt, resume, job_gpus, initial_gpus)
                    with contextlib.suppress(OSError):
                        heartbeat.unlink()
                    msg = f"attempt {attempt}: {shlex.join(redact_argv(argv))}"
                    if resume:
                        msg += f" (resuming from {resume})"
                    self.say(msg)
                    self._ledger_call("attempt_started", self.run_id, attempt, time.time())
                    res = self._attempt(argv, env, window, follower, tracker, watcher, job_gpus, heartbeat)
                    cls = classify(res.evidence)
                    if cls.cls == COMPLETED:
                        status = "completed"
                        self.exit_code = 0
                        self.say(f"job completed after {attempt} attempt(s)")
                        return 0
                    rc = res.returncode
                    self.exit_code = (
                        (128 - rc) if rc is not None and rc < 0 else (rc if rc is not None else 1)
                    )
                    action, why, job_gpus = self._decide(cls, restarts, job_gpus)
                    ckpt, ckpt_at = self._newest_checkpoint()
                    lost = self._ledger_call(
                        "add_interruption",
                        self.run_id,
                        attempt=attempt,
                        attempt_started_at=res.started_at,
                        at=res.ended_at,
                        cls=cls.cls,
                        summary=cls.summary,
                        evidence=cls.evidence,
                        gpu=cls.gpu.to_dict() if cls.gpu else None,
                        exit_code=rc,
                        signal=cls.signal,
                        action=action,
                        last_checkpoint_at=ckpt_at,
                        checkpoint=str(ckpt) if ckpt else None,
                        remedy=cls.remedy,
                    )
                    self.interruptions.append((cls, action))
                    self._say_interruption(cls, action, why)
                    self._notify(
                        {
                            "kind": "interruption",
                            "class": cls.cls,
                            "run_id": self.run_id,
                            "severity": "info" if cls.planned else "critical",
                            "summary": cls.summary,
                            "evidence": cls.evidence[:10],
                            "gpu": cls.gpu.to_dict() if cls.gpu else None,
                            "remedy": cls.remedy,
                            "action": action,
                            "attempt": attempt,
                            "host": socket.gethostname(),
                            "command": shlex.join(redact_argv(o.cmd)),
                            "lost_s": lost,
                            "at": res.ended_at,
                        }
                    )
                    if not action.startswith("restart"):
                        status = "stopped" if cls.planned else "gave_up"
                        return self.exit_code
                    delay = min(o.backoff_s * (2**restarts), o.backoff_max_s)
                    restarts += 1
                    if delay > 0:
                        self.say(f"restarting in {delay:g}s (restart {restarts} of {o.max_restarts})")
                    if not self._sleep(delay):
                        status = "stopped"
                        self.say(
                            f"stopped during back-off ({signal_name(self._stop_signal or signal.SIGTERM)})"
                        )
                        return 128 + (self._stop_signal or signal.SIGTERM)
        finally:
            restore_signals(prev)
            watcher.stop()
            close = getattr(self.notifier, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as e:
                    self.say(f"warning: notifier: {type(e).__name__}: {e}")
            if follower is not None:
                follower.stop()
            end = time.time()
            self._ledger_call(
                "finish_run", self.run_id, ended_at=end, status=status, exit_code=self.exit_code
            )
            if self.ledger is not None:
                with contextlib.suppress(sqlite3.Error):
                    self.ledger.conn.close()

    def _decide(
        self, cls: Classification, restarts: int, job_gpus: list[JobGpu]
    ) -> tuple[str, str, list[JobGpu]]:
        o = self.opts
        if self._stop_signal is not None:
            return "stop", "stop requested", job_gpus
        if cls.cls not in o.retry_on:
            return "give_up", f"{cls.cls} is not in --retry-on", job_gpus
        if restarts >= o.max_restarts:
            return "give_up", f"--max-restarts {o.max_restarts} reached", job_gpus
        if o.exclude_bad_gpu and cls.cls == "gpu_hardware" and cls.gpu is not None:
            remaining, removed = exclude(job_gpus, cls.gpu)
            if removed is not None:
                if len(remaining) < o.min_gpus:
                    return (
                        "give_up",
                        f"excluding {removed.label()} would leave {len(remaining)} GPU(s), "
                        f"fewer than --min-gpus {o.min_gpus}",
                        job_gpus,
                    )
                return (
                    f"restart without {removed.label()}",
                    f"CUDA_VISIBLE_DEVICES={visible_value(remaining)}",
                    remaining,
                )
        return "restart", "", job_gpus

    def _sleep(self, seconds: float) -> bool:
        """Back-off that a stop request interrupts; False when stopped."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self._stop_signal is not None:
                return False
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        return self._stop_signal is None

    def _attempt_env(
        self,
        base_env: dict[str, str],
        heartbeat: Path,
        attempt: int,
        resume: Path | None,
        job_gpus: list[JobGpu],
        initial_gpus: list[JobGpu],
    ) -> dict[str, str]:
        """The job's environment for one attempt: heartbeat, attempt, checkpoint and GPU variables."""
        env = dict(base_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[train.ENV_HEARTBEAT] = str(heartbeat)
        env[train.ENV_ATTEMPT] = str(attempt)
        env.pop("GPUCLINIC_NGPUS", None)
        if job_gpus:
            env["GPUCLINIC_NGPUS"] = str(len(job_gpus))
        if self.run_id is not None:
            env["GPUCLINIC_RUN_ID"] = str(self.run_id)
        if self.opts.checkpoint_dir:
            env[train.ENV_CHECKPOINT_DIR] = str(self.opts.checkpoint_dir)
        env.pop(train.ENV_RESUME_FROM, None)
        if resume:
            env[train.ENV_RESUME_FROM] = str(resume)
        if job_gpus != initial_gpus:  # a faulted GPU was excluded: name the rest by UUID
            env["CUDA_VISIBLE_DEVICES"] = visible_value(job_gpus)
        return env

    def _newest_checkpoint(self) -> tuple[Path | None, float | None]:
        """The newest complete checkpoint and when it was completed (None, None without one)."""
        d = self.opts.checkpoint_dir
        ckpt = train.latest_checkpoint(d) if d else None
        ckpt_at = None
        if ckpt is not None:
            with contextlib.suppress(OSError):
                ckpt_at = _completion_time(ckpt)
        return ckpt, ckpt_at

    def _say_interruption(self, cls: Classification, action: str, why: str | None) -> None:
        self.say(f"interruption: {cls.cls} ({'planned' if cls.planned else 'unexpected'}): {cls.summary}")
        for line in cls.evidence[:6]:
            self.say(f"  evidence: {line}")
        if cls.remedy:
            self.say(f"  what to do: {cls.remedy}")
        self.say(f"decision: {action}" + (f" ({why})" if why else ""))

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


def _completion_time(p: Path) -> float:
    """When a checkpoint became complete: its marker's mtime for a directory, else its own."""
    if p.is_dir():
        for m in (train.COMPLETE_MARKER, *train.FRAMEWORK_MARKERS):
            q = p / m
            if q.is_file():
                return q.stat().st_mtime
    return p.stat().st_mtime
