"""Host facts: CPU steal, load, PSI, swap, I/O wait, memory, limits, NUMA.  Owned by issue 3."""

from __future__ import annotations

from typing import Any

from gpuclinic.record import field, record


@record
class HostFacts:
    """The host around the GPUs: CPU and memory pressure, NUMA placement, limits that starve jobs."""

    cpu_count: int | None = None  # logical CPUs online
    cpus_allowed: list[int] = field(default_factory=list)  # this process's CPU affinity
    window_s: float | None = None  # length of the measurement window (None: not measured)
    cpu_pct: dict[str, float] = field(default_factory=dict)  # user/system/iowait/steal/idle over the window
    load: list[float] = field(default_factory=list)  # 1, 5, 15 min
    psi: dict[str, float] = field(default_factory=dict)  # "cpu.some.avg10", "memory.full.avg10", ...
    swap_in_per_s: float | None = None  # pages/s over the window
    swap_out_per_s: float | None = None
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    nofile_soft: int | None = None
    nofile_hard: int | None = None
    numa_cpus: dict[str, list[int]] = field(default_factory=dict)  # node -> cpus
    gpu_numa: dict[str, int] = field(default_factory=dict)  # GPU bus id -> NUMA node
    proc_cpus: dict[str, list[int]] = field(default_factory=dict)  # GPU process pid -> its CPU affinity
    proc_nofile: dict[str, int] = field(default_factory=dict)  # GPU process pid -> its open-files soft limit
    gpu_util_pct: float | None = None  # mean GPU utilisation during the window (from NVML samples)
    extra: dict[str, Any] = field(default_factory=dict)
