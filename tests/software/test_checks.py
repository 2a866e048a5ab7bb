"""Software, container and host checks on constructed snapshots (the same shape the sources produce)."""

from __future__ import annotations

from gpuclinic.diagnose import diagnose
from gpuclinic.facts.gpu import GpuFacts, GpuProcess, PciDevice
from gpuclinic.facts.host import HostFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import ContainerFacts, CudaToolkit, Framework, SoftwareFacts
from gpuclinic.model import Finding, Severity, Skipped


def torch_fw(version: str, cuda: str | None, arch: list[str] | None = None) -> Framework:
    from gpuclinic.knowledge import compat

    f = Framework(name="torch", version=version, cuda=cuda)
    if arch is None:
        tb = compat.parse_torch_version(version, cuda)
        al = compat.torch_arch_list(tb.version, tb.variant) if tb else None
        f.arch_list, f.arch_list_source = (al.names(), "table") if al else ([], None)
    else:
        f.arch_list, f.arch_list_source = arch, "import"
    return f


def gpu(i: int, name: str, cc: str | None = None, **kw: object) -> GpuFacts:
    return GpuFacts(index=i, name=name, compute_capability=cc, pci_bus_id=f"0000:{0x10 + i:02x}:00.0", **kw)  # type: ignore[arg-type]


def host_sw(**kw: object) -> SoftwareFacts:
    base: dict[str, object] = {
        "kernel_module_loaded": True,
        "running_kernel": "5.15.0-91-generic",
        "nouveau_loaded": False,
        "nouveau_blacklisted": True,
        "module_for_kernel": True,
        "os_id": "ubuntu",
        "os_version": "22.04",
        "persistenced_running": True,
        "fabricmanager_running": False,
    }
    base.update(kw)
    return SoftwareFacts(**base)  # type: ignore[arg-type]


def run(snap: Snapshot) -> tuple[list[Finding], list[Skipped]]:
    r = diagnose(snap)
    return r.findings, r.skipped


def codes(fs: list[Finding]) -> list[str]:
    return [f.code for f in fs]


def test_driver_470_with_torch_cu121_gives_the_exact_fix() -> None:
    snap = Snapshot(
        driver_version="470.82.01",
        gpus=[gpu(0, "NVIDIA A10G", "8.6")],
        software=host_sw(
            proc_driver_version="470.82.01",
            user_lib_versions=["470.82.01"],
            frameworks=[torch_fw("2.4.1+cu121", "12.1")],
        ),
    )
    fs, _ = run(snap)
    f = next(f for f in fs if f.code == "driver.too_old_for_cuda")
    assert f.severity == Severity.CRITICAL
    assert "driver 470.82.01 supports CUDA <= 11.4; torch 2.4.1+cu121 needs >= 525.60.13" in f.remedy
    assert "`pip install torch==2.4.1 --index-url https://download.pytorch.org/whl/cu118`" in f.remedy
    assert "upgrade the driver to >= 530.30.02" in f.remedy  # full compatibility, not just the MVC floor


def test_driver_525_with_cu121_is_only_info() -> None:
    snap = Snapshot(
        driver_version="525.60.13",
        gpus=[gpu(0, "NVIDIA A100-SXM4-80GB", "8.0")],
        software=host_sw(frameworks=[torch_fw("2.4.1+cu121", "12.1")]),
    )
    fs, _ = run(snap)
    f = next(f for f in fs if f.code == "driver.too_old_for_cuda")
    assert f.severity == Severity.INFO and "530.30.02" in f.remedy
    assert "cuda.arch_not_supported" not in codes(fs)


def test_new_driver_no_finding() -> None:
    snap = Snapshot(
        driver_version="550.54.15",
        gpus=[gpu(0, "NVIDIA H100 80GB HBM3", "9.0")],
        software=host_sw(frameworks=[torch_fw("2.4.1+cu124", "12.4")]),
    )
    assert "driver.too_old_for_cuda" not in codes(run(snap)[0])


def test_rtx5090_with_cu126_wheel() -> None:
    snap = Snapshot(
        driver_version="570.124.06",
        gpus=[gpu(0, "NVIDIA GeForce RTX 5090", "12.0")],
        software=host_sw(frameworks=[torch_fw("2.6.0+cu126", "12.6")]),
    )
    fs, _ = run(snap)
    f = next(f for f in fs if f.code == "cuda.arch_not_supported")
    assert f.severity == Severity.CRITICAL and f.gpu is not None and f.gpu.index == 0
    assert "torch >= 2.7 with cu128" in f.remedy and "whl/cu128" in f.remedy


def test_v100_with_cu128_of_2_7_suggests_cu126_of_same_release() -> None:
    snap = Snapshot(
        driver_version="570.124.06",
        gpus=[gpu(0, "Tesla V100-SXM2-32GB")],  # cc from the name table
        software=host_sw(frameworks=[torch_fw("2.7.1+cu128", "12.8")]),
    )
    f = next(f for f in run(snap)[0] if f.code == "cuda.arch_not_supported")
    assert "`pip install torch==2.7.1 --index-url https://download.pytorch.org/whl/cu126`" in f.remedy


def test_ptx_only_with_minor_version_driver_is_critical() -> None:
    arch = ["sm_80", "compute_80"]
    ok = Snapshot(
        driver_version="560.35.03",
        gpus=[gpu(0, "NVIDIA H100 80GB HBM3", "9.0")],
        software=host_sw(frameworks=[torch_fw("2.4.1+cu124", "12.4", arch)]),
    )
    f = next(f for f in run(ok)[0] if f.code == "cuda.arch_not_supported")
    assert f.severity == Severity.WARNING and f.data["via"] == "ptx"
    bad = Snapshot(
        driver_version="535.104.05",
        gpus=[gpu(0, "NVIDIA H100 80GB HBM3", "9.0")],
        software=host_sw(frameworks=[torch_fw("2.4.1+cu124", "12.4", arch)]),
    )
    f2 = next(f for f in run(bad)[0] if f.code == "cuda.arch_not_supported")
    assert f2.severity == Severity.CRITICAL and "minor-version" in f2.evidence[0]


def test_toolkit_cannot_compile_for_gpu() -> None:
    snap = Snapshot(
        driver_version="580.65.06",
        gpus=[gpu(0, "Tesla V100-SXM2-32GB", "7.0")],
        software=host_sw(cuda_toolkits=[CudaToolkit("/usr/local/cuda-13.0", "13.0.48", True, True)]),
    )
    f = next(f for f in run(snap)[0] if f.code == "cuda.toolkit_arch_unsupported")
    assert "7.5..12.1" in f.evidence[0]


def test_library_mismatch() -> None:
    snap = Snapshot(
        software=host_sw(
            proc_driver_version="535.104.05",
            user_lib_versions=["535.129.03"],
            nvidia_smi_errors=["Failed to initialize NVML: Driver/library version mismatch"],
        )
    )
    snap.skip("GPUs through NVML", "NVML: Driver/library version mismatch")
    f = next(f for f in run(snap)[0] if f.code == "driver.library_mismatch")
    assert f.severity == Severity.CRITICAL and "535.104.05" in f.title and "535.129.03" in f.title
    assert "reboot" in f.remedy.lower()


def test_not_loaded_module_missing_and_nouveau() -> None:
    snap = Snapshot(
        pci_read=True,
        pci_devices=[PciDevice("0000:3b:00.0", device_id="0x2330", class_code="0x030200", driver="nouveau")],
        software=host_sw(
            kernel_module_loaded=False,
            module_for_kernel=False,
            module_kernels=["5.15.0-88-generic"],
            nouveau_loaded=True,
            nouveau_blacklisted=False,
            dkms_status=["nvidia/535.104.05: added"],
        ),
    )
    snap.skip("GPUs through NVML", "NVML: Driver Not Loaded")
    fs, _ = run(snap)
    c = codes(fs)
    assert {"driver.not_loaded", "driver.module_missing_for_kernel", "driver.nouveau_conflict"} <= set(c)
    nl = next(f for f in fs if f.code == "driver.not_loaded")
    assert nl.severity == Severity.CRITICAL and "0000:3b:00.0 (driver: nouveau)" in " ".join(nl.evidence)
    mm = next(f for f in fs if f.code == "driver.module_missing_for_kernel")
    assert "linux-headers-5.15.0-91-generic" in mm.remedy
    assert diagnose(snap).exit_code == 2


def test_cpu_only_machine_says_why() -> None:
    snap = Snapshot(
        pci_read=True,
        software=host_sw(kernel_module_loaded=False, module_for_kernel=None, nouveau_loaded=False),
        container=ContainerFacts(in_container=False),
    )
    snap.skip("GPUs through NVML", "NVML library not found: no NVIDIA driver installed?")
    fs, _ = run(snap)
    f = next(f for f in fs if f.code == "gpu.none_detected")
    assert f.severity == Severity.INFO and "NVML library not found" in f.evidence[0]
    assert "no NVIDIA GPU on the PCI bus" in f.evidence
    assert diagnose(snap).exit_code == 0


def test_fabric_manager_missing_on_nvswitch_box() -> None:
    gpus = [gpu(i, "NVIDIA H100 80GB HBM3", "9.0", persistence_mode=True) for i in range(8)]
    snap = Snapshot(
        driver_version="535.104.05",
        gpus=gpus,
        software=host_sw(nvswitch_count=4, fabricmanager_installed=False),
    )
    f = next(f for f in run(snap)[0] if f.code == "driver.fabric_manager_missing")
    assert "nvidia-fabricmanager-535=535.104.05-1" in f.remedy
    snap.software.fabricmanager_running = True  # type: ignore[union-attr]
    assert "driver.fabric_manager_missing" not in codes(run(snap)[0])


def test_persistence_off_is_info() -> None:
    snap = Snapshot(
        driver_version="550.54.15",
        gpus=[gpu(0, "NVIDIA L4", "8.9", persistence_mode=False)],
        software=host_sw(persistenced_running=False),
    )
    f = next(f for f in run(snap)[0] if f.code == "driver.persistence_off")
    assert f.severity == Severity.INFO


def test_os_unsupported() -> None:
    snap = Snapshot(software=host_sw(os_id="ubuntu", os_version="20.04", os_pretty="Ubuntu 20.04.6 LTS"))
    f = next(f for f in run(snap)[0] if f.code == "os.unsupported")
    assert f.severity == Severity.WARNING
    snap2 = Snapshot(software=host_sw(os_id="ubuntu", os_version="24.04"))
    assert "os.unsupported" not in codes(run(snap2)[0])


def test_container_capabilities_shm_cvd() -> None:
    c = ContainerFacts(
        in_container=True,
        runtime="docker",
        evidence=["/.dockerenv exists"],
        shm_bytes=64 << 20,
        env={
            "NVIDIA_VISIBLE_DEVICES": "all",
            "NVIDIA_DRIVER_CAPABILITIES": "utility",
            "CUDA_VISIBLE_DEVICES": "0,5",
        },
        dev_nvidia=["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"],
    )
    snap = Snapshot(
        driver_version="550.54.15",
        gpus=[gpu(0, "NVIDIA L4", "8.9"), gpu(1, "NVIDIA L4", "8.9")],
        software=SoftwareFacts(frameworks=[torch_fw("2.4.1+cu124", "12.4")]),
        container=c,
    )
    fs, _ = run(snap)
    c2 = codes(fs)
    assert "container.driver_capabilities" in c2 and "container.shm_small" in c2
    cv = next(f for f in fs if f.code == "container.cuda_visible_devices_invalid")
    assert any("index 5 does not exist" in e for e in cv.evidence)
    assert "container.no_gpu_visible" not in c2


def test_container_without_gpu() -> None:
    c = ContainerFacts(
        in_container=True,
        runtime="docker",
        evidence=["/.dockerenv exists"],
        shm_bytes=8 << 30,
        env={"NVIDIA_VISIBLE_DEVICES": "void"},
    )
    snap = Snapshot(software=SoftwareFacts(frameworks=[torch_fw("2.4.1+cu121", "12.1")]), container=c)
    f = next(f for f in run(snap)[0] if f.code == "container.no_gpu_visible")
    assert f.severity == Severity.WARNING and "--gpus all" in f.remedy


def test_pid_namespace_and_mixed_models() -> None:
    g0 = gpu(
        0, "NVIDIA A100-SXM4-80GB", "8.0", processes=[GpuProcess(pid=999999, used_memory_bytes=20 << 30)]
    )
    g1 = gpu(1, "NVIDIA H100 80GB HBM3", "9.0")
    c = ContainerFacts(in_container=True, kubernetes=True, hidden_gpu_pids=[999999], env={})
    snap = Snapshot(gpus=[g0, g1], container=c)
    fs, _ = run(snap)
    pn = next(f for f in fs if f.code == "container.pid_namespace")
    assert pn.severity == Severity.INFO and "20.00 GiB" in " ".join(pn.evidence)
    snap.container = ContainerFacts(in_container=False, hidden_gpu_pids=[999999])
    assert "container.pid_namespace" not in codes(run(snap)[0])
    assert "container.cuda_device_order" in codes(fs) and "container.gpu_sharing" in codes(fs)


def test_host_checks() -> None:
    h = HostFacts(
        cpu_count=8,
        cpus_allowed=list(range(0, 4)),
        window_s=2.0,
        cpu_pct={"user": 80.0, "system": 12.0, "iowait": 25.0, "steal": 9.0, "idle": 0.0},
        load=[40.0, 30.0, 20.0],
        psi={"cpu.some.avg10": 60.0, "memory.full.avg10": 7.5, "io.full.avg10": 1.0},
        swap_in_per_s=300.0,
        swap_out_per_s=50.0,
        mem_total_bytes=64 << 30,
        mem_available_bytes=1 << 30,
        nofile_soft=1024,
        nofile_hard=4096,
        numa_cpus={"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]},
        gpu_numa={"0000:10:00.0": 1},
        gpu_util_pct=20.0,
    )
    snap = Snapshot(gpus=[gpu(0, "NVIDIA L4", "8.9", processes=[GpuProcess(pid=1)])], host=h)
    got = set(codes(run(snap)[0]))
    assert {
        "host.cpu_steal",
        "host.iowait",
        "host.load",
        "host.psi_cpu",
        "host.psi_memory",
        "host.swapping",
        "host.memory_low",
        "host.nofile_low",
        "host.numa_mismatch",
        "host.dataloader_starved",
    } <= got
    assert "host.psi_io" not in got
    h.proc_cpus = {
        "1": [4, 5]
    }  # the GPU process itself runs on the GPU's node: fine whatever our own affinity
    h.proc_nofile = {"1": 1048576}  # and the job raised its own open-files limit
    got2 = codes(run(snap)[0])
    assert "host.numa_mismatch" not in got2 and "host.nofile_low" not in got2


def test_healthy_host_is_quiet() -> None:
    h = HostFacts(
        cpu_count=32,
        window_s=2.0,
        cpu_pct={"user": 30.0, "system": 5.0, "iowait": 1.0, "steal": 0.0, "idle": 64.0},
        load=[8.0, 8.0, 8.0],
        psi={"cpu.some.avg10": 2.0},
        swap_in_per_s=0.0,
        swap_out_per_s=0.0,
        mem_total_bytes=256 << 30,
        mem_available_bytes=200 << 30,
        nofile_soft=1048576,
        gpu_util_pct=95.0,
    )
    snap = Snapshot(gpus=[gpu(0, "NVIDIA H100 80GB HBM3", "9.0")], host=h)
    assert not [c for c in codes(run(snap)[0]) if c.startswith("host.")]


def test_quick_mode_skips_measured_checks() -> None:
    snap = Snapshot(host=HostFacts(cpu_count=4, load=[1.0, 1.0, 1.0], nofile_soft=65536))
    fs, sk = run(snap)
    assert not [c for c in codes(fs) if c.startswith("host.")]
    assert any("without --quick" in s.why for s in sk)


def test_saved_smi_errors_are_diagnosed() -> None:
    snap = Snapshot(
        origin="evidence",
        software=SoftwareFacts(
            nvidia_smi_errors=[
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
                "that the latest "
                "NVIDIA driver is installed and running."
            ]
        ),
    )
    f = next(f for f in run(snap)[0] if f.code == "driver.not_loaded")
    assert f.severity == Severity.CRITICAL and "dkms" in f.remedy
    snap2 = Snapshot(
        origin="evidence",
        software=SoftwareFacts(nvidia_smi_errors=["Failed to initialize NVML: Unknown Error"]),
    )
    assert "error.nvml.unknown_error" in codes(run(snap2)[0])
    snap3 = Snapshot(origin="evidence", software=SoftwareFacts(nvidia_smi_errors=["No devices were found"]))
    assert "gpu.none_detected" in codes(run(snap3)[0])
    live_like = Snapshot(software=host_sw(nvidia_smi_errors=["No devices were found"]))
    assert "gpu.none_detected" not in codes(run(live_like)[0])


def test_inventory_only_without_gpus() -> None:
    sw = host_sw(
        os_pretty="Ubuntu 22.04.4 LTS",
        cuda_toolkits=[CudaToolkit("/usr/local/cuda-12.4", "12.4.131", True, True)],
        frameworks=[torch_fw("2.4.1+cu124", "12.4")],
    )
    f = next(f for f in run(Snapshot(software=sw))[0] if f.code == "software.inventory")
    assert "torch 2.4.1+cu124 built for CUDA 12.4" in f.evidence
    assert "software.inventory" not in codes(run(Snapshot(software=sw, gpus=[gpu(0, "NVIDIA L4", "8.9")]))[0])


def test_container_image_cuda_vs_host_driver() -> None:
    c = ContainerFacts(in_container=True, env={"CUDA_VERSION": "12.4.1"})
    snap = Snapshot(
        driver_version="470.82.01", gpus=[gpu(0, "NVIDIA A10G", "8.6")], software=SoftwareFacts(), container=c
    )
    f = next(f for f in run(snap)[0] if f.code == "driver.too_old_for_cuda")
    assert f.severity == Severity.WARNING and "12.4.1" in f.title
    snap.software = SoftwareFacts(compat_libs_on_path=["/usr/local/cuda-12.4/compat"])
    assert "driver.too_old_for_cuda" not in codes(run(snap)[0])
