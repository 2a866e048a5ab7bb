"""Software, container and host sources on fake /proc, /sys, /lib/modules and site-packages trees."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpuclinic.sources import container as csrc
from gpuclinic.sources import host as hsrc
from gpuclinic.sources import software as ssrc

# /proc/driver/nvidia/version as printed by real drivers (open and proprietary module)
OPEN_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Aug 22 20:06:56 UTC 2023\nGCC version:  gcc version 12.3.0\n"
)
PROP_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82.01  Wed Oct 27 02:51:05 UTC 2021\n"
    "GCC version:  gcc version 9.3.0 (Ubuntu 9.3.0-17ubuntu1~20.04)\n"
)


def w(root: Path, rel: str, text: str | bytes = "") -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def dist(
    site: Path, name: str, version: str, requires: tuple[str, ...] = (), files: dict[str, str] | None = None
) -> None:
    di = site / f"{name.replace('-', '_')}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    w(di.parent, f"{di.name}/METADATA", meta)
    for rel, text in (files or {}).items():
        w(site, rel, text)


def test_parse_proc_driver_version() -> None:
    assert ssrc.parse_proc_driver_version(OPEN_VERSION) == ("535.104.05", "open")
    assert ssrc.parse_proc_driver_version(PROP_VERSION) == ("470.82.01", "proprietary")
    assert ssrc.parse_proc_driver_version("") == (None, None)


def test_software_tree(tmp_path: Path) -> None:
    r = tmp_path
    w(r, "proc/driver/nvidia/version", PROP_VERSION)
    w(
        r,
        "proc/modules",
        "nvidia_uvm 1437696 0 - Live 0x0\nnvidia 35315712 2 nvidia_uvm, Live 0x0\ni2c_core 1 - Live\n",
    )
    w(r, "proc/sys/kernel/osrelease", "5.15.0-91-generic\n")
    w(r, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n")
    w(
        r,
        "etc/modprobe.d/blacklist-nouveau.conf",
        "# added by installer\nblacklist nouveau\noptions nouveau modeset=0\n",
    )
    w(r, "lib/modules/5.15.0-91-generic/updates/dkms/nvidia.ko", "x")
    w(r, "lib/modules/5.15.0-88-generic/updates/dkms/nvidia.ko.zst", "x")
    (r / "var/lib/dkms/nvidia/470.82.01/5.15.0-91-generic/x86_64").mkdir(parents=True)
    w(r, "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", b"\x06\x00\x00\x00\x01")
    w(r, "proc/1/comm", "systemd\n")
    w(r, "proc/812/comm", "nvidia-persiste\n")
    w(r, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.470.82.01", "")
    w(r, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "")
    w(r, "usr/lib/x86_64-linux-gnu/libcuda.so.470.82.01", "")
    w(r, "usr/local/cuda-12.1/version.json", '{"cuda": {"name": "CUDA SDK", "version": "12.1.1"}}')
    w(r, "usr/local/cuda-12.1/bin/nvcc", "")
    w(r, "usr/local/cuda-11.0/version.txt", "CUDA Version 11.0.228\n")
    os.symlink(r / "usr/local/cuda-12.1", r / "usr/local/cuda")
    w(r, "etc/os-release", 'PRETTY_NAME="Ubuntu 20.04.6 LTS"\nID=ubuntu\nVERSION_ID="20.04"\n')
    site = tmp_path / "site"
    dist(
        site,
        "torch",
        "2.4.1+cu121",
        ('nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux"', "filelock"),
        {
            "torch/version.py": "from typing import Optional\n__version__ = '2.4.1+cu121'\ndebug = False\n"
            "cuda: Optional[str] = '12.1'\ngit_version = 'abc'\nhip: Optional[str] = None\n"
        },
    )
    dist(site, "nvidia-cudnn-cu12", "9.1.0.70")
    dist(site, "jaxlib", "0.4.13+cuda12.cudnn89")
    dist(site, "cupy-cuda12x", "13.3.0")
    dist(
        site,
        "tensorflow",
        "2.17.0",
        files={
            "tensorflow/python/platform/build_info.py": "build_info = {'cpu_compiler': 'gcc', "
            "'cuda_version': '12.3', 'cudnn_version': '8', 'is_cuda_build': True}\n"
        },
    )
    dist(site, "paddlepaddle-gpu", "2.6.1.post120")
    dist(site, "requests", "2.32.0")
    sw = ssrc.read_software(
        r, env={"LD_LIBRARY_PATH": "/usr/local/cuda-12.1/compat:/opt/x"}, python_paths=[str(site)]
    )
    assert sw.proc_driver_version == "470.82.01" and sw.kernel_module_flavor == "proprietary"
    assert sw.kernel_module_loaded is True and sw.nouveau_loaded is False and sw.nouveau_blacklisted is True
    assert sw.running_kernel == "5.15.0-91-generic" and sw.module_for_kernel is True
    assert sw.module_kernels == ["5.15.0-88-generic", "5.15.0-91-generic"]
    assert sw.dkms_status == ["nvidia/470.82.01, 5.15.0-91-generic, x86_64: installed"]
    assert sw.secure_boot is True
    assert sw.persistenced_running is True and sw.fabricmanager_running is False
    assert sw.user_lib_versions == ["470.82.01"] and sw.libcuda_versions == ["470.82.01"]
    assert sw.compat_libs_on_path == ["/usr/local/cuda-12.1/compat"]
    tk = {t.version: t for t in sw.cuda_toolkits}
    assert tk["12.1.1"].nvcc and tk["12.1.1"].is_default and tk["11.0.228"].nvcc is False
    assert (sw.os_id, sw.os_version) == ("ubuntu", "20.04")
    fws = {f.name: f for f in sw.frameworks}
    assert set(fws) == {"torch", "jaxlib", "cupy-cuda12x", "tensorflow", "paddlepaddle-gpu"}
    t = fws["torch"]
    assert t.version == "2.4.1+cu121" and t.cuda == "12.1" and t.cudnn == "9.1.0.70"
    assert t.arch_list_source == "table" and "sm_90" in t.arch_list and "sm_120" not in t.arch_list
    assert t.cuda_wheels == {"nvidia-cudnn-cu12": "9.1.0.70"}
    assert (fws["jaxlib"].cuda, fws["jaxlib"].cudnn) == ("12.x", "8.9")
    assert fws["cupy-cuda12x"].cuda == "12.x"
    assert (fws["tensorflow"].cuda, fws["tensorflow"].cudnn) == ("12.3", "8")
    assert fws["paddlepaddle-gpu"].cuda == "12.0"


def test_software_missing_driver_and_nouveau(tmp_path: Path) -> None:
    r = tmp_path
    w(r, "proc/modules", "nouveau 2297856 3 - Live 0x0\ndrm 1 - Live\n")
    w(r, "proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
    w(r, "lib/modules/6.8.0-40-generic/updates/dkms/nvidia.ko", "x")
    (r / "lib/modules/6.8.0-45-generic/kernel").mkdir(parents=True)
    (r / "sys/firmware").mkdir(parents=True)
    sw = ssrc.read_software(r, env={}, python_paths=[str(tmp_path / "nosite")])
    assert sw.proc_driver_version is None and sw.kernel_module_loaded is False
    assert sw.nouveau_loaded is True and sw.nouveau_blacklisted is False
    assert sw.module_for_kernel is False and sw.module_kernels == ["6.8.0-40-generic"]
    assert sw.secure_boot is False  # legacy BIOS: no EFI
    assert sw.frameworks == []


def test_kernel_cmdline_blacklist(tmp_path: Path) -> None:
    w(tmp_path, "proc/cmdline", "ro quiet modprobe.blacklist=nouveau\n")
    assert ssrc.nouveau_blacklisted(tmp_path)


def test_container_docker_cgroup_v2(tmp_path: Path) -> None:
    r = tmp_path
    w(r, ".dockerenv")
    w(r, "proc/1/cgroup", "0::/\n")
    w(r, "proc/self/cgroup", "0::/\n")
    w(r, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    w(r, "sys/fs/cgroup/cpu.max", "400000 100000\n")
    w(r, "sys/fs/cgroup/memory.max", "17179869184\n")
    w(r, "sys/fs/cgroup/memory.current", "16500000000\n")
    w(r, "dev/shm.size", str(64 * 1024 * 1024))
    w(r, "dev/nvidia0")
    w(r, "dev/nvidiactl")
    env = {
        "NVIDIA_VISIBLE_DEVICES": "GPU-1a2b",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
        "CUDA_VISIBLE_DEVICES": "0,7",
        "HOME": "/root",
    }
    c = csrc.read_container(r, env)
    assert c.in_container and c.runtime == "docker" and not c.kubernetes
    assert c.cgroup_version == 2 and c.cpu_quota_cores == 4.0
    assert c.memory_limit_bytes == 17179869184 and c.memory_usage_bytes == 16500000000
    assert c.shm_bytes == 64 * 1024 * 1024
    assert c.dev_nvidia == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert c.env == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-1a2b",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
        "CUDA_VISIBLE_DEVICES": "0,7",
    }


def test_container_kubernetes_cgroup_v1(tmp_path: Path) -> None:
    r = tmp_path
    w(
        r,
        "proc/1/cgroup",
        "12:memory:/kubepods/burstable/pod1234/abcd\n11:cpu,cpuacct:/kubepods/burstable/pod1234/abcd\n",
    )
    w(r, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    w(r, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "200000\n")
    w(r, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    c = csrc.read_container(r, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert c.in_container and c.kubernetes and c.runtime == "kubernetes"
    assert c.cgroup_version == 1 and c.cpu_quota_cores == 2.0 and c.memory_limit_bytes is None


def test_not_a_container(tmp_path: Path) -> None:
    w(tmp_path, "proc/1/cgroup", "0::/init.scope\n")
    c = csrc.read_container(tmp_path, {})
    assert c.in_container is False and c.runtime is None


def _stat(user: int, system: int, idle: int, iowait: int, steal: int) -> str:
    return (
        f"cpu  {user} 0 {system} {idle} {iowait} 0 0 {steal} 0 0\n"
        "cpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\ncpu2 1 0 1 1 0 0 0 0 0 0\ncpu3 1 0 1 1 0 0 0 0 "
        "0 0\n"
    )


def test_host_window(tmp_path: Path) -> None:
    r = tmp_path
    w(r, "proc/stat", _stat(1000, 500, 8000, 100, 0))
    w(r, "proc/vmstat", "nr_free_pages 1\npswpin 100\npswpout 200\n")
    w(r, "proc/loadavg", "9.50 7.00 5.00 3/400 1234\n")
    w(
        r,
        "proc/pressure/cpu",
        "some avg10=55.00 avg60=30.00 avg300=10.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    )
    w(
        r,
        "proc/pressure/memory",
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=1\nfull avg10=0.20 avg60=0.10 avg300=0.00 total=1\n",
    )
    w(
        r,
        "proc/meminfo",
        "MemTotal:       65536000 kB\nMemFree:  100 kB\nMemAvailable:    1024000 kB\nSwapTotal: 8388608 "
        "kB\nSwapFree: 4194304 kB\n",
    )
    w(
        r,
        "proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units\n"
        "Max open files            1024                 524288               files\n",
    )
    w(r, "proc/self/status", "Name:\tpython\nCpus_allowed_list:\t0-1\n")
    w(r, "sys/devices/system/node/node0/cpulist", "0-1\n")
    w(r, "sys/devices/system/node/node1/cpulist", "2-3\n")

    def fake_sleep(s: float) -> None:  # the second reading: 10 s of 4 CPUs with steal and iowait
        w(r, "proc/stat", _stat(1000 + 1500, 500 + 500, 8000 + 1000, 100 + 500, 500))
        w(r, "proc/vmstat", "pswpin 1100\npswpout 1200\n")

    h = hsrc.read_host(r, 2.0, sleep=fake_sleep)
    assert h.cpu_pct == {"user": 37.5, "system": 12.5, "iowait": 12.5, "steal": 12.5, "idle": 25.0}
    assert h.swap_in_per_s == 500.0 and h.swap_out_per_s == 500.0
    assert h.cpu_count == 4 and h.cpus_allowed == [0, 1] and h.load == [9.5, 7.0, 5.0]
    assert h.psi["cpu.some.avg10"] == 55.0 and h.psi["memory.full.avg10"] == 0.2
    assert h.mem_available_bytes == 1024000 * 1024 and h.swap_free_bytes == 4194304 * 1024
    assert (h.nofile_soft, h.nofile_hard) == (1024, 524288)
    assert h.numa_cpus == {"0": [0, 1], "1": [2, 3]}


def test_host_quick_skips_window(tmp_path: Path) -> None:
    w(tmp_path, "proc/stat", _stat(1, 1, 1, 1, 1))
    h = hsrc.read_host(tmp_path, 0.0, sleep=lambda s: (_ for _ in ()).throw(AssertionError("slept")))
    assert h.window_s is None and h.cpu_pct == {}


def test_parse_cpulist() -> None:
    assert hsrc.parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert hsrc.parse_cpulist("") == []
    assert hsrc.parse_cpulist("x,2") == [2]


def test_active_virtualenv_is_read(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    dist(site, "torch", "2.7.1+cu128", files={"torch/version.py": "cuda = '12.8'\n"})
    paths, _python = ssrc.active_env_paths({"VIRTUAL_ENV": str(tmp_path / "venv")})
    assert paths is not None and paths[0] == str(site)
    sw = ssrc.read_software(tmp_path / "root", env={"VIRTUAL_ENV": str(tmp_path / "venv")})
    t = sw.framework("torch")
    assert t is not None and t.cuda == "12.8" and "sm_120" in t.arch_list
    assert ssrc.active_env_paths({}) == (None, sys.executable)


def test_gpu_process_affinity(tmp_path: Path) -> None:
    w(tmp_path, "proc/4242/status", "Name:\tpython\nCpus_allowed_list:\t8-11,16\n")
    assert hsrc.proc_affinities([4242, 99], tmp_path) == {"4242": [8, 9, 10, 11, 16]}
