"""Host items: CPUs per GPU, RAM vs GPU memory, memory copy bandwidth, dataset-disk reads,
/dev/shm, NUMA affinity of this process to the GPUs.

Why: a rented box with fast GPUs and a slow disk, a 64 MB /dev/shm or too few cores trains slowly
all the same; these are the host-side surprises a renter can measure in seconds.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from gpuclinic.accept.model import Item, skipped
from gpuclinic.accept.specs import threshold, threshold_source
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.host import HostFacts

GiB = 1024 ** 3


@dataclass
class DiskResult:
    seq_mbs: float | None = None
    rand_iops: float | None = None
    tool: str = ""
    note: str = ""
    error: str | None = None


def memcpy_gbs(mb: int = 256, secs: float = 0.5) -> float:
    """Single-thread host memory copy bandwidth (read + write), via bytes slicing (memcpy)."""
    src = bytearray(os.urandom(1 << 20)) * mb
    dst = bytearray(len(src))
    mv_src, mv_dst = memoryview(src), memoryview(dst)
    n, t0 = 0, time.perf_counter()
    while True:
        mv_dst[:] = mv_src
        n += 1
        el = time.perf_counter() - t0
        if el >= secs and n >= 2:
            return 2 * len(src) * n / el / 1e9


def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def disk_fallback(directory: str, mb: int, rand_s: float = 1.0) -> DiskResult:
    """Sequential 1 MiB reads and random 4 KiB reads of a fresh temp file, page cache dropped."""
    fd, path = tempfile.mkstemp(prefix=".gpuclinic-accept-", dir=directory)
    try:
        chunk = os.urandom(1 << 20)
        for _ in range(mb):
            os.write(fd, chunk)
        os.fsync(fd)
        _drop_cache(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        t0 = time.perf_counter()
        got = 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            got += len(b)
        seq = got / (time.perf_counter() - t0) / 1e6
        _drop_cache(fd)
        rng = random.Random(15)
        blocks = (mb << 20) // 4096
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < rand_s:
            os.pread(fd, 4096, rng.randrange(blocks) * 4096)
            n += 1
        iops = n / (time.perf_counter() - t0)
        return DiskResult(seq, iops, "python", "temp file, page cache dropped with posix_fadvise")
    finally:
        os.close(fd)
        os.unlink(path)


def disk_fio(fio: str, directory: str, mb: int, rand_s: float = 2.0) -> DiskResult:
    """fio sequential read (1 MiB) and random read (4 KiB) of a temp file, O_DIRECT when allowed."""
    fd, path = tempfile.mkstemp(prefix=".gpuclinic-accept-fio-", dir=directory)
    os.close(fd)
    try:
        def run(rw: str, bs: str, direct: int, extra: list[str]) -> dict[str, Any]:
            cmd = [fio, "--name=accept", f"--filename={path}", f"--rw={rw}", f"--bs={bs}", f"--size={mb}M",
                   f"--direct={direct}", "--ioengine=psync", "--output-format=json", *extra]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                raise RuntimeError((p.stderr or p.stdout).strip().splitlines()[-1:] or ["fio failed"])
            out = p.stdout[p.stdout.find("{"):]
            job = json.loads(out)["jobs"][0]["read"]
            return dict(job)

        direct = 1
        try:
            seq = run("read", "1M", 1, [])
        except RuntimeError:
            direct = 0  # tmpfs and some overlay filesystems refuse O_DIRECT
            seq = run("read", "1M", 0, [])
        rnd = run("randread", "4k", direct, [f"--runtime={rand_s:g}", "--time_based"])
        return DiskResult(float(seq["bw_bytes"]) / 1e6, float(rnd["iops"]), "fio",
                          "O_DIRECT" if direct else "buffered (O_DIRECT refused)")
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def measure_disk(directory: str, mb: int) -> DiskResult:
    fio = shutil.which("fio")
    if fio:
        try:
            return disk_fio(fio, directory, mb)
        except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError, KeyError, IndexError) as e:
            r = disk_fallback(directory, mb)
            r.note += f"; fio failed ({e})"
            return r
    return disk_fallback(directory, mb)


def score_disk(d: DiskResult, directory: str) -> list[Item]:
    if d.error or d.seq_mbs is None:
        return [
            skipped(
                "host.disk.seq",
                "dataset disk sequential read",
                "host",
                d.error or "not measured",
                None,
                "MB/s",
            )
        ]
    warn, fail = threshold("disk_seq_read_warn_mbs"), threshold("disk_seq_read_fail_mbs")
    st = "fail" if d.seq_mbs < fail else "warn" if d.seq_mbs < warn else "pass"
    items = [
        Item(
            "host.disk.seq",
            "dataset disk sequential read",
            "host",
            st,
            None,
            round(d.seq_mbs, 1),
            warn,
            "MB/s",
            f"data loader floor ({directory})",
            threshold_source("disk_seq_read_warn_mbs"),
            f"{d.tool}: {d.note}; warn < {warn:g}, fail < {fail:g} MB/s",
        )
    ]
    if d.rand_iops is not None:
        items.append(
            Item(
                "host.disk.rand",
                "dataset disk random 4 KiB read",
                "host",
                "pass",
                None,
                round(d.rand_iops),
                None,
                "IOPS",
                "measured only",
                "",
                f"{d.tool}: {d.note}",
            )
        )
    return items


def shm_bytes(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def score_shm(size: int | None) -> Item:
    if size is None:
        return skipped("host.shm", "/dev/shm size", "host", "/dev/shm is missing", None, "GiB")
    lim = threshold("shm_warn_bytes")
    st = "warn" if size < lim else "pass"
    return Item(
        "host.shm",
        "/dev/shm size",
        "host",
        st,
        None,
        round(size / GiB, 2),
        round(lim / GiB, 2),
        "GiB",
        "DataLoader workers share tensors through it",
        threshold_source("shm_warn_bytes"),
        "too small for multi-process data loading" if st == "warn" else "",
    )


def score_cpu(h: HostFacts | None, ngpus: int, model: str | None) -> Item:
    if h is None or not h.cpu_count:
        return skipped("host.cpu", "CPUs per GPU", "host", "CPU count unknown")
    usable = len(h.cpus_allowed) or h.cpu_count
    if not ngpus:
        return Item(
            "host.cpu",
            "CPUs",
            "host",
            "pass",
            None,
            usable,
            None,
            "CPUs",
            "no GPUs to share them",
            "",
            model or "",
        )
    per = usable / ngpus
    lim = threshold("cpus_per_gpu_warn")
    st = "warn" if per < lim else "pass"
    return Item(
        "host.cpu",
        "CPUs per GPU",
        "host",
        st,
        None,
        round(per, 1),
        lim,
        "CPUs/GPU",
        "DataLoader workers per GPU",
        threshold_source("cpus_per_gpu_warn"),
        f"{usable} usable CPUs for {ngpus} GPUs" + (f"; {model}" if model else ""),
    )


def score_ram(h: HostFacts | None, gpus: list[GpuFacts]) -> Item:
    gpu_mem = sum(g.memory_total_bytes or 0 for g in gpus)
    if h is None or not h.mem_total_bytes:
        return skipped("host.ram", "host RAM vs GPU memory", "host", "memory size unknown", None, "GiB")
    lim = threshold("host_mem_per_gpu_mem_warn")
    if not gpu_mem:
        return Item(
            "host.ram",
            "host RAM",
            "host",
            "pass",
            None,
            round(h.mem_total_bytes / GiB, 1),
            None,
            "GiB",
            "no GPU memory figure",
            "",
            "measured only",
        )
    st = "warn" if h.mem_total_bytes < lim * gpu_mem else "pass"
    return Item(
        "host.ram",
        "host RAM vs GPU memory",
        "host",
        st,
        None,
        round(h.mem_total_bytes / GiB, 1),
        round(lim * gpu_mem / GiB, 1),
        "GiB",
        "total GPU memory",
        threshold_source("host_mem_per_gpu_mem_warn"),
        f"{gpu_mem / GiB:.0f} GiB of GPU memory",
    )


def score_memcpy(gbs: float | None, why: str = "") -> Item:
    if gbs is None:
        return skipped(
            "host.membw", "host memory copy (1 thread)", "host", why or "not measured", None, "GB/s"
        )
    lim = threshold("host_memcpy_warn_gbs")
    return Item(
        "host.membw",
        "host memory copy (1 thread)",
        "host",
        "warn" if gbs < lim else "pass",
        None,
        round(gbs, 1),
        lim,
        "GB/s",
        "floor",
        threshold_source("host_memcpy_warn_gbs"),
        "",
    )


def score_numa(h: HostFacts | None, gpus: list[GpuFacts]) -> Item:
    if h is None or not h.gpu_numa or not h.numa_cpus:
        return skipped("host.numa", "NUMA affinity to the GPUs", "host", "no NUMA information for the GPUs")
    allowed = set(h.cpus_allowed)
    nodes = sorted(set(h.gpu_numa.values()))
    far = [n for n in nodes if allowed and not allowed & set(h.numa_cpus.get(str(n), []))]
    text = ", ".join(
        f"node {n}: GPUs {','.join(str(g.index) for g in gpus if h.gpu_numa.get(g.pci_bus_id or '') == n)}"
        for n in nodes
    )
    if far:
        return Item(
            "host.numa",
            "NUMA affinity to the GPUs",
            "host",
            "warn",
            None,
            f"{len(nodes) - len(far)}/{len(nodes)} nodes",
            f"{len(nodes)}/{len(nodes)} nodes",
            "",
            "",
            "",
            f"this process may not run on NUMA node(s) {far}: data for their GPUs crosses the socket link; "
            f"widen the CPU set (taskset/cgroup); {text}",
        )
    return Item(
        "host.numa",
        "NUMA affinity to the GPUs",
        "host",
        "pass",
        None,
        f"{len(nodes)}/{len(nodes)} nodes",
        f"{len(nodes)}/{len(nodes)} nodes",
        "",
        "reachable GPU NUMA nodes",
        "",
        text,
    )


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None
