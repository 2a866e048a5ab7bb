"""Watching the job's GPUs while it runs: activity for hang detection, new faults as evidence.

Why a module of its own: the watcher samples on its own thread and compares every sample with a
per-attempt baseline, so a fault that happens during the run (a GPU lost, new uncorrectable ECC
errors, a failed row remap) is reported once, with the GPU it happened on.  It also keeps the attempt's
last samples: when the job ends, the doctor's detectors judge them as a window
(``supervise/incidents.py``), so run names a GPU fault with the same code, severity and runbook as doctor.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.model import GpuRef
from gpuclinic.supervise.classify import GpuFault
from gpuclinic.supervise.gpus import GpuSource, JobGpu, NoGpus

RING = 30  # samples of the attempt kept for the detectors' window (the newest ones)


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
        self._ring: deque[tuple[float, list[GpuFacts]]] = deque(maxlen=RING)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, job: list[JobGpu]) -> None:
        with self._lock:
            self.job = list(job)
            self.faults = []
            self._baseline = {}
            self._ring.clear()
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
            self._ring.append((time.time(), list(mine)))
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
