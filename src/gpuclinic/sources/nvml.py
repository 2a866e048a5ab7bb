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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuclinic.errors import SourceUnavailable
from gpuclinic.facts.gpu import GpuFacts, GpuProcess, NvLinkFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import gpu_fields
from gpuclinic.sources.nvml_worker import Hung as _Hung
from gpuclinic.sources.nvml_worker import Worker as _Worker

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions
    from gpuclinic.facts.snapshot import Snapshot

WHAT = "GPUs through NVML"

# Clock-event ("throttle") reason bits, nvmlClocksEventReason*: the one vocabulary in gpu_fields.json.
CLOCK_EVENT_REASONS: dict[int, str] = {r.bit: r.name for r in gpu_fields.clock_reasons()}

# nvmlPerfPolicyType_t -> name used in GpuFacts.violation_ns
VIOLATION_POLICIES: dict[int, str] = {
    0: "power",
    1: "thermal",
    2: "sync_boost",
    3: "board_limit",
    4: "low_utilization",
    5: "reliability",
    10: "total_app_clocks",
    11: "total_base_clocks",
}
SAMPLE_VIOLATIONS = (0, 1)  # power and thermal are cheap and what watch graphs

ARCHITECTURES: dict[int, str] = {
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada",
    9: "Hopper", 10: "Blackwell", 13: "Rubin",
}
_PRE_AMPERE = ("Kepler", "Maxwell", "Pascal", "Volta", "Turing")

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}

RECOVERY_ACTIONS = {
    0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot",
}

FI_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
FI_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION

# NVML error codes (nvml.h); kept here so the reader works with any nvidia-ml-py version.
E_NOT_SUPPORTED = 3
E_NO_PERMISSION = 4
E_NOT_FOUND = 6
E_INSUFFICIENT_POWER = 8
E_DRIVER_NOT_LOADED = 9
E_TIMEOUT = 10
E_LIBRARY_NOT_FOUND = 12
E_FUNCTION_NOT_FOUND = 13
E_CORRUPTED_INFOROM = 14
E_GPU_IS_LOST = 15
E_RESET_REQUIRED = 16
E_LIB_RM_VERSION_MISMATCH = 18
E_UNKNOWN = 999
E_INVALID_ARGUMENT = 2

# Errors that only mean "this GPU/driver does not have it": never worth a line in the report.
_QUIET = {E_NOT_SUPPORTED, E_NOT_FOUND, E_INVALID_ARGUMENT}

_INIT_REASONS = {
    E_LIBRARY_NOT_FOUND: "NVML library not found: no NVIDIA driver installed? (libnvidia-ml.so.1 is not "
                         "loadable)",
    E_DRIVER_NOT_LOADED: "driver not loaded: the nvidia kernel module is not running (check `lsmod | grep "
                         "nvidia`, dmesg)",
    E_NO_PERMISSION: "no permission to open the NVIDIA devices (/dev/nvidia*); run as a user in the video "
                     "group or root",
    E_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ (driver upgraded without "
                               "reboot?); "
    "reboot or reload the nvidia modules",
    E_UNKNOWN: "NVML failed to initialise with an unknown error (check dmesg for NVRM lines)",
}

_FIELD_REASONS = {
    E_NO_PERMISSION: "no permission (needs root)",
    E_INSUFFICIENT_POWER: "insufficient external power: a GPU power cable is not connected or a PSU failed",
    E_FUNCTION_NOT_FOUND: "not available in this driver (function not found)",
    E_CORRUPTED_INFOROM: "corrupted InfoROM",
    E_RESET_REQUIRED: "GPU requires a reset",
    E_TIMEOUT: "NVML timed out",
    E_UNKNOWN: "NVML unknown error",
}


class Versions(NamedTuple):
    driver: str | None
    nvml: str | None
    cuda_driver: str | None  # "12.4"


class NvmlUnavailable(SourceUnavailable):
    """NVML cannot be used at all; the message is the precise reason for the report."""


class _StopGpu(Exception):
    """Stop reading this GPU (lost or unresponsive); the GpuFacts already says why."""


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


def _err_code(e: BaseException) -> int | None:
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None


@dataclass
class _Static:
    """Facts that do not change while the driver is loaded: read once, copied into each sample."""

    values: dict[str, Any] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


STATIC_FIELDS = (
    "name",
    "uuid",
    "serial",
    "pci_bus_id",
    "pci_device_id",
    "vbios",
    "architecture",
    "compute_capability",
    "slowdown_temp_c",
    "shutdown_temp_c",
    "max_operating_temp_c",
    "memory_max_operating_temp_c",
    "power_default_limit_w",
    "power_max_limit_w",
    "sm_clock_max_mhz",
    "mem_clock_max_mhz",
    "pcie_gen_max",
    "pcie_gen_gpu_max",
    "pcie_width_max",
    "ecc_mode_current",
    "ecc_mode_pending",
    "persistence_mode",
    "compute_mode",
    "mig_mode_current",
    "mig_mode_pending",
)


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
        self._static: dict[int, _Static] = {}
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
            code = _err_code(e)
            if code is None:
                raise NvmlUnavailable(f"NVML failed to initialise: {type(e).__name__}: {e}") from e
            raise NvmlUnavailable(_INIT_REASONS.get(code, f"NVML failed to initialise: {_text(e)}")) from e
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
            _text(drv) if drv is not None else None, _text(nvml_v) if nvml_v is not None else None, cuda_s
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
                raise NvmlUnavailable(f"NVML could not count GPUs: {_text(e)}") from e
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
        rd = _GpuRead(self, g)
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
                st = self._read_static(rd)
                self._static[index] = st
            else:
                self._copy_static(g, index)
            self._read_dynamic(rd, full=full)
        except _StopGpu:
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
        rd = _GpuRead(self, g)
        try:
            rd.h = rd.get("handle", "nvmlDeviceGetHandleByIndex", index, required=True)
            self._read_identity(rd)
        except _StopGpu:
            pass
        return g

    def _read_identity(self, rd: _GpuRead) -> None:
        g = rd.g
        g.name = rd.text("name", "nvmlDeviceGetName")
        g.uuid = rd.text("uuid", "nvmlDeviceGetUUID")
        g.serial = rd.text("serial", "nvmlDeviceGetSerial")
        pci = rd.get("pci_bus_id", "nvmlDeviceGetPciInfo")
        if pci is not None:
            bus = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None)
            if bus:
                g.pci_bus_id = normalize_bus_id(_text(bus))
            dev_id = getattr(pci, "pciDeviceId", None)
            if isinstance(dev_id, int):
                g.pci_device_id = f"0x{dev_id:08X}"

    def _read_static(self, rd: _GpuRead) -> _Static:
        g = rd.g
        before = dict(g.unreadable)
        self._read_identity(rd)
        g.vbios = rd.text("vbios", "nvmlDeviceGetVbiosVersion")
        arch = rd.get("architecture", "nvmlDeviceGetArchitecture")
        if isinstance(arch, int):
            g.architecture = ARCHITECTURES.get(arch, f"unknown({arch})")
        cc = rd.get("compute_capability", "nvmlDeviceGetCudaComputeCapability")
        if cc is not None:
            try:
                g.compute_capability = f"{int(cc[0])}.{int(cc[1])}"
            except (TypeError, ValueError, IndexError):
                pass
        for fname, const in (
            ("shutdown_temp_c", 0),
            ("slowdown_temp_c", 1),
            ("memory_max_operating_temp_c", 2),
            ("max_operating_temp_c", 3),
        ):
            v = rd.get(fname, "nvmlDeviceGetTemperatureThreshold", const)
            if isinstance(v, (int, float)) and 0 < v < 200:
                setattr(g, fname, float(v))
        self._schema_reads(rd, "static")
        cons = rd.get("power_max_limit_w", "nvmlDeviceGetPowerManagementLimitConstraints")
        if cons is not None:
            try:
                g.power_max_limit_w = float(cons[1]) / 1000.0
            except (TypeError, IndexError, ValueError):
                pass
        ecc = rd.get("ecc_mode_current", "nvmlDeviceGetEccMode")
        if ecc is not None:
            g.ecc_mode_current, g.ecc_mode_pending = bool(ecc[0]), bool(ecc[1])
        pm = rd.get("persistence_mode", "nvmlDeviceGetPersistenceMode")
        if pm is not None:
            g.persistence_mode = bool(pm)
        cm = rd.get("compute_mode", "nvmlDeviceGetComputeMode")
        if isinstance(cm, int):
            g.compute_mode = COMPUTE_MODES.get(cm, str(cm))
        mig = rd.get("mig_mode_current", "nvmlDeviceGetMigMode")
        if mig is not None:
            g.mig_mode_current, g.mig_mode_pending = bool(mig[0]), bool(mig[1])
        st = _Static()
        for k in STATIC_FIELDS:
            st.values[k] = getattr(g, k)
        st.unreadable = {k: v for k, v in g.unreadable.items() if k not in before}
        return st

    def _read_dynamic(self, rd: _GpuRead, *, full: bool) -> None:
        nv = self._nv
        g = rd.g
        # nvmlDeviceGetTemperature is deprecated in newer drivers in favour of ...TemperatureV
        t = rd.get(
            "temperature_c",
            "nvmlDeviceGetTemperature",
            nv_const(nv, "NVML_TEMPERATURE_GPU", 0),
            fallback="nvmlDeviceGetTemperatureV",
        )
        g.temperature_c = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
        fields = rd.field_values("field_values", [FI_MEMORY_TEMP, FI_RECOVERY_ACTION])
        mt = fields.get(FI_MEMORY_TEMP)
        if isinstance(mt, (int, float)) and 0 < mt < 200:  # 0 means "no sensor" on some boards
            g.memory_temperature_c = float(mt)
        ra = fields.get(FI_RECOVERY_ACTION)
        if isinstance(ra, int):
            g.recovery_action = RECOVERY_ACTIONS.get(ra, f"unknown({ra})")
        # the one-call facts (power, clocks, PCIe link, fan, throughput), straight from gpu_fields.json
        self._schema_reads(rd, "dynamic")
        if full:
            # each throughput read samples for ~20 ms inside NVML: doctor only, not the 1 Hz path
            self._schema_reads(rd, "full")
        if g.power_limit_w is None:
            g.power_limit_w = g.power_enforced_limit_w
        mask = rd.get(
            "clock_event_reasons",
            "nvmlDeviceGetCurrentClocksEventReasons",
            fallback="nvmlDeviceGetCurrentClocksThrottleReasons",
        )
        if isinstance(mask, int):
            g.clock_event_reasons_mask = mask
            g.clock_event_reasons = decode_reasons(mask)
        for pol in VIOLATION_POLICIES if full else SAMPLE_VIOLATIONS:
            name = VIOLATION_POLICIES[pol]
            v = rd.get(f"violation_ns.{name}", "nvmlDeviceGetViolationStatus", pol)
            t = getattr(v, "violationTime", None) if v is not None else None
            if isinstance(t, int):
                g.violation_ns[name] = t
        ps = rd.get("performance_state", "nvmlDeviceGetPerformanceState")
        if isinstance(ps, int) and 0 <= ps < 32:
            g.performance_state = f"P{ps}"
        util = rd.get("utilization_gpu_pct", "nvmlDeviceGetUtilizationRates")
        if util is not None:
            g.utilization_gpu_pct = float(util.gpu)
            g.utilization_memory_pct = float(util.memory)
        mem = rd.get("memory_used_bytes", "nvmlDeviceGetMemoryInfo")
        if mem is not None:
            g.memory_used_bytes, g.memory_total_bytes = int(mem.used), int(mem.total)
        self._read_memory_health(rd, full=full)
        if full:
            self._read_nvlinks(rd)
        self._read_processes(rd)

    def _schema_reads(self, rd: _GpuRead, phase: str) -> None:
        for fact, spec in gpu_fields.nvml_reads(phase):
            args = [nv_const(self._nv, name, default) for name, default in spec.args]
            if spec.conv == "milliwatts":
                value: float | int | None = rd.milliwatts(fact, spec.fn)
            elif spec.conv == "intval":
                value = rd.intval(fact, spec.fn, *args)
            else:
                value = rd.number(fact, spec.fn, *args)
            setattr(rd.g, fact, value)

    def _read_memory_health(self, rd: _GpuRead, *, full: bool) -> None:
        g = rd.g
        if g.ecc_mode_current is not False:  # unknown or on: the counters answer NotSupported when off
            for attr, etype, ctype in (
                ("ecc_volatile_corrected", 0, 0),
                ("ecc_volatile_uncorrected", 1, 0),
                ("ecc_aggregate_corrected", 0, 1),
                ("ecc_aggregate_uncorrected", 1, 1),
            ):
                if not full and ctype == 1:
                    continue
                setattr(g, attr, rd.intval(attr, "nvmlDeviceGetTotalEccErrors", etype, ctype))
        # Row remapping exists from Ampere on, page retirement before it; unknown: try both.
        arch = g.architecture
        pre_ampere = arch in _PRE_AMPERE
        ampere_plus = arch is not None and not pre_ampere and not arch.startswith("unknown")
        if not pre_ampere:
            rr = rd.get("remapped_rows", "nvmlDeviceGetRemappedRows")
            if rr is not None:
                g.remapped_rows_correctable, g.remapped_rows_uncorrectable = int(rr[0]), int(rr[1])
                g.remapped_rows_pending, g.remapped_rows_failure = bool(rr[2]), bool(rr[3])
        if not ampere_plus:
            if full:
                sbe = rd.get("retired_pages_sbe", "nvmlDeviceGetRetiredPages", 0)
                dbe = rd.get("retired_pages_dbe", "nvmlDeviceGetRetiredPages", 1)
                g.retired_pages_sbe = len(sbe) if sbe is not None else None
                g.retired_pages_dbe = len(dbe) if dbe is not None else None
            pend = rd.get("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
            if pend is not None:
                g.retired_pages_pending = bool(pend)

    def _read_nvlinks(self, rd: _GpuRead) -> None:
        nv = self._nv
        links: list[NvLinkFacts] = []
        max_links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
        for link in range(max_links):
            state = rd.get(f"nvlink.{link}.state", "nvmlDeviceGetNvLinkState", link, quiet_all=True)
            if state is None:
                if link == 0 or not links:
                    return  # no NVLink on this GPU
                continue  # links past the GPU's count answer NotSupported/InvalidArgument
            f = NvLinkFacts(link=link, active=bool(state))
            v = rd.get(f"nvlink.{link}.version", "nvmlDeviceGetNvLinkVersion", link)
            if isinstance(v, int):
                f.version = v
            if f.active:
                rp = rd.get(f"nvlink.{link}.remote", "nvmlDeviceGetNvLinkRemotePciInfo", link)
                bus = getattr(rp, "busId", None) if rp is not None else None
                if bus:
                    f.remote_pci_bus_id = normalize_bus_id(_text(bus))
            for attr, counter in (
                ("replay_errors", 0),
                ("recovery_errors", 1),
                ("crc_flit_errors", 2),
                ("crc_data_errors", 3),
                ("ecc_errors", 4),
            ):
                setattr(
                    f,
                    attr,
                    rd.intval(f"nvlink.{link}.{attr}", "nvmlDeviceGetNvLinkErrorCounter", link, counter),
                )
            links.append(f)
        rd.g.nvlinks = links

    def _read_processes(self, rd: _GpuRead) -> None:
        procs: list[GpuProcess] = []
        seen: set[tuple[int, str]] = set()
        for kind, fname in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            lst = rd.get(f"processes.{kind}", fname)
            for p in lst or []:
                pid = getattr(p, "pid", None)
                if not isinstance(pid, int) or (pid, kind) in seen:
                    continue
                seen.add((pid, kind))
                used = getattr(p, "usedGpuMemory", None)
                procs.append(
                    GpuProcess(
                        pid=pid,
                        name=_process_name(pid),
                        kind=kind,
                        used_memory_bytes=int(used) if isinstance(used, int) else None,
                    )
                )
        rd.g.processes = procs


def nv_const(nv: Any, name: str, default: int) -> int:
    v = getattr(nv, name, default)
    return v if isinstance(v, int) else default


def decode_reasons(mask: int) -> list[str]:
    """Names of the set clock-event reason bits, in bit order; unknown bits as ``bit_0x...``."""
    return gpu_fields.decode_reason_mask(mask)


def _process_name(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:  # gone, other PID namespace (containers), or no permission
        return None


class _GpuRead:
    """Per-GPU call helper: turns each NVML outcome into a value, a quiet None or an unreadable line."""

    def __init__(self, reader: NvmlReader, g: GpuFacts) -> None:
        self.r = reader
        self.g = g
        self.h: Any = None

    def get(
        self,
        fld: str,
        fname: str,
        *args: Any,
        fallback: str | None = None,
        required: bool = False,
        quiet_all: bool = False,
    ) -> Any:
        r = self.r
        call_args = args if fname == "nvmlDeviceGetHandleByIndex" else (self.h, *args)
        try:
            try:
                return r._raw(fname, *call_args)
            except AttributeError:
                if fallback is None:
                    raise
                return r._raw(fallback, *call_args)
        except _Hung as h:
            r._hung(self.g.index, h.worker)
            self.g.lost = True
            self.g.lost_reason = (
                f"unresponsive: {fname} did not return within {r.call_timeout_s:g}s (driver or GPU hung)"
            )
            raise _StopGpu() from None
        except AttributeError:
            if not quiet_all:
                self.g.unreadable[fld] = f"{fname} not in this nvidia-ml-py/driver"
            return None
        except Exception as e:
            code = _err_code(e)
            if code == E_GPU_IS_LOST:
                self.g.lost = True
                self.g.lost_reason = (
                    f"GPU is lost (NVML_ERROR_GPU_IS_LOST during {fname}); it has fallen off the bus"
                )
                raise _StopGpu() from None
            if code is None:
                self.g.unreadable[fld] = f"{type(e).__name__}: {e}"
            elif code in _QUIET or quiet_all:
                pass
            elif code == E_FUNCTION_NOT_FOUND and fallback is not None:
                try:
                    return r._raw(fallback, *call_args)
                except Exception:
                    self.g.unreadable[fld] = _FIELD_REASONS[E_FUNCTION_NOT_FOUND]
            else:
                self.g.unreadable[fld] = _FIELD_REASONS.get(code, f"NVML error {code}: {_text(e)}")
            if required:
                why = _FIELD_REASONS.get(code or 0, f"{fname} failed: {_text(e)}")
                self.g.unreadable.setdefault(fld, why)
                if code != E_NO_PERMISSION:
                    # nvidia-smi's "Unable to determine the device handle for GPU ...: Unknown Error": the
                    # classic face of a GPU that fell off the bus. No permission is a container/cgroup matter.
                    self.g.lost = True
                    self.g.lost_reason = f"NVML cannot get a handle for this GPU ({why})"
                raise _StopGpu() from None
            return None

    def text(self, fld: str, fname: str) -> str | None:
        v = self.get(fld, fname)
        return _text(v).strip() if v is not None else None

    def number(self, fld: str, fname: str, *args: Any) -> float | None:
        v = self.get(fld, fname, *args)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def intval(self, fld: str, fname: str, *args: Any) -> int | None:
        v = self.get(fld, fname, *args)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    def milliwatts(self, fld: str, fname: str) -> float | None:
        v = self.number(fld, fname)
        return v / 1000.0 if v is not None else None

    def field_values(self, fld: str, ids: list[int]) -> dict[int, Any]:
        """Batch ``nvmlDeviceGetFieldValues``; each value carries its own return code."""
        vals = self.get(fld, "nvmlDeviceGetFieldValues", ids)
        out: dict[int, Any] = {}
        if vals is None:
            return out
        for fv in vals:
            if getattr(fv, "nvmlReturn", 1) != 0:
                ret = getattr(fv, "nvmlReturn", None)
                if ret == E_GPU_IS_LOST:
                    self.g.lost = True
                    self.g.lost_reason = (
                        "GPU is lost (NVML_ERROR_GPU_IS_LOST in field values); it has fallen off the bus"
                    )
                    raise _StopGpu()
                continue
            out[int(fv.fieldId)] = _field_value(fv)
        return out


def _field_value(fv: Any) -> Any:
    vt = getattr(fv, "valueType", None)
    val = fv.value
    readers: dict[int, Callable[[], Any]] = {
        0: lambda: float(val.dVal),
        1: lambda: int(val.uiVal),
        2: lambda: int(val.ulVal),
        3: lambda: int(val.ullVal),
        4: lambda: int(val.sllVal),
        5: lambda: int(val.siVal),
        6: lambda: int(val.usVal),
    }
    return readers.get(vt if isinstance(vt, int) else 1, lambda: int(val.uiVal))()


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
