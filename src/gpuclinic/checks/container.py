"""Container and Kubernetes GPU setup: visibility, driver capabilities, device selection, /dev/shm, limits."""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpuclinic import lazyre
from gpuclinic.checks import CheckSkipped, check
from gpuclinic.checks._hw import host_threshold
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import ContainerFacts
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding

SRC_TOOLKIT = "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html"
SHM_MIN = 1 << 30
_UUID = lazyre.compile(r"(?:GPU|MIG)-[0-9a-fA-F-]+(?:/\d+/\d+)?", re.I)


def _c(snap: Snapshot) -> ContainerFacts:
    if snap.container is None:
        raise CheckSkipped("no container facts")
    return snap.container


def _uses_cuda(snap: Snapshot) -> bool:
    sw = snap.software
    return bool(sw and any(f.cuda for f in sw.frameworks))


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= (1 << 30) else f"{n / (1 << 20):.0f} MiB"


@check("container.gpu_visibility", codes=["container.no_gpu_visible", "container.driver_capabilities"],
       what="GPU access inside the container")
def visibility(snap: Snapshot) -> Iterator[Finding]:
    c = _c(snap)
    if not c.in_container:
        return
    nvd = c.env.get("NVIDIA_VISIBLE_DEVICES")
    caps = c.env.get("NVIDIA_DRIVER_CAPABILITIES")
    if not snap.gpus and not any(d.startswith("/dev/nvidia") and d[11:].isdigit() for d in c.dev_nvidia):
        intended = nvd not in (None, "", "void", "none") or _uses_cuda(snap)
        ev = [f"inside {c.runtime or 'a container'} ({'; '.join(c.evidence[:2])})",
              f"/dev/nvidia* nodes: {', '.join(c.dev_nvidia) or 'none'}",
              f"NVIDIA_VISIBLE_DEVICES={nvd if nvd is not None else '(unset)'}"]
        if nvd in ("void", "none", ""):
            ev.append("NVIDIA_VISIBLE_DEVICES explicitly gives this container no GPU")
        yield finding(
            "container.no_gpu_visible",
            when=None if intended else "not_intended",
            title="This container has no GPU device",
            evidence=ev,
            data={"NVIDIA_VISIBLE_DEVICES": nvd},
            source=SRC_TOOLKIT,
        )
    if caps is not None:
        toks = {t.strip().lower() for t in caps.split(",") if t.strip()}
        if "all" not in toks and "compute" not in toks:
            yield finding(
                "container.driver_capabilities",
                when="no_compute",
                title="NVIDIA_DRIVER_CAPABILITIES lacks 'compute': CUDA is not available in this container",
                evidence=[
                    f"NVIDIA_DRIVER_CAPABILITIES={caps}",
                    "nvidia-smi works with 'utility' alone, but libcuda is only injected with 'compute'",
                ],
                source=SRC_TOOLKIT,
            )
    elif (
        nvd not in (None, "", "void", "none")
        and snap.software is not None
        and not snap.software.libcuda_versions
    ):
        yield finding(
            "container.driver_capabilities",
            title="NVIDIA_DRIVER_CAPABILITIES is unset and no libcuda was injected",
            evidence=[
                f"NVIDIA_VISIBLE_DEVICES={nvd}",
                "NVIDIA_DRIVER_CAPABILITIES unset (defaults to 'utility')",
                "no libcuda.so.* in the library directories",
            ],
            source=SRC_TOOLKIT,
        )


def parse_visible(value: str) -> list[str]:
    return [t.strip() for t in value.split(",")] if value.strip() else []


@check(
    "container.cuda_visible_devices",
    codes=["container.cuda_visible_devices_invalid", "container.cuda_device_order"],
    what="CUDA_VISIBLE_DEVICES",
)
def cuda_visible(snap: Snapshot) -> Iterator[Finding]:
    c = _c(snap)
    cvd = c.env.get("CUDA_VISIBLE_DEVICES")
    n = len(snap.gpus)
    if cvd is not None:
        toks = parse_visible(cvd)
        problems: list[str] = []
        usable: list[str] = []
        uuids = [g.uuid or "" for g in snap.gpus]
        for i, t in enumerate(toks):
            if t.isdigit():
                if n and int(t) >= n:
                    problems.append(f"index {t} does not exist (this machine shows {n} GPU(s): 0..{n - 1})")
                    break
                if t in usable:
                    problems.append(f"index {t} is listed twice")
                    break
                usable.append(t)
            elif _UUID.fullmatch(t):
                if (
                    t.upper().startswith("GPU-")
                    and uuids
                    and not any(u.lower().startswith(t.lower()) for u in uuids)
                ):
                    problems.append(f"{t} matches no GPU UUID here")
                    break
                usable.append(t)
            else:
                problems.append(f"entry {i + 1} '{t}' is neither an index nor a GPU-/MIG- UUID")
                break
        if not toks:
            problems.append("CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU at all")
        if problems:
            yield finding(
                "container.cuda_visible_devices_invalid",
                title="CUDA_VISIBLE_DEVICES hides GPUs unintentionally",
                evidence=[
                    f"CUDA_VISIBLE_DEVICES={cvd}",
                    *problems,
                    f"CUDA stops at the first invalid entry: usable here: {', '.join(usable) or 'none'}",
                ],
                data={"value": cvd, "usable": usable},
                source="https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars",
            )
    names = {g.name for g in snap.gpus if g.name}
    if len(names) > 1 and c.env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        yield finding(
            "container.cuda_device_order",
            title="Mixed GPU models: cuda:N may not be nvidia-smi GPU N",
            evidence=[
                f"GPU models: {', '.join(sorted(names))}",
                "CUDA_DEVICE_ORDER is not PCI_BUS_ID (CUDA default: FASTEST_FIRST)",
            ],
            source="https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars",
        )


@check("container.shm", codes=["container.shm_small"], what="/dev/shm size")
def shm(snap: Snapshot) -> Iterator[Finding]:
    c = _c(snap)
    if c.shm_bytes is None:
        raise CheckSkipped("/dev/shm not found")
    if c.shm_bytes >= SHM_MIN:
        return
    torch = bool(snap.software and snap.software.framework("torch"))
    yield finding(
        "container.shm_small",
        when=None if (torch or c.in_container) else "not_needed",
        title=f"/dev/shm is only {_gib(c.shm_bytes)}",
        evidence=[
            f"/dev/shm size {c.shm_bytes} bytes (< 1 GiB)",
            "PyTorch DataLoader workers and NCCL's shared-memory transport need more; symptoms: 'Bus error', "
            "'unhandled system error'",
        ],
        data={"shm_bytes": c.shm_bytes},
        source="https://github.com/pytorch/pytorch/issues/5040",
    )


@check(
    "container.pid_namespace",
    codes=["container.pid_namespace"],
    what="GPU processes outside this PID namespace",
)
def pid_namespace(snap: Snapshot) -> Iterator[Finding]:
    c = _c(snap)
    if not snap.gpus:
        raise CheckSkipped("no GPUs read")
    if not c.hidden_gpu_pids or not c.in_container:
        return  # on a host a pid missing from /proc only means the process just exited
    hidden = set(c.hidden_gpu_pids)
    used = 0
    per_gpu: dict[int, int] = {}
    for g in snap.gpus:
        for p in g.processes:
            if p.pid in hidden:
                used += p.used_memory_bytes or 0
                per_gpu[g.index] = per_gpu.get(g.index, 0) + 1
    yield finding(
        "container.pid_namespace",
        title=f"{len(hidden)} GPU process(es) are not visible in this container's PID namespace",
        evidence=[
            f"NVML lists pids {', '.join(map(str, sorted(hidden)[:10]))} which are not in this container's "
            "/proc",
            *(f"GPU {i}: {k} such process(es)" for i, k in sorted(per_gpu.items())),
            f"they hold {_gib(used)} of GPU memory" if used else "memory use unknown",
        ],
        data={"pids": sorted(hidden), "bytes": used},
    )


@check(
    "container.cgroup_limits",
    codes=["container.cgroup_limits", "container.gpu_sharing"],
    what="container CPU/memory limits and GPU sharing",
)
def cgroup_limits(snap: Snapshot) -> Iterator[Finding]:
    c = _c(snap)
    ngpu = len(snap.gpus)
    per_gpu = host_threshold("container_cpu_cores_per_gpu_min")
    if c.cpu_quota_cores is not None and ngpu and c.cpu_quota_cores < per_gpu * ngpu:
        yield finding(
            "container.cgroup_limits",
            title=f"CPU quota of {c.cpu_quota_cores:g} core(s) for {ngpu} GPU(s)",
            evidence=[
                f"cgroup v{c.cgroup_version} CPU quota: {c.cpu_quota_cores:g} cores",
                "data loading, tokenisation and the Python loop need CPU per GPU; throttled containers "
                "starve GPUs",
            ],
            data={"cpu_quota_cores": c.cpu_quota_cores},
        )
    near = host_threshold("container_memory_near_limit_fraction")
    if c.memory_limit_bytes and c.memory_usage_bytes and c.memory_usage_bytes > near * c.memory_limit_bytes:
        yield finding(
            "container.cgroup_limits",
            title=f"Container memory at {100 * c.memory_usage_bytes / c.memory_limit_bytes:.0f}% "
            "of its limit",
            evidence=[
                f"usage {_gib(c.memory_usage_bytes)} of limit {_gib(c.memory_limit_bytes)} (cgroup "
                f"v{c.cgroup_version})"
            ],
            data={"limit": c.memory_limit_bytes, "usage": c.memory_usage_bytes},
        )
    nvd = c.env.get("NVIDIA_VISIBLE_DEVICES", "")
    mig = [t for t in parse_visible(nvd) if t.upper().startswith("MIG-")] if nvd else []
    mig_gpus = [g.index for g in snap.gpus if g.mig_mode_current]
    if mig or mig_gpus:
        yield finding(
            "container.gpu_sharing",
            title="GPU is partitioned with MIG",
            evidence=[
                *(f"MIG device {t}" for t in mig[:4]),
                *(f"GPU {i}: MIG mode enabled" for i in mig_gpus),
            ],
            source="https://docs.nvidia.com/datacenter/tesla/mig-user-guide/index.html",
        )
    elif c.kubernetes and c.hidden_gpu_pids:
        yield finding(
            "container.gpu_sharing",
            title="Pod shares its GPU with other workloads (time-slicing or MPS likely)",
            evidence=[f"{len(c.hidden_gpu_pids)} foreign GPU process(es) visible through NVML"],
            source="https://github.com/NVIDIA/k8s-device-plugin",
        )
