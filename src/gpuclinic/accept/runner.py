"""Run ``workload.py`` in the user's Python and turn its JSON lines into measurements.

Why a child process: the user's environment holds the PyTorch/CuPy build that matters, a crash or
hang in CUDA cannot take gpuclinic down, and stopping it (Ctrl-C, thermal stop) is one signal to
its process group.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclinic.accept.burn import BurnMonitor, Sampler
from gpuclinic.accept.score import Measurements
from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.facts.snapshot import normalize_bus_id

WORKLOAD = Path(__file__).with_name("workload.py")


def resolve_python(path: str) -> str:
    """An executable Python: a path, or a name on PATH; anything else is a usage error."""
    p = path if os.sep in path else (shutil.which(path) or path)
    if not os.path.isfile(p):
        raise InputError(f"--python {path}: no such file", exit_code=EXIT_USAGE)
    if not os.access(p, os.X_OK):
        raise InputError(f"--python {path}: not executable", exit_code=EXIT_USAGE)
    return p


class Child:
    """The workload process; events arrive on a queue read by a thread."""

    def __init__(self, python: str, args: list[str], env: dict[str, str] | None = None) -> None:
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: deque[str] = deque(maxlen=40)
        self.proc = subprocess.Popen([python, "-u", str(WORKLOAD), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env,
                                     start_new_session=True)
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                self.events.put(json.loads(line))
            except ValueError:
                continue
        self.events.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def next_event(self, timeout: float) -> dict[str, Any] | None | bool:
        """An event, None at end of output, False when nothing came within ``timeout``."""
        try:
            return self.events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return False

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM the process group (the workload stops within one matmul), SIGKILL after ``grace_s``."""
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=5)


@dataclass
class ChildResult:
    m: Measurements = field(default_factory=Measurements)
    backend: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    nobackend: str | None = None
    stopped: str | None = None
    interrupted: bool = False
    error: str | None = None


def device_labels(devices: list[dict[str, Any]], nvml: list[tuple[int, str | None, str | None]],
                  device: str) -> dict[int, str]:
    """Child device index -> scorecard label (the NVML index), by bus id, then UUID, then order."""
    if device == "cpu":
        return {d["index"]: "cpu" for d in devices}
    found: dict[int, int | None] = {}
    by_bus = {normalize_bus_id(b): i for i, b, _ in nvml if b}
    by_uuid = {u: i for i, _, u in nvml if u}
    for d in devices:
        idx = None
        if d.get("bus_id"):
            idx = by_bus.get(normalize_bus_id(d["bus_id"]))
        if idx is None and d.get("uuid"):
            u = str(d["uuid"])
            idx = by_uuid[u] if u in by_uuid else by_uuid.get("GPU-" + u)
        found[d["index"]] = idx
    free = [i for i, _, _ in nvml if i not in found.values()]  # unidentified devices take the rest in order
    out: dict[int, str] = {}
    for k, idx in found.items():
        if idx is None and free:
            idx = free.pop(0)
        out[k] = str(idx if idx is not None else k)
    return out


def drive(child: Child, res: ChildResult, nvml: list[tuple[int, str | None, str | None]], device: str,
          monitor: BurnMonitor | None, sampler: Sampler | None, deadline_s: float,
          progress: Callable[[str], None] | None = None) -> ChildResult:
    """Read the child's events until it ends; during the burn sample NVML once a second and stop
    the child when the monitor says so.  Ctrl-C stops the child at once and marks the run."""
    labels: dict[int, str] = {}
    end = time.monotonic() + deadline_s
    burn_t0: float | None = None
    next_sample = 0.0
    try:
        while True:
            now = time.monotonic()
            if now > end:
                res.error = f"workload did not finish within {deadline_s:.0f} s; stopped"
                child.stop()
                break
            wait = 0.5 if burn_t0 is None or sampler is None else max(0.0, next_sample - now)
            ev = child.next_event(min(wait, 0.5))
            if ev is None:
                break
            if isinstance(ev, dict):
                _handle(ev, res, labels, nvml, device, monitor, burn_t0, progress)
                if ev.get("event") == "burn_start":
                    burn_t0 = time.monotonic()
                    next_sample = burn_t0
                    if progress:
                        progress(f"burn: started ({ev.get('n')}x{ev.get('n')} matmul)")
            if (
                burn_t0 is not None
                and sampler is not None
                and monitor is not None
                and time.monotonic() >= next_sample
            ):
                t = time.monotonic() - burn_t0
                try:
                    reason = monitor.on_sample(t, sampler(t))
                except Exception as e:  # a sampling failure must not leave the GPUs burning unwatched
                    reason = f"could not read GPU state during the burn ({type(e).__name__}: {e}); stopped"
                    monitor.stopped = reason
                if reason and not res.stopped:
                    res.stopped = reason
                    if progress:
                        progress(f"stopping the burn: {reason}")
                    child.stop()
                next_sample += 1.0
    except KeyboardInterrupt:
        res.interrupted = True
        child.stop(grace_s=1.0)
    finally:
        child.stop()
    tail = " | ".join(list(child.stderr)[-3:])[:300]
    if res.backend is None and res.nobackend is None and res.error is None:
        res.error = f"workload exited with {child.proc.returncode} before reporting a backend: {tail}"
    elif (
        res.backend is not None
        and child.proc.returncode not in (0, None)
        and not res.stopped
        and not res.interrupted
        and res.error is None
    ):
        res.error = (
            f"workload crashed (exit {child.proc.returncode}); items it had not reached are skipped: {tail}"
        )
    return res


def _label(labels: dict[int, str], g: Any) -> str | None:
    """The scorecard label of a child's device index, or of a ``"i-j"`` device pair."""
    if g is None:
        return None
    if isinstance(g, str) and "-" in g:
        a, b = g.split("-", 1)
        return f"{labels.get(int(a), a)}-{labels.get(int(b), b)}"
    return labels.get(int(g), str(g))


def _result(ev: dict[str, Any], m: Measurements, g: str | None,
            progress: Callable[[str], None] | None) -> None:
    """One measured figure from the child into the measurements."""
    test, v = ev.get("test"), float(ev.get("value") or 0)
    if progress:
        extra = ev.get("dtype") or ev.get("direction") or ""
        progress(f"  {test} {extra} {'GPU ' + g if g else ''}: {v:.4g} {ev.get('unit', '')}")
    if test == "matmul" and g is not None:
        m.matmul[(g, str(ev.get("dtype")))] = v
    elif test == "hbm" and g is not None:
        m.hbm[g] = v
    elif test == "pcie" and g is not None:
        m.pcie[(g, str(ev.get("direction")))] = v
    elif test == "p2p" and g is not None:
        m.p2p[g] = (v, bool(ev.get("peer_access", True)))
    elif test == "allreduce":
        m.allreduce, m.allreduce_ndev = v, int(ev.get("ndev") or 0)


def _handle(
    ev: dict[str, Any],
    res: ChildResult,
    labels: dict[int, str],
    nvml: list[tuple[int, str | None, str | None]],
    device: str,
    monitor: BurnMonitor | None,
    burn_t0: float | None,
    progress: Callable[[str], None] | None,
) -> None:
    kind = ev.get("event")
    m = res.m
    if kind == "backend":
        res.devices = list(ev.get("devices") or [])
        labels.update(device_labels(res.devices, nvml, device))
        res.backend = f"{ev.get('backend')} {ev.get('version')} ({ev.get('device')})"
        if progress:
            progress(f"workload: {res.backend} on {len(res.devices)} device(s), {ev.get('python')}")
        return
    if kind == "nobackend":
        res.nobackend = str(ev.get("why"))
        return

    def lab(g: Any) -> str | None:
        return _label(labels, g)

    if kind == "result":
        _result(ev, m, lab(ev.get("gpu")), progress)
    elif kind == "skip":
        s = dict(ev)
        s.pop("event", None)
        s["gpu"] = lab(s.get("gpu"))
        m.skips.append(s)
    elif kind == "burn" and monitor is not None:
        g = lab(ev.get("gpu"))
        if g is not None:
            first = not monitor.series.get(g) or not monitor.series[g].tflops
            monitor.on_tflops(g, float(ev.get("t") or 0), float(ev.get("value") or 0))
            if first and progress:  # one line per device, not one a second
                progress(f"burn: first figure for {g}: {float(ev.get('value') or 0):.4g} TFLOPS")
    elif kind == "done" and ev.get("interrupted"):
        res.interrupted = res.interrupted or res.stopped is None
