"""Host bottlenecks that look like a slow GPU: CPU steal, load, PSI, swapping, I/O wait, memory, limits, NUMA.

Rates (CPU split, swap in/out) are measured over a short window (``opts.host_window_s``, ~2 s;
``--quick`` skips the window and keeps only instantaneous facts).  Everything is read from ``/proc``
and ``/sys`` under a ``root`` so tests use fake trees.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuclinic.facts.host import HostFacts
from gpuclinic.sources._fs import read_text as _read
from gpuclinic.sources._fs import under as _p

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions
    from gpuclinic.facts.snapshot import Snapshot

WHAT = "host CPU, memory and I/O"
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")




def parse_cpulist(s: str) -> list[int]:
    """``"0-3,8,10-11"`` -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in s.strip().split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        try:
            lo, hi = int(a), int(b or a)
        except ValueError:
            continue
        if hi - lo > 65536:
            continue
        out.extend(range(lo, hi + 1))
    return out


def cpu_times(root: str | os.PathLike[str]) -> dict[str, int] | None:
    text = _read(_p(root, "proc/stat"))
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("cpu "):
            nums = [int(x) for x in line.split()[1:] if x.isdigit()]
            return {k: (nums[i] if i < len(nums) else 0) for i, k in enumerate(_CPU_FIELDS)}
    return None


def cpu_split(a: dict[str, int], b: dict[str, int]) -> dict[str, float]:
    """Percent of CPU time per state between two /proc/stat readings."""
    d = {k: max(0, b[k] - a[k]) for k in _CPU_FIELDS}
    tot = sum(d.values())
    if tot <= 0:
        return {}
    return {
        "user": 100.0 * (d["user"] + d["nice"]) / tot,
        "system": 100.0 * (d["system"] + d["irq"] + d["softirq"]) / tot,
        "iowait": 100.0 * d["iowait"] / tot,
        "steal": 100.0 * d["steal"] / tot,
        "idle": 100.0 * d["idle"] / tot,
    }


def vmstat(root: str | os.PathLike[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (_read(_p(root, "proc/vmstat")) or "").splitlines():
        k, _, v = line.partition(" ")
        if k in ("pswpin", "pswpout"):
            try:
                out[k] = int(v)
            except ValueError:
                pass
    return out


def psi(root: str | os.PathLike[str]) -> dict[str, float]:
    """``/proc/pressure/{cpu,memory,io}`` -> {"cpu.some.avg10": 3.8, ...}."""
    out: dict[str, float] = {}
    for res in ("cpu", "memory", "io"):
        for line in (_read(_p(root, f"proc/pressure/{res}")) or "").splitlines():
            parts = line.split()
            if not parts or parts[0] not in ("some", "full"):
                continue
            for kv in parts[1:]:
                k, _, v = kv.partition("=")
                if k in ("avg10", "avg60"):
                    try:
                        out[f"{res}.{parts[0]}.{k}"] = float(v)
                    except ValueError:
                        pass
    return out


def meminfo(root: str | os.PathLike[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (_read(_p(root, "proc/meminfo")) or "").splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*(kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return out


def nofile(root: str | os.PathLike[str], pid: str = "self") -> tuple[int | None, int | None]:
    for line in (_read(_p(root, f"proc/{pid}/limits")) or "").splitlines():
        if line.startswith("Max open files"):
            parts = line[len("Max open files"):].split()
            vals: list[int | None] = []
            for x in parts[:2]:
                vals.append(None if x == "unlimited" else int(x) if x.isdigit() else None)
            if len(vals) == 2:
                return vals[0], vals[1]
    return None, None


def numa_nodes(root: str | os.PathLike[str]) -> dict[str, list[int]]:
    base = _p(root, "sys/devices/system/node")
    out: dict[str, list[int]] = {}
    try:
        nodes = [n for n in base.iterdir() if re.fullmatch(r"node\d+", n.name)]
    except OSError:
        return out
    for n in sorted(nodes):
        cl = _read(n / "cpulist")
        if cl is not None:
            out[n.name[4:]] = parse_cpulist(cl)
    return out


def read_host(
    root: str | os.PathLike[str] = "/",
    window_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> HostFacts:
    """Read host facts; with ``window_s > 0`` measure rates over that window."""
    h = HostFacts()
    t0 = cpu_times(root)
    v0 = vmstat(root)
    start = time.monotonic()
    if window_s > 0 and t0 is not None:
        sleep(window_s)
        t1 = cpu_times(root)
        v1 = vmstat(root)
        elapsed = max(window_s, time.monotonic() - start) if root == "/" else window_s
        if t1 is not None:
            h.cpu_pct = {k: round(v, 2) for k, v in cpu_split(t0, t1).items()}
        if v0 and v1:
            h.swap_in_per_s = round((v1.get("pswpin", 0) - v0.get("pswpin", 0)) / elapsed, 2)
            h.swap_out_per_s = round((v1.get("pswpout", 0) - v0.get("pswpout", 0)) / elapsed, 2)
        h.window_s = window_s
    stat = _read(_p(root, "proc/stat")) or ""
    ncpu = len(re.findall(r"^cpu\d+ ", stat, re.M))
    h.cpu_count = ncpu or (os.cpu_count() if root == "/" else None)
    status = _read(_p(root, "proc/self/status")) or ""
    m = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M)
    if m:
        h.cpus_allowed = parse_cpulist(m.group(1))
    la = (_read(_p(root, "proc/loadavg")) or "").split()
    try:
        h.load = [float(x) for x in la[:3]]
    except ValueError:
        h.load = []
    h.psi = psi(root)
    mi = meminfo(root)
    h.mem_total_bytes, h.mem_available_bytes = mi.get("MemTotal"), mi.get("MemAvailable")
    h.swap_total_bytes, h.swap_free_bytes = mi.get("SwapTotal"), mi.get("SwapFree")
    h.nofile_soft, h.nofile_hard = nofile(root)
    h.numa_cpus = numa_nodes(root)
    return h


def gpu_numa_nodes(snap: Snapshot, root: str | os.PathLike[str] = "/") -> dict[str, int]:
    """GPU bus id -> NUMA node, from the PCI facts or sysfs (``-1`` = no NUMA info, left out)."""
    out: dict[str, int] = {}
    bus_ids = [g.pci_bus_id for g in snap.gpus if g.pci_bus_id]
    bus_ids = bus_ids or [d.bus_id for d in snap.pci_devices if d.is_gpu]
    by_bus = {d.bus_id: d for d in snap.pci_devices}
    for b in bus_ids:
        node = by_bus[b].numa_node if b in by_bus else None
        if node is None:
            t = _read(_p(root, f"sys/bus/pci/devices/{b}/numa_node"))
            try:
                node = int(t.strip()) if t else None
            except ValueError:
                node = None
        if node is not None and node >= 0:
            out[b] = node
    return out


def proc_affinities(pids: list[int], root: str | os.PathLike[str] = "/") -> dict[str, list[int]]:
    """CPU affinity (Cpus_allowed_list) of the given processes, where visible."""
    out: dict[str, list[int]] = {}
    for pid in pids[:256]:
        st = _read(_p(root, f"proc/{pid}/status")) or ""
        m = re.search(r"^Cpus_allowed_list:\s*(\S+)", st, re.M)
        if m:
            out[str(pid)] = parse_cpulist(m.group(1))
    return out


def collect(snap: Snapshot, opts: CollectOptions) -> None:
    window = 0.0 if opts.quick else opts.host_window_s
    utils: list[float] = [g.utilization_gpu_pct for g in snap.gpus if g.utilization_gpu_pct is not None]
    h = read_host("/", window)
    if window > 0 and snap.nvml_available:
        utils += _sample_gpu_util()
    h.gpu_util_pct = round(sum(utils) / len(utils), 1) if utils else None
    h.gpu_numa = gpu_numa_nodes(snap)
    pids = sorted({p.pid for g in snap.gpus for p in g.processes if p.pid > 0})
    h.proc_cpus = proc_affinities(pids)
    for pid in pids[:256]:
        soft, _hard = nofile("/", str(pid))
        if soft is not None:
            h.proc_nofile[str(pid)] = soft
    snap.host = h


def _sample_gpu_util() -> list[float]:
    """One more utilisation reading at the end of the window (NVML), so one idle instant is not the story."""
    try:
        from gpuclinic.sources.nvml import NvmlReader

        with NvmlReader(call_timeout_s=2.0) as r:
            return [g.utilization_gpu_pct for g in r.sample() if g.utilization_gpu_pct is not None]
    except Exception:
        return []
