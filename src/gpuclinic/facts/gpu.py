"""Per-GPU hardware facts, as read from NVML, nvidia-smi dumps, sysfs or a scenario.

Every field is optional: a value that could not be read stays ``None`` and the reason goes into
``GpuFacts.unreadable`` so checks can say "could not check" instead of guessing.
"""

from __future__ import annotations

from gpuclinic.record import field, fields_of, record


@record
class NvLinkFacts:
    """One NVLink of a GPU: state, version, the peer it reaches and its error counters."""

    link: int
    active: bool | None = None
    version: int | None = None
    remote_pci_bus_id: str | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None
    ecc_errors: int | None = None


@record
class GpuProcess:
    """A process holding GPU memory (who is using the GPU a finding is about)."""

    pid: int
    name: str | None = None
    used_memory_bytes: int | None = None
    kind: str = "compute"  # compute | graphics


@record
class GpuFacts:
    """Everything read about one GPU; every metric optional (None: the source could not read it)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None  # normalised "0000:3b:00.0"
    pci_device_id: str | None = None  # "0x233010DE" as NVML reports it
    vbios: str | None = None
    architecture: str | None = None
    compute_capability: str | None = None  # "9.0"
    # heat
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    slowdown_temp_c: float | None = None
    shutdown_temp_c: float | None = None
    max_operating_temp_c: float | None = None
    memory_max_operating_temp_c: float | None = None
    fan_percent: float | None = None
    # power
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    power_enforced_limit_w: float | None = None
    power_max_limit_w: float | None = None
    # clocks
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    clock_event_reasons_mask: int | None = None
    clock_event_reasons: list[str] = field(default_factory=list)  # decoded names, e.g. "hw_thermal_slowdown"
    violation_ns: dict[str, int] = field(default_factory=dict)  # policy name -> cumulative ns
    performance_state: str | None = None  # "P0"
    # load
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    # memory health
    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # 575+ `-q` ECC Errors lines: a channel / TPC repair waits for a GPU reset; memory the GPU cannot repair
    memory_repair_pending: bool | None = None
    tpc_repair_pending: bool | None = None
    memory_unrepairable: bool | None = None
    # pcie
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None  # max the device *and system* support
    pcie_gen_gpu_max: int | None = None  # max the GPU supports
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_count: int | None = None  # lifetime counter (since the driver loaded): a count, not a rate
    pcie_replay_rate_per_min: float | None = None  # only from two samples of the counter (watch, two dumps)
    pcie_tx_kbps: float | None = None
    pcie_rx_kbps: float | None = None
    # nvlink
    nvlinks: list[NvLinkFacts] = field(default_factory=list)
    nvlink_all_inactive: bool | None = None  # nvidia-smi nvlink: "all links are inActive"
    # modes
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    recovery_action: str | None = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION decoded
    processes: list[GpuProcess] = field(default_factory=list)
    # state
    lost: bool = False  # NVML says GPU_IS_LOST, or nvidia-smi printed ERR!/unable to determine handle
    lost_reason: str | None = None
    unreadable: dict[str, str] = field(default_factory=dict)  # field -> why it could not be read

    @property
    def has_readings(self) -> bool:
        """True when anything was read from the GPU beyond who it is: a GPU only counted or named (a
        bug report's "8 attached GPUs" with one shown) has no readings, so no check could clear it."""
        for name, *_ in fields_of(GpuFacts) or ():
            if name in _IDENTITY:
                continue
            v = getattr(self, name)
            if v is not None and v is not False and v != [] and v != {}:
                return True
        return False

    @property
    def busy(self) -> bool:
        """True when the GPU is doing work, so idle-time downclocking does not explain low numbers."""
        util = self.utilization_gpu_pct
        if util is not None and util >= 20:
            return True
        if self.processes and (util is None or util > 5):
            return True
        if self.performance_state in ("P0", "P1", "P2") and util is not None and util >= 10:
            return True
        return False


# who a GPU is, not a reading of its state (GpuFacts.has_readings)
_IDENTITY = frozenset(
    {"index", "name", "uuid", "serial", "pci_bus_id", "pci_device_id", "vbios", "architecture",
     "compute_capability", "unreadable", "lost_reason"}
)


@record
class PciDevice:
    """An NVIDIA PCI function seen in sysfs (or lspci), independent of the driver."""

    bus_id: str  # "0000:3b:00.0"
    vendor_id: str = "0x10de"
    device_id: str | None = None
    class_code: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    current_link_speed_gts: float | None = None
    max_link_speed_gts: float | None = None
    current_link_width: int | None = None
    max_link_width: int | None = None
    parent_bus_id: str | None = None  # the bridge/switch port above it
    aer_corrected: dict[str, int] = field(default_factory=dict)
    aer_nonfatal: dict[str, int] = field(default_factory=dict)
    aer_fatal: dict[str, int] = field(default_factory=dict)
    # lspci read its configuration space as all ones ("(rev ff)", "!!! Unknown header type 7f"): the device
    # no longer answers on the bus
    config_unreadable: bool = False

    @property
    def is_gpu(self) -> bool:
        return bool(self.class_code and self.class_code.startswith(("0x0300", "0x0302")))
