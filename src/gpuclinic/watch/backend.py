"""Sampler backends: where a tick's per-GPU facts come from (NVML or a scripted scenario).

The agent talks only to :class:`SamplerBackend`; :class:`TimedSampler` runs a backend's ``sample()``
in a worker thread with a deadline, so a driver that hangs inside an NVML call (a known failure of
exporters that sample in the scrape path) leaves the agent alerting and reporting staleness instead of
blocking.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpuclinic.errors import GpuclinicError, InputError
from gpuclinic.facts.gpu import GpuFacts


class Clock(Protocol):
    """Agent time.  Real time normally; scaled time when a scenario runs faster than life."""

    def now(self) -> float: ...

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        """Sleep ``seconds`` of agent time; True when ``stop`` was set meanwhile."""
        ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, seconds))


class ScaledClock:
    """Agent time runs ``scale`` times faster than wall time, from ``start`` (default: now)."""

    def __init__(self, scale: float = 1.0, start: float | None = None) -> None:
        if scale <= 0:
            raise InputError("--time-scale must be positive")
        self.scale = scale
        self._t0 = time.time() if start is None else start
        self._m0 = time.monotonic()

    def now(self) -> float:
        return self._t0 + (time.monotonic() - self._m0) * self.scale

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(max(0.0, seconds) / self.scale)


@dataclass
class BackendInfo:
    name: str  # "nvml" | "scenario:<name>"
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    notes: list[str] = field(default_factory=list)


@runtime_checkable
class SamplerBackend(Protocol):
    """A source of per-GPU samples.  ``sample`` may raise (e.g. ``pynvml.NVMLError``) or hang."""

    def open(self) -> BackendInfo: ...

    def sample(self) -> list[GpuFacts]: ...

    def close(self) -> None: ...


@runtime_checkable
class KernelLineSource(Protocol):
    """Backends that also script kernel-log lines (the simulator) implement this."""

    def poll_kernel_lines(self) -> list[str]: ...


class NvmlBackend:
    """Live GPUs through :class:`gpuclinic.sources.nvml.NvmlReader` (its calls are time-boxed)."""

    def __init__(self, call_timeout_s: float = 2.0) -> None:
        self._reader: Any = None
        self.call_timeout_s = call_timeout_s

    def open(self) -> BackendInfo:
        try:
            from gpuclinic.sources.nvml import NvmlReader
        except ImportError as e:
            raise GpuclinicError(
                f"NVML sampling is not available in this build ({e}); try --scenario demo"
            ) from None
        try:
            self._reader = NvmlReader(call_timeout_s=self.call_timeout_s)
            self._reader.__enter__()
            gpus, versions = self._reader.read_all()
        except GpuclinicError:
            raise
        except Exception as e:
            raise GpuclinicError(
                f"cannot read GPUs through NVML: {e} (to see the agent without a GPU: "
                "gpuclinic watch --scenario demo)"
            ) from None
        info = BackendInfo(name="nvml")
        if isinstance(versions, dict):
            info.driver_version = versions.get("driver_version") or versions.get("driver")
            info.cuda_driver_version = versions.get("cuda_driver_version") or versions.get("cuda")
            info.nvml_version = versions.get("nvml_version") or versions.get("nvml")
        elif isinstance(versions, (tuple, list)):
            vals = [*versions, None, None, None]
            info.driver_version, info.nvml_version, info.cuda_driver_version = vals[0], vals[1], vals[2]
        info.notes.append(f"{len(gpus)} GPU(s) at start")
        return info

    def sample(self) -> list[GpuFacts]:
        gpus = self._reader.sample()
        assert isinstance(gpus, list)
        return gpus

    def close(self) -> None:
        if self._reader is not None:
            try:
                self._reader.__exit__(None, None, None)
            except Exception:  # shutting down; nothing useful to do
                pass
            self._reader = None


@dataclass
class SampleResult:
    ts: float  # agent time the sample was requested
    gpus: list[GpuFacts] | None  # None when it failed or stalled
    error: str | None = None
    stalled: bool = False
    duration_s: float = 0.0


class TimedSampler:
    """Run ``backend.sample()`` in one worker thread with a deadline.

    A call that overruns leaves the worker busy; later ticks report "stalled" immediately (never a
    second thread stuck in the driver) until the hung call returns.
    """

    def __init__(self, backend: SamplerBackend, timeout_s: float, clock: Clock) -> None:
        self.backend = backend
        self.timeout_s = timeout_s
        self.clock = clock
        self._want = threading.Event()
        self._done = threading.Event()
        self._busy_since: float | None = None
        self._result: tuple[list[GpuFacts] | None, str | None] = (None, None)
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="gpuclinic-sampler", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            self._want.wait()
            self._want.clear()
            if self._closed:
                return
            try:
                res: tuple[list[GpuFacts] | None, str | None] = (self.backend.sample(), None)
            except Exception as e:  # NVMLError and friends: report, keep sampling
                msg = str(e) or type(e).__name__
                res = (None, f"{type(e).__name__}: {msg}".splitlines()[0])
            self._result = res
            self._busy_since = None
            self._done.set()

    @property
    def busy_for(self) -> float | None:
        """Wall seconds the current call has been running (None when idle)."""
        b = self._busy_since
        return None if b is None else time.monotonic() - b

    def sample(self) -> SampleResult:
        ts = self.clock.now()
        if self._busy_since is not None:
            return SampleResult(
                ts=ts,
                gpus=None,
                stalled=True,
                error=f"previous sample still running after {self.busy_for:.1f}s",
            )
        t0 = time.monotonic()
        self._done.clear()
        self._busy_since = t0
        self._want.set()
        if not self._done.wait(self.timeout_s):
            return SampleResult(
                ts=ts,
                gpus=None,
                stalled=True,
                duration_s=time.monotonic() - t0,
                error=f"sample did not return within {self.timeout_s:g}s",
            )
        gpus, err = self._result
        return SampleResult(ts=ts, gpus=gpus, error=err, duration_s=time.monotonic() - t0)

    def close(self) -> None:
        self._closed = True
        self._want.set()
        self._thread.join(timeout=0.5)
        self.backend.close()
