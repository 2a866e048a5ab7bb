"""Software facts: driver, kernel module, CUDA toolkits, Python GPU frameworks, containers.

Owned by the software area (issue 3).  Every field is optional: ``None`` means "not read", an empty
list means "read, none found".
"""

from __future__ import annotations

from typing import Any

from gpuclinic.record import field, record


@record
class CudaToolkit:
    """A CUDA toolkit installed on disk (``/usr/local/cuda-12.4``)."""

    path: str
    version: str | None = None  # "12.4.131" from version.json / version.txt
    nvcc: bool = False  # bin/nvcc exists
    is_default: bool = False  # /usr/local/cuda points here


@record
class Framework:
    """A GPU framework in the active Python environment, read from its metadata and files."""

    name: str  # torch | jax | jaxlib | jax-cuda12-plugin | tensorflow | cupy-cuda12x | paddlepaddle-gpu | ...
    version: str
    cuda: str | None = None  # CUDA it was built for ("12.1")
    cudnn: str | None = None
    arch_list: list[str] = field(default_factory=list)  # ["sm_80", "compute_90"]
    arch_list_source: str | None = None  # "import" (--deep) | "table" (official wheel list) | None
    location: str | None = None
    cuda_wheels: dict[str, str] = field(default_factory=dict)  # nvidia-* pip wheels it depends on -> version


@record
class SoftwareFacts:
    """Driver, CUDA and framework versions: what the compatibility checks compare."""

    driver_version: str | None = None  # from NVML or /proc/driver/nvidia/version
    # Verbatim nvidia-smi error statements seen (live or in evidence), e.g. "Failed to initialize NVML:
    # Driver/library version mismatch", "NVIDIA-SMI has failed because it couldn't communicate with the
    # NVIDIA driver", "No devices were found", "Unable to determine the device handle for GPU ...".
    nvidia_smi_errors: list[str] = field(default_factory=list)
    # kernel side
    proc_driver_version: str | None = None  # /proc/driver/nvidia/version: the loaded kernel module
    proc_driver_text: str | None = None
    kernel_module_loaded: bool | None = None  # "nvidia" in /proc/modules
    kernel_module_flavor: str | None = None  # open | proprietary
    nouveau_loaded: bool | None = None
    nouveau_blacklisted: bool | None = None
    running_kernel: str | None = None  # uname -r
    module_for_kernel: bool | None = None  # an nvidia.ko exists under /lib/modules/<running kernel>
    module_kernels: list[str] = field(default_factory=list)  # kernels that do have an nvidia module
    dkms_status: list[str] = field(default_factory=list)
    secure_boot: bool | None = None
    # user space
    user_lib_versions: list[str] = field(default_factory=list)  # libnvidia-ml.so.X.Y.Z found on disk
    libcuda_versions: list[str] = field(default_factory=list)
    compat_libs_on_path: list[str] = field(default_factory=list)  # cuda-compat dirs on LD_LIBRARY_PATH
    # daemons
    persistenced_running: bool | None = None
    fabricmanager_running: bool | None = None
    fabricmanager_installed: bool | None = None
    nvswitch_count: int | None = None
    # toolkits and frameworks
    cuda_toolkits: list[CudaToolkit] = field(default_factory=list)
    frameworks: list[Framework] = field(default_factory=list)
    python: str | None = None
    os_id: str | None = None  # "ubuntu"
    os_version: str | None = None  # "22.04"
    os_pretty: str | None = None
    arch: str | None = None  # x86_64 | aarch64
    extra: dict[str, Any] = field(default_factory=dict)

    def framework(self, name: str) -> Framework | None:
        return next((f for f in self.frameworks if f.name == name), None)


@record
class ContainerFacts:
    """Whether we run in a container, which runtime, and what it exposes (GPU devices, env, limits)."""

    in_container: bool | None = None
    runtime: str | None = None  # docker | podman | containerd | kubernetes | lxc | unknown
    kubernetes: bool = False
    evidence: list[str] = field(default_factory=list)  # why we think so
    env: dict[str, str] = field(default_factory=dict)  # NVIDIA_*/CUDA_* variables as set
    dev_nvidia: list[str] = field(default_factory=list)  # /dev/nvidia* nodes present
    shm_bytes: int | None = None
    cgroup_version: int | None = None
    cpu_quota_cores: float | None = None
    memory_limit_bytes: int | None = None
    memory_usage_bytes: int | None = None
    hidden_gpu_pids: list[int] = field(default_factory=list)  # GPU processes whose pid is not in our /proc
    extra: dict[str, Any] = field(default_factory=dict)
