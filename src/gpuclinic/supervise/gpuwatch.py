"""Watching the job's GPUs while it runs: activity for hang detection, new faults as evidence.

Why a module of its own: the watcher samples on its own thread and compares every sample with the one
before, so a fault that happens during the run (a GPU lost, new uncorrectable ECC errors, a failed row
remap) is reported once per attempt, with the GPU it happened on.  What counts as a fault is the doctor's:
each sample of the job's GPUs is a snapshot that the detectors of the codes with a ``job_effect``
(``knowledge/data/codes.json``) evaluate; a finding that appeared since the previous sample, or whose
counter rose (``checks/_baseline.py``, shared with watch), is a fault with the detector's code, severity
and title, its runbook's first step, and ``fatal`` from :func:`knowledge.codes.fatal_to_job`.  It also
keeps the attempt's last samples: when the job ends, the doctor's detectors judge them as a window
(``supervise/incidents.py``), so run names a GPU fault with the same code, severity and runbook as doctor.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from functools import cache

from gpuclinic.checks import Detector, detectors
from gpuclinic.checks._baseline import FindingKey, appeared, finding_key, gpu_key, rises
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge import codes as K
from gpuclinic.knowledge.runbooks import remedy as runbook_remedy
from gpuclinic.model import Finding, GpuRef
from gpuclinic.supervise.classify import GpuFault
from gpuclinic.supervise.gpus import GpuSource, JobGpu, NoGpus

RING = 30  # samples of the attempt kept for the detectors' window (the newest ones)


@cache
def fault_detectors() -> tuple[Detector, ...]:
    """The detectors of every code that is a fault of a running job (a ``job_effect`` in codes.json)."""
    names = sorted({c.detector for c in K.all_codes() if c.job_effect})
    dets = detectors()
    return tuple(dets[n] for n in names)


def _ref(r: GpuRef) -> GpuRef:
    return GpuRef(index=r.index, pci_bus_id=normalize_bus_id(r.pci_bus_id) if r.pci_bus_id else None,
                  uuid=r.uuid)


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
        self._prev: dict[str, dict[str, int]] = {}  # per GPU: its counters in the previous sample
        self._before: set[FindingKey] = set()  # the faults the previous sample showed
        self._sampled = False
        self._reported: set[FindingKey] = set()
        self._ring: deque[tuple[float, list[GpuFacts]]] = deque(maxlen=RING)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, job: list[JobGpu]) -> None:
        with self._lock:
            self.job = list(job)
            self.faults = []
            self._prev = {}
            self._before = set()
            self._sampled = False
            self._reported = set()
            self._ring.clear()
            self.last_activity = 0.0
        if self._thread is None and not isinstance(self.source, NoGpus):
            self._thread = threading.Thread(target=self._loop, name="gpuclinic-gpu-watch", daemon=True)
            self._thread.start()

    def _key(self, g: GpuFacts | JobGpu) -> str:
        return gpu_key(g.ref() if isinstance(g, JobGpu) else g)

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
        with self._lock:
            expect = len(self.job) or None
        snap = Snapshot(origin="run", gpus=list(mine), nvml_available=True, expect_gpus=expect)
        found: list[Finding] = []
        for det in fault_detectors():
            found += det.evaluate(snap)[0]
        now: dict[FindingKey, tuple[GpuRef, Finding, str]] = {}
        for f in found:
            if not K.job_effect(f.code):
                continue
            if f.gpu is not None:
                now[finding_key(f)] = (_ref(f.gpu), f, "")
                continue
            for j in missing:  # "only N of M GPUs usable": the job's GPUs NVML no longer lists
                ref = j.ref()
                now[finding_key(f, self._key(j))] = (ref, f, f"{ref.label()} is no longer listed by NVML")
        new: list[GpuFault] = []
        with self._lock:
            self._ring.append((time.time(), list(mine)))
            fresh = appeared(self._before, now) if self._sampled else []
            rose: dict[FindingKey, str] = {}
            for g in mine:
                if (g.utilization_gpu_pct or 0) >= 1:
                    self.last_activity = time.monotonic()
                for r in rises(self._prev.setdefault(self._key(g), {}), g):
                    k = next((k for k in now if k[:2] == (r.counter.code, self._key(g))), None)
                    if k is not None:
                        rose[k] = f"{r.evidence} during the run"
                        if k not in fresh:
                            fresh.append(k)
            self._before = set(now)
            self._sampled = True
            for k in fresh:
                if k in self._reported:
                    continue  # a fault is reported once per attempt
                self._reported.add(k)
                ref, f, note = now[k]
                extra = "; ".join(x for x in (note, rose.get(k, "")) if x)
                fault = GpuFault(
                    ref,
                    f.title + (f" ({extra})" if extra else ""),
                    fatal=K.fatal_to_job(f.code, f.severity),
                    code=f.code,
                    severity=f.severity,
                    remedy=runbook_remedy(f.code, ref),
                )
                self.faults.append(fault)
                new.append(fault)
        for fault in new:
            self.on_fault(fault)

    def recent(self) -> list[tuple[float, list[GpuFacts]]]:
        """The attempt's newest samples of the job's GPUs, oldest first: (wall time, GPUs)."""
        with self._lock:
            return list(self._ring)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with contextlib.suppress(Exception):
            self.source.close()
