"""Container / Kubernetes facts: are we in one, what GPU setup did the runtime give us, what limits apply.

Read from ``/.dockerenv``, ``/run/.containerenv``, ``/proc/1/cgroup``, ``/proc/self/mountinfo``, cgroup
files, ``/dev`` and the environment, under a ``root`` so tests use fake trees.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gpuclinic.facts.software import ContainerFacts
from gpuclinic.sources._fs import read_text as _read
from gpuclinic.sources._fs import under as _p

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions
    from gpuclinic.facts.snapshot import Snapshot

WHAT = "container and Kubernetes GPU setup"
ENV_KEYS = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_REQUIRE_CUDA",
    "NVIDIA_DISABLE_REQUIRE",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_VERSION",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "KUBERNETES_SERVICE_HOST",
    "PYTORCH_CUDA_ALLOC_CONF",
    "LD_LIBRARY_PATH",
)
_CGROUP_MARKERS = (
    ("kubepods", "kubernetes"),
    ("docker", "docker"),
    ("libpod", "podman"),
    ("containerd", "containerd"),
    ("cri-containerd", "containerd"),
    ("lxc", "lxc"),
    ("garden", "garden"),
)


def detect(root: str | os.PathLike[str], env: Mapping[str, str]) -> tuple[bool, str | None, bool, list[str]]:
    """(in_container, runtime, kubernetes, evidence lines)."""
    ev: list[str] = []
    runtime: str | None = None
    k8s = bool(env.get("KUBERNETES_SERVICE_HOST"))
    if k8s:
        ev.append("KUBERNETES_SERVICE_HOST is set")
    if _p(root, ".dockerenv").exists():
        ev.append("/.dockerenv exists")
        runtime = "docker"
    if _p(root, "run/.containerenv").exists():
        ev.append("/run/.containerenv exists")
        runtime = "podman"
    cg = _read(_p(root, "proc/1/cgroup")) or ""
    for line in cg.splitlines():
        low = line.lower()
        for marker, rt in _CGROUP_MARKERS:
            if marker in low:
                ev.append(f"/proc/1/cgroup: {line.strip()[:120]}")
                if rt == "kubernetes":
                    k8s = True
                elif runtime is None:
                    runtime = rt
                break
        else:
            continue
        break
    cont = (_read(_p(root, "run/systemd/container")) or "").strip()
    if cont:
        ev.append(f"/run/systemd/container: {cont}")
        runtime = runtime or cont
    envc = env.get("container")
    if envc:
        ev.append(f"container={envc}")
        runtime = runtime or envc
    if k8s:
        runtime = "kubernetes"
    return bool(ev), runtime, k8s, ev


def shm_size(root: str | os.PathLike[str]) -> int | None:
    """Size of /dev/shm in bytes (statvfs on the real fs; a fake tree may carry ``dev/shm.size``)."""
    fake = _read(_p(root, "dev/shm.size"))
    if fake is not None:
        try:
            return int(fake.strip())
        except ValueError:
            return None
    p = _p(root, "dev/shm")
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


Limits = tuple[int | None, float | None, int | None, int | None]


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def cgroup_limits(root: str | os.PathLike[str]) -> Limits:
    """(cgroup version, CPU quota in cores, memory limit bytes, memory usage bytes) of our own cgroup."""
    base = _p(root, "sys/fs/cgroup")
    own = "/"
    for line in (_read(_p(root, "proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0":
            own = parts[2].strip() or "/"
    if (base / "cgroup.controllers").exists():
        return _cgroup_v2([base / own.lstrip("/"), base] if own != "/" else [base])
    if (base / "memory").exists() or (base / "cpu").exists() or (base / "cpu,cpuacct").exists():
        return _cgroup_v1(base)
    return None, None, None, None


def _cgroup_v2(cands: list[Path]) -> Limits:
    """Our own cgroup first, then the root: the first directory that sets a limit wins."""
    cpu: float | None = None
    mem = usage = None
    for d in cands:
        cmax = _read(d / "cpu.max")
        if cpu is None and cmax:
            q, _, period = cmax.strip().partition(" ")
            if q != "max":
                try:
                    cpu = int(q) / int(period or "100000")
                except ValueError:
                    pass
        mm = _read(d / "memory.max")
        if mem is None and mm and mm.strip() != "max":
            mem = _int(mm)
        if usage is None:
            usage = _int(_read(d / "memory.current"))
    return 2, cpu, mem, usage


def _cgroup_v1(base: Path) -> Limits:
    cpu: float | None = None
    mem = None
    for cpudir in ("cpu,cpuacct", "cpu"):
        quota = _read(base / cpudir / "cpu.cfs_quota_us")
        pr = _read(base / cpudir / "cpu.cfs_period_us")
        if quota and pr:
            try:
                qi, pi = int(quota), int(pr)
                if qi > 0 and pi > 0:
                    cpu = qi / pi
            except ValueError:
                pass
            break
    v = _int(_read(base / "memory" / "memory.limit_in_bytes"))
    if v is not None and v < (1 << 60):  # "unlimited" is a huge page-aligned number
        mem = v
    return 1, cpu, mem, _int(_read(base / "memory" / "memory.usage_in_bytes"))


def dev_nvidia(root: str | os.PathLike[str]) -> list[str]:
    try:
        return sorted("/dev/" + n for n in os.listdir(_p(root, "dev")) if n.startswith("nvidia"))
    except OSError:
        return []


def visible_pids(root: str | os.PathLike[str]) -> set[int] | None:
    try:
        return {int(e) for e in os.listdir(_p(root, "proc")) if e.isdigit()}
    except OSError:
        return None


def read_container(
    root: str | os.PathLike[str] = "/", env: Mapping[str, str] | None = None
) -> ContainerFacts:
    env = os.environ if env is None else env
    c = ContainerFacts()
    c.in_container, c.runtime, c.kubernetes, c.evidence = detect(root, env)
    c.env = {k: env[k] for k in ENV_KEYS if k in env}
    c.dev_nvidia = dev_nvidia(root)
    c.shm_bytes = shm_size(root)
    c.cgroup_version, c.cpu_quota_cores, c.memory_limit_bytes, c.memory_usage_bytes = cgroup_limits(root)
    return c


def hidden_gpu_pids(snap: Snapshot, pids: set[int] | None) -> list[int]:
    """GPU processes NVML reports whose pid is not in our /proc: another PID namespace uses the GPU."""
    if pids is None:
        return []
    out: set[int] = set()
    for g in snap.gpus:
        for p in g.processes:
            if p.pid > 0 and p.pid not in pids:
                out.add(p.pid)
    return sorted(out)


def collect(snap: Snapshot, opts: CollectOptions) -> None:
    c = read_container()
    c.hidden_gpu_pids = hidden_gpu_pids(snap, visible_pids("/"))
    snap.container = c
