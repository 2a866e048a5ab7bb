"""Read every GPU through NVML (``nvidia-ml-py``), read-only, with every call time-boxed.

Why the care: on a sick server NVML is exactly what breaks.  A call may be unsupported on this GPU
or driver, refused without root, answer ``GPU_IS_LOST`` because the card fell off the bus, or hang
in the kernel because the driver is wedged.  Each call here is handled on its own, so one failure
costs one field (recorded in ``GpuFacts.unreadable`` when it says something) instead of the run,
and a hung call costs one timeout and an "unresponsive" mark instead of a hung doctor.

Nothing here changes GPU state: only ``nvmlDeviceGet*``/``nvmlSystemGet*`` calls are made.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.sources.nvml_calls import _INIT_REASONS, GpuRead, NvmlUnavailable, StopGpu, err_code, text
from gpuclinic.sources.nvml_device import (
    CLOCK_EVENT_REASONS,
    STATIC_FIELDS,
    Static,
    decode_reasons,
    nv_const,
    read_dynamic,
    read_identity,
    read_static,
)
from gpuclinic.sources.nvml_worker import Hung as _Hung
from gpuclinic.sources.nvml_worker import Worker as _Worker

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions
    from gpuclinic.facts.snapshot import Snapshot

# The reader's public names, wherever they live (callers and tests import them from here).
__all__ = [
    "CLOCK_EVENT_REASONS",
    "STATIC_FIELDS",
    "WHAT",
    "NvmlReader",
    "NvmlUnavailable",
    "Versions",
    "collect",
    "decode_reasons",
    "nv_const",
]

WHAT = "GPUs through NVML"


class Versions(NamedTuple):
    driver: str | None
    nvml: str | None
    cuda_driver: str | None  # "12.4"


class NvmlReader:
    """``with NvmlReader() as r: gpus, versions = r.read_all()``; ``r.sample()`` for 1 Hz watching.

    ``call_timeout_s`` bounds each NVML call.  After a hang the GPU is marked unresponsive; after
    ``max_hangs`` hangs the driver is taken as wedged and remaining GPUs are not touched.
    GPUs are read in parallel (NVML is thread-safe), one calling thread and one worker per GPU, so
    an 8-GPU node costs about one GPU's reading time (PCIe throughput alone samples 2 x 20 ms).
    """

    def __init__(self, call_timeout_s: float = 5.0, max_hangs: int = 2, parallel: bool = True) -> None:
        self.call_timeout_s = call_timeout_s
        self.max_hangs = max_hangs
        self.parallel = parallel
        self.hangs = 0
        self._nv: Any = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._workers: list[_Worker] = []
        self._stuck: dict[int, _Worker] = {}  # GPU index -> worker still inside a hung call on it
        self._pool: ThreadPoolExecutor | None = None
        self._handles: dict[int, Any] = {}
        self._static: dict[int, Static] = {}
        self._count: int | None = None
        self._inited = False
        self.versions = Versions(None, None, None)

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> NvmlReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        try:
            import pynvml
        except ImportError as e:  # the dependency is declared, but a broken install happens
            raise NvmlUnavailable(f"nvidia-ml-py is not installed ({e}); pip install nvidia-ml-py") from e
        self._nv = pynvml
        try:
            self._raw("nvmlInit")
        except _Hung:
            self._hung()
            raise NvmlUnavailable(
                f"NVML unresponsive: nvmlInit did not return within {self.call_timeout_s:g}s "
                "(driver hung? look for processes in D state and NVRM lines in dmesg)"
            ) from None
        except AttributeError as e:
            raise NvmlUnavailable(f"nvidia-ml-py is unusable: {e}") from e
        except Exception as e:
            code = err_code(e)
            if code is None:
                raise NvmlUnavailable(f"NVML failed to initialise: {type(e).__name__}: {e}") from e
            raise NvmlUnavailable(_INIT_REASONS.get(code, f"NVML failed to initialise: {text(e)}")) from e
        self._inited = True
        self.versions = self._read_versions()

    def close(self) -> None:
        if self._inited and not self._stuck_count() and self.hangs == 0:
            # Shutting down while another thread is stuck inside NVML is unsafe; leave it then.
            try:
                self._raw("nvmlShutdown")
            except Exception:
                pass
        self._inited = False
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # callers only ever wait with a timeout: this returns
            self._pool = None
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:
            w.stop()  # a stuck worker exits once (if ever) its call returns
        self._local = threading.local()

    # -- call plumbing ---------------------------------------------------------------------------

    def _raw(self, fname: str, *args: Any) -> Any:
        """Call ``pynvml.<fname>(*args)`` on the worker thread with the time box."""
        fn = getattr(self._nv, fname)  # AttributeError: binding too old for this call
        w: _Worker | None = getattr(self._local, "worker", None)
        if w is None:
            w = self._local.worker = self._new_worker()
        try:
            return w.call(fn, args, self.call_timeout_s)
        except _Hung:
            # That worker is stuck inside the driver: abandon it; this thread gets a fresh one.
            w.stop()
            self._local.worker = self._new_worker()
            raise _Hung(w) from None

    def _new_worker(self) -> _Worker:
        w = _Worker()
        with self._lock:
            self._workers.append(w)
        return w

    def _hung(self, index: int | None = None, worker: _Worker | None = None) -> None:
        with self._lock:
            self.hangs += 1
            if index is not None and worker is not None:
                self._stuck[index] = worker

    def _stuck_count(self) -> int:
        with self._lock:
            return sum(1 for w in self._stuck.values() if w.busy)

    def _read_versions(self) -> Versions:
        def opt(fname: str) -> Any:
            try:
                return self._raw(fname)
            except _Hung:
                self._hung()
                return None
            except Exception:
                return None

        drv = opt("nvmlSystemGetDriverVersion")
        nvml_v = opt("nvmlSystemGetNVMLVersion")
        cuda = opt("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = opt("nvmlSystemGetCudaDriverVersion")
        cuda_s = f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) and cuda > 0 else None
        return Versions(
            text(drv) if drv is not None else None, text(nvml_v) if nvml_v is not None else None, cuda_s
        )

    def device_count(self) -> int:
        if self._count is None:
            try:
                self._count = int(self._raw("nvmlDeviceGetCount"))
            except _Hung:
                self._hung()
                raise NvmlUnavailable(
                    f"NVML unresponsive: nvmlDeviceGetCount did not return within {self.call_timeout_s:g}s"
                ) from None
            except Exception as e:
                raise NvmlUnavailable(f"NVML could not count GPUs: {text(e)}") from e
        return self._count

    # -- public reads ----------------------------------------------------------------------------

    def read_all(self) -> tuple[list[GpuFacts], Versions]:
        """Every fact for every GPU (doctor, capture)."""
        return self._read_gpus(full=True), self.versions

    def sample(self) -> list[GpuFacts]:
        """Fast subset for 1 Hz sampling: temperatures, power, clocks, reasons, utilisation,
        memory, ECC/remap counters, PCIe gen/width/replays, processes.  Static facts come from a
        one-time read."""
        return self._read_gpus(full=False)

    def _read_gpus(self, *, full: bool) -> list[GpuFacts]:
        n = self.device_count()
        if n <= 1 or not self.parallel:
            return [self._read_gpu(i, full=full) for i in range(n)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=min(n, 16), thread_name_prefix="gpuclinic-nvml-gpu")
        return list(self._pool.map(lambda i: self._read_gpu(i, full=full), range(n)))

    # -- one GPU ---------------------------------------------------------------------------------

    def _read_gpu(self, index: int, *, full: bool) -> GpuFacts:
        g = GpuFacts(index=index)
        stuck = self._stuck.get(index)
        if stuck is not None:
            if stuck.busy:  # do not pile another thread onto a call that is still hung
                g.lost = True
                g.lost_reason = (
                    "unresponsive: an earlier NVML call on this GPU is still hung (driver or GPU hung)"
                )
                self._copy_static(g, index)
                return g
            with self._lock:  # the hung call finally returned: try this GPU again
                self._stuck.pop(index, None)
        n_stuck = self._stuck_count()
        if n_stuck >= self.max_hangs:
            g.lost = True
            g.lost_reason = f"unresponsive: not read, NVML calls on {n_stuck} GPUs are hung (driver wedged?)"
            self._copy_static(g, index)
            return g
        rd = GpuRead(self, g)
        try:
            h = self._handles.get(index)
            if h is None:
                h = rd.get("handle", "nvmlDeviceGetHandleByIndex", index, required=True)
                if h is None:
                    return g
                self._handles[index] = h
            rd.h = h
            st = self._static.get(index)
            if st is None or full:
                st = read_static(rd)
                self._static[index] = st
            else:
                self._copy_static(g, index)
            read_dynamic(rd, full=full)
        except StopGpu:
            self._handles.pop(index, None)
        return g

    def _copy_static(self, g: GpuFacts, index: int) -> None:
        """Identity and limits from an earlier read, so a hung or lost GPU is still named in reports."""
        st = self._static.get(index)
        if st is not None:
            for k, v in st.values.items():
                setattr(g, k, v)
            g.unreadable.update(st.unreadable)

    def identity(self, index: int) -> GpuFacts:
        """Who GPU ``index`` is (name, UUID, serial, bus id) without reading its state: what
        ``runbook --gpu N`` needs to fill in its commands."""
        g = GpuFacts(index=index)
        rd = GpuRead(self, g)
        try:
            rd.h = rd.get("handle", "nvmlDeviceGetHandleByIndex", index, required=True)
            read_identity(rd)
        except StopGpu:
            pass
        return g

def collect(snap: Snapshot, opts: CollectOptions) -> None:
    """Fill ``snap.gpus`` and the versions; on failure say precisely why NVML could not be used."""
    t0 = time.monotonic()
    per_call = max(0.5, min(5.0, opts.nvml_timeout_s / 2))
    reader = NvmlReader(call_timeout_s=per_call)
    try:
        reader.open()
    except NvmlUnavailable as e:
        snap.nvml_available = False
        snap.skip(WHAT, str(e))
        reader.close()
        return
    try:
        gpus, versions = reader.read_all()
    except NvmlUnavailable as e:
        snap.nvml_available = False
        snap.skip(WHAT, str(e))
        return
    finally:
        reader.close()
    snap.nvml_available = True
    snap.gpus = gpus
    snap.driver_version = versions.driver or snap.driver_version
    snap.nvml_version = versions.nvml
    snap.cuda_driver_version = versions.cuda_driver
    if not gpus:
        snap.notes.append("NVML works but reports no GPUs")
    if reader.hangs:
        snap.notes.append(
            f"NVML: {reader.hangs} call(s) hung (> {per_call:g}s) in {time.monotonic() - t0:.1f}s"
        )
