"""What NVML says about one GPU: identity and limits (read once), then state (every sample).

Kept apart from the call plumbing (:mod:`.nvml`: workers, time boxes, parallel GPUs) and the outcome
mapping (:mod:`.nvml_calls`): these readers only name calls and convert answers into ``GpuFacts``
fields; every call goes through :class:`.nvml_calls.GpuRead`, so none of them handles an error itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuclinic.facts.gpu import GpuProcess, NvLinkFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import gpu_fields
from gpuclinic.sources.nvml_calls import GpuRead, text

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


@dataclass
class Static:
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



def read_identity(rd: GpuRead) -> None:
    g = rd.g
    g.name = rd.text("name", "nvmlDeviceGetName")
    g.uuid = rd.text("uuid", "nvmlDeviceGetUUID")
    g.serial = rd.text("serial", "nvmlDeviceGetSerial")
    pci = rd.get("pci_bus_id", "nvmlDeviceGetPciInfo")
    if pci is not None:
        bus = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None)
        if bus:
            g.pci_bus_id = normalize_bus_id(text(bus))
        dev_id = getattr(pci, "pciDeviceId", None)
        if isinstance(dev_id, int):
            g.pci_device_id = f"0x{dev_id:08X}"


def read_static(rd: GpuRead) -> Static:
    g = rd.g
    before = dict(g.unreadable)
    read_identity(rd)
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
    _schema_reads(rd, "static")
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
    st = Static()
    for k in STATIC_FIELDS:
        st.values[k] = getattr(g, k)
    st.unreadable = {k: v for k, v in g.unreadable.items() if k not in before}
    return st


def read_dynamic(rd: GpuRead, *, full: bool) -> None:
    nv = rd.r._nv
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
    _schema_reads(rd, "dynamic")
    if full:
        # each throughput read samples for ~20 ms inside NVML: doctor only, not the 1 Hz path
        _schema_reads(rd, "full")
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
    _read_memory_health(rd, full=full)
    if full:
        _read_nvlinks(rd)
    _read_processes(rd)


def _schema_reads(rd: GpuRead, phase: str) -> None:
    for fact, spec in gpu_fields.nvml_reads(phase):
        args = [nv_const(rd.r._nv, name, default) for name, default in spec.args]
        if spec.conv == "milliwatts":
            value: float | int | None = rd.milliwatts(fact, spec.fn)
        elif spec.conv == "intval":
            value = rd.intval(fact, spec.fn, *args)
        else:
            value = rd.number(fact, spec.fn, *args)
        setattr(rd.g, fact, value)


def _read_memory_health(rd: GpuRead, *, full: bool) -> None:
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


def _read_nvlinks(rd: GpuRead) -> None:
    nv = rd.r._nv
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
                f.remote_pci_bus_id = normalize_bus_id(text(bus))
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


def _read_processes(rd: GpuRead) -> None:
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


