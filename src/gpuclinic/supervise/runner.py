"""The supervisor loop: start the job, watch it, classify how it ended, restart or stop, record it all."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

from gpuclinic import train
from gpuclinic.supervise.attempt import _AttemptRunner
from gpuclinic.supervise.classify import COMPLETED, AttemptEvidence, Classification, classify, signal_name
from gpuclinic.supervise.gpus import JobGpu, NoGpus, exclude, parse_visible, resolve, visible_value
from gpuclinic.supervise.gpuwatch import GpuWatcher
from gpuclinic.supervise.incidents import attempt_report, incident_lines, report_json
from gpuclinic.supervise.jobspec import redact_argv, substitute
from gpuclinic.supervise.kernel import KernelWindow, LiveKernelFollower
from gpuclinic.supervise.ledger import Ledger
from gpuclinic.supervise.procs import OutputPump, Tracker, become_subreaper, on_signals, restore_signals


class Supervisor(_AttemptRunner):
    """Runs ``opts.cmd`` until it completes, cannot be retried, or the user stops it."""

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
                    incidents = self._incidents(res.evidence, cls, watcher, attempt, res.ended_at)
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
                        incidents=incidents,
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

    def _incidents(
        self, ev: AttemptEvidence, cls: Classification, watcher: GpuWatcher, attempt: int, at: float
    ) -> list[dict[str, Any]]:
        """The attempt's findings grouped into incidents, the doctor's way; the report is written next to
        the log as ``attempt-N.json`` (``gpuclinic.report/2``).  Never stops the supervisor."""
        try:
            rep = attempt_report(ev, cls, watcher.recent(), at=at)
        except Exception as e:  # a broken detector must not take the job's restarts with it
            self.say(f"warning: could not group the findings into incidents: {type(e).__name__}: {e}")
            self.incidents = []
            return []
        self.incidents = rep.incidents
        doc = report_json(rep)
        if self.run_dir is not None:
            try:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                (self.run_dir / f"attempt-{attempt}.json").write_text(json.dumps(doc, indent=2) + "\n")
            except OSError as e:
                self.say(f"warning: cannot write the attempt report: {e}")
        return list(doc["incidents"])

    def _say_interruption(self, cls: Classification, action: str, why: str | None) -> None:
        self.say(f"interruption: {cls.cls} ({'planned' if cls.planned else 'unexpected'}): {cls.summary}")
        for line in cls.evidence[:6]:
            self.say(f"  evidence: {line}")
        if cls.remedy:
            self.say(f"  what to do: {cls.remedy}")
        for line in incident_lines(self.incidents):
            self.say(line)
        self.say(f"decision: {action}" + (f" ({why})" if why else ""))


def _completion_time(p: Path) -> float:
    """When a checkpoint became complete: its marker's mtime for a directory, else its own."""
    if p.is_dir():
        for m in (train.COMPLETE_MARKER, *train.FRAMEWORK_MARKERS):
            q = p / m
            if q.is_file():
                return q.stat().st_mtime
    return p.stat().st_mtime
