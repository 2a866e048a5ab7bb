"""Host bottlenecks that masquerade as a slow GPU (thresholds are conservative: a warning means act)."""

from __future__ import annotations

from collections.abc import Iterator

from gpuclinic.checks import CheckSkipped, check
from gpuclinic.checks._hw import host_threshold as T
from gpuclinic.facts.host import HostFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding

PSI = ("cpu.some", "memory.some", "memory.full", "io.some", "io.full")  # each psi_<res>_<kind>_avg10_pct
SRC_PSI = "https://docs.kernel.org/accounting/psi.html"


def _h(snap: Snapshot) -> HostFacts:
    if snap.host is None:
        raise CheckSkipped("no host facts")
    return snap.host


def _measured(h: HostFacts) -> None:
    if not h.cpu_pct or not (h.window_s or h.extra.get("read_from")):
        raise CheckSkipped("not measured (use without --quick)")


def _over(h: HostFacts, proc: str | None = None) -> str:
    """Where a figure comes from: this run's sampling window, or the pasted tool's output."""
    if h.window_s:
        return f"over {h.window_s:g}s" + (f" ({proc})" if proc else "")
    return f"in the pasted {h.extra.get('read_from', 'output')}"


def _ncpu(h: HostFacts) -> int | None:
    return len(h.cpus_allowed) or h.cpu_count


@check(
    "host.cpu", codes=["host.cpu_steal", "host.iowait", "host.load"], what="host CPU (steal, I/O wait, load)"
)
def cpu(snap: Snapshot) -> Iterator[Finding]:
    h = _h(snap)
    n = _ncpu(h)
    if h.load and n:
        if h.load[0] > T("load_factor_warn") * n:
            yield finding(
                "host.load",
                title=f"Load average {h.load[0]:.1f} on {n} usable CPU(s)",
                evidence=[f"load 1/5/15 min: {' / '.join(f'{x:.1f}' for x in h.load)}", f"usable CPUs: {n}"],
                data={"load": h.load, "cpus": n},
            )
    _measured(h)
    steal = h.cpu_pct.get("steal", 0.0)
    if steal >= T("cpu_steal_warn_pct"):
        yield finding(
            "host.cpu_steal",
            title=f"CPU steal {steal:.0f}%: the hypervisor gives this VM's CPU time to other tenants",
            evidence=[f"steal {steal:.1f}% {_over(h, '/proc/stat')}"],
            data={"steal_pct": steal},
        )
    iow = h.cpu_pct.get("iowait", 0.0)
    if iow >= T("iowait_warn_pct"):
        yield finding(
            "host.iowait",
            title=f"I/O wait {iow:.0f}%: CPUs idle waiting for storage",
            evidence=[f"iowait {iow:.1f}% {_over(h)}"],
            data={"iowait_pct": iow},
        )


@check(
    "host.psi", codes=["host.psi_cpu", "host.psi_memory", "host.psi_io"], what="pressure stall information"
)
def psi(snap: Snapshot) -> Iterator[Finding]:
    h = _h(snap)
    if not h.psi:
        raise CheckSkipped("/proc/pressure not available (kernel without PSI)")
    for key in PSI:
        limit = T(f"psi_{key.replace('.', '_')}_avg10_pct")
        v = h.psi.get(f"{key}.avg10")
        if v is None or v < limit:
            continue
        res = key.split(".")[0]
        yield finding(
            f"host.psi_{res}",
            title=f"{res.upper()} pressure: tasks stalled {v:.0f}% of the last 10 s ({key.split('.')[1]})",
            evidence=[
                f"/proc/pressure/{res}: {key.split('.')[1]} avg10={v:.2f} "
                f"avg60={h.psi.get(f'{key}.avg60', 0):.2f}"
            ],
            data={"psi": key, "avg10": v},
            source=SRC_PSI,
        )


@check("host.memory", codes=["host.swapping", "host.memory_low"], what="host memory and swap")
def memory(snap: Snapshot) -> Iterator[Finding]:
    h = _h(snap)
    tot, avail = h.mem_total_bytes, h.mem_available_bytes
    if (
        tot
        and avail is not None
        and (
            avail < T("mem_available_low_fraction") * tot
            or avail < min(T("mem_available_low_bytes"), T("mem_available_low_total_fraction") * tot)
        )
    ):
        yield finding(
            "host.memory_low",
            title=f"Only {avail / (1 << 30):.1f} GiB of {tot / (1 << 30):.0f} GiB host memory available",
            evidence=[f"MemAvailable {avail} of MemTotal {tot} bytes"],
            data={"available": avail, "total": tot},
        )
    if h.swap_in_per_s is None or h.swap_out_per_s is None:
        return
    rate = h.swap_in_per_s + h.swap_out_per_s
    if rate >= T("swap_warn_pages_per_s"):
        yield finding(
            "host.swapping",
            title=f"Host is swapping ({rate:.0f} pages/s)",
            evidence=[
                f"pswpin {h.swap_in_per_s:.0f}/s, pswpout {h.swap_out_per_s:.0f}/s {_over(h, '/proc/vmstat')}"
            ],
            data={"pages_per_s": rate},
        )


@check("host.nofile", codes=["host.nofile_low"], what="open-files limit")
def nofile(snap: Snapshot) -> Iterator[Finding]:
    h = _h(snap)
    low = {pid: v for pid, v in h.proc_nofile.items() if v < T("nofile_min")}
    if h.proc_nofile:  # the GPU jobs' own limits are what matter
        if not low:
            return
        soft, who = min(low.values()), f"GPU process(es) {', '.join(sorted(low)[:6])}"
    else:
        if h.nofile_soft is None:
            raise CheckSkipped("limits not readable")
        if h.nofile_soft >= T("nofile_min"):
            return
        soft, who = h.nofile_soft, "this shell/session"
    yield finding(
        "host.nofile_low",
        title=f"Open-files limit is {soft} for {who}",
        evidence=[
            f"soft limit {soft}"
            + (f", hard limit {h.nofile_hard}" if h.nofile_hard and not h.proc_nofile else "")
        ],
        data={"soft": soft, "hard": h.nofile_hard, "pids": sorted(low)},
        source="https://github.com/pytorch/pytorch/issues/973",
    )


@check("host.numa", codes=["host.numa_mismatch"], what="GPU NUMA locality")
def numa(snap: Snapshot) -> Iterator[Finding]:
    h = _h(snap)
    if not h.gpu_numa or len(h.numa_cpus) < 2:
        raise CheckSkipped("single NUMA node or GPU NUMA unknown")
    bad: list[str] = []
    # the GPU processes' own affinity when we can see it; else ours (in a container: the container's cpuset)
    pairs: list[tuple[str, str, set[int]]] = []
    for g in snap.gpus:
        for p in g.processes:
            cpus = h.proc_cpus.get(str(p.pid))
            if cpus and g.pci_bus_id:
                pairs.append((g.pci_bus_id, f"pid {p.pid}", set(cpus)))
    if not pairs and h.cpus_allowed:
        pairs = [(bus, "this process/container", set(h.cpus_allowed)) for bus in h.gpu_numa]
    if not pairs:
        raise CheckSkipped("no CPU affinity known")
    for bus, who, allowed in pairs:
        node = h.gpu_numa.get(bus)
        local = set(h.numa_cpus.get(str(node), [])) if node is not None else set()
        if local and not (allowed & local):
            bad.append(
                f"GPU {bus} is on NUMA node {node} (CPUs {_ranges(sorted(local))}) but {who} may only run on "
                f"CPUs {_ranges(sorted(allowed))}"
            )
    if not bad:
        return
    yield finding(
        "host.numa_mismatch",
        title="GPU work runs only on CPUs of another NUMA node",
        evidence=bad[:8],
        data={"gpu_numa": h.gpu_numa},
    )


@check("host.dataloader", codes=["host.dataloader_starved"], what="data-loader starvation")
def dataloader(snap: Snapshot) -> Iterator[Finding]:
    h = _h(snap)
    _measured(h)
    if h.gpu_util_pct is None or not snap.gpus:
        raise CheckSkipped("GPU utilisation not sampled")
    busy = h.cpu_pct.get("user", 0.0) + h.cpu_pct.get("system", 0.0)
    has_work = (
        any(g.processes for g in snap.gpus) or h.gpu_util_pct > 0
    )  # in containers NVML may list no processes
    if h.gpu_util_pct >= T("starved_gpu_util_pct") or busy < T("starved_cpu_busy_pct") or not has_work:
        return
    yield finding(
        "host.dataloader_starved",
        title=f"GPUs {h.gpu_util_pct:.0f}% busy while host CPUs are {busy:.0f}% busy: the input pipeline "
              "starves the GPUs",
        evidence=[
            f"mean GPU utilisation {h.gpu_util_pct:.0f}% with GPU processes running",
            f"CPU user+system {busy:.0f}% {_over(h)}",
        ],
        data={"gpu_util_pct": h.gpu_util_pct, "cpu_busy_pct": busy},
    )


def _ranges(xs: list[int]) -> str:
    out: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)
