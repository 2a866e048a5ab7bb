"""Driver, kernel module, daemon, OS and saved-error checks (CUDA vs driver and GPU: :mod:`.software_cuda`).

Every remedy names the versions involved and the command to run, computed from the compatibility
tables (``knowledge/compat.py``) rather than written per case.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuclinic.checks import CheckSkipped, check
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import SoftwareFacts
from gpuclinic.knowledge import compat, load_data
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Family, Finding, GpuRef, Severity

SRC_MVC = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
SRC_FM = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"


def _sw(snap: Snapshot) -> SoftwareFacts:
    if snap.software is None:
        raise CheckSkipped("no software facts")
    return snap.software


def _live_sw(snap: Snapshot) -> SoftwareFacts:
    sw = _sw(snap)
    if sw.kernel_module_loaded is None and sw.proc_driver_version is None and sw.running_kernel is None:
        raise CheckSkipped("no kernel-module facts (not read on this machine)")
    return sw


def _in_container(snap: Snapshot) -> bool:
    return bool(snap.container and snap.container.in_container)


def _nvidia_gpus_on_pci(snap: Snapshot) -> list[str]:
    return [d.bus_id for d in snap.pci_devices if d.is_gpu and (d.vendor_id or "").lower() == "0x10de"]


def _nvml_why(snap: Snapshot) -> str | None:
    for s in snap.skipped:
        if "NVML" in s.what or "nvml" in s.what.lower():
            return s.why
    return None


def _driver(snap: Snapshot) -> str | None:
    sw = snap.software
    if sw is None:
        return snap.driver_version
    return snap.driver_version or sw.proc_driver_version or sw.driver_version


def _gpu_cc(g: GpuFacts) -> str | None:
    return g.compute_capability or compat.compute_capability_for(g.name)


def _ref(g: GpuFacts) -> GpuRef:
    return GpuRef(index=g.index, pci_bus_id=g.pci_bus_id, uuid=g.uuid)


# ------------------------------------------------------------------ driver presence


@check("driver.presence", codes=["driver.not_loaded", "gpu.none_detected"], what="whether the NVIDIA driver "
                                                                                 "is loaded")
def driver_presence(snap: Snapshot) -> Iterator[Finding]:
    if snap.gpus:
        return
    sw = _sw(snap)
    if snap.origin != "live" and sw.kernel_module_loaded is None and sw.proc_driver_version is None:
        raise CheckSkipped("evidence has no driver facts")
    on_pci = _nvidia_gpus_on_pci(snap)
    why = _nvml_why(snap)
    loaded = sw.kernel_module_loaded or bool(sw.proc_driver_version)
    ev: list[str] = []
    if why:
        ev.append(f"NVML: {why}")
    if sw.running_kernel:
        ev.append(f"running kernel {sw.running_kernel}")
    if on_pci:
        bound = {d.bus_id: d.driver for d in snap.pci_devices if d.bus_id in on_pci}
        ev.append("NVIDIA GPUs on the PCI bus: "
                  + ", ".join(f"{b} (driver: {bound[b] or 'none'})" for b in on_pci))
        if loaded:
            return  # module loaded but NVML failed: library_mismatch / nvml checks explain it
        causes: list[str] = []
        if sw.module_for_kernel is False:
            built = ", ".join(sw.module_kernels) or "no kernel"
            causes.append(f"no nvidia.ko for kernel {sw.running_kernel} (built for: {built}) - see "
                          "driver.module_missing_for_kernel")
        if sw.nouveau_loaded:
            causes.append("nouveau owns the GPU - see driver.nouveau_conflict")
        if sw.secure_boot and sw.module_for_kernel:
            causes.append("Secure Boot is on: an unsigned (DKMS) module is refused - `mokutil --sb-state`, "
                          "enroll the DKMS key")
        if any(v == "vfio-pci" for v in bound.values()):
            causes.append("GPUs are bound to vfio-pci (reserved for VM passthrough)")
        remedy = "; ".join(causes) if causes else (
            "load it: `sudo modprobe nvidia` and read `sudo dmesg | grep -i -e nvrm -e nvidia`; "
            "if it is not installed, install the driver (Ubuntu: `sudo ubuntu-drivers install --gpgpu`)"
        )
        yield finding(
            "driver.not_loaded",
            title=f"NVIDIA driver is not loaded; {len(on_pci)} NVIDIA GPU(s) are on the PCI bus but unusable",
            evidence=ev, remedy=remedy, data={"gpus_on_pci": on_pci}, source="/proc/modules, /sys/bus/pci",
        )
        return
    if loaded:
        return  # driver loaded, NVML missing/failed: nvml and library checks speak
    if snap.pci_read:
        ev.append("no NVIDIA GPU on the PCI bus")
    else:
        ev.append("the PCI bus could not be enumerated (no /sys/bus/pci)")
    if _in_container(snap):
        c = snap.container
        assert c is not None
        ev.append(f"inside a {c.runtime or 'container'}; /dev/nvidia* nodes: "
                  f"{', '.join(c.dev_nvidia) or 'none'}")
        remedy = ("GPU checks were skipped. If this container should have GPUs, start it with `--gpus all` "
                  "(Docker + NVIDIA Container Toolkit) or request `nvidia.com/gpu` in the pod's limits; "
                  "run `gpuclinic doctor` on the host to check the driver.")
    else:
        remedy = ("GPU checks were skipped: this machine has no NVIDIA GPU and no NVIDIA driver. "
                  "Software, network and host checks still ran.")
    yield finding(
        "gpu.none_detected",
        when="no_gpu_expected",
        title="No NVIDIA GPU or driver found: GPU checks skipped", evidence=ev, remedy=remedy,
        data={"nvml": why, "pci_read": snap.pci_read},
    )


@check("driver.library_mismatch", codes=["driver.library_mismatch"], what="driver kernel module vs "
                                                                          "user-space libraries")
def library_mismatch(snap: Snapshot) -> Iterator[Finding]:
    sw = _sw(snap)
    kmod = sw.proc_driver_version
    errs = [e for e in sw.nvidia_smi_errors if "mismatch" in e.lower()]
    why = _nvml_why(snap) or ""
    if "mismatch" in why.lower():
        errs.append(why)
    libs = sw.user_lib_versions
    if kmod is None and not errs:
        raise CheckSkipped("kernel module version unknown")
    mismatch = bool(kmod and libs and kmod not in libs)
    if not (mismatch or errs):
        return
    ev = list(dict.fromkeys(errs))
    if kmod:
        ev.append(f"loaded kernel module: {kmod} (/proc/driver/nvidia/version)")
    if libs:
        ev.append(f"user-space libnvidia-ml: {', '.join(libs)}")
    new = libs[-1] if libs else None
    yield finding(
        "driver.library_mismatch",
        title=(f"Driver mismatch: kernel module {kmod} but user-space libraries {new}" if kmod and new
               else "Driver kernel module and user-space libraries differ (NVML version mismatch)"),
        evidence=ev,
        remedy=("The driver packages were upgraded without reloading the module (often unattended-upgrades). "
                "Reboot, or with no GPU process running: `sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset "
                "nvidia "
                "&& sudo modprobe nvidia`. Prevent it: `sudo apt-mark hold 'nvidia-*' 'libnvidia-*'` or "
                "exclude them "
                "in /etc/apt/apt.conf.d/50unattended-upgrades."),
        data={"kernel_module": kmod, "user_space": libs},
        source="https://github.com/lyulyul/shine-cluster/issues/30",
    )


@check("driver.module_missing_for_kernel", codes=["driver.module_missing_for_kernel"],
       what="nvidia module built for the running kernel")
def module_missing(snap: Snapshot) -> Iterator[Finding]:
    sw = _live_sw(snap)
    if sw.module_for_kernel is None:
        raise CheckSkipped("/lib/modules not readable (e.g. in a container)")
    if sw.module_for_kernel or sw.kernel_module_loaded:
        return
    if not sw.module_kernels and not sw.dkms_status and not sw.user_lib_versions:
        return  # no driver installed at all: driver.presence speaks
    ev = [f"running kernel: {sw.running_kernel}",
          f"kernels with an nvidia module: {', '.join(sw.module_kernels) or 'none'}"]
    ev += [f"dkms: {x}" for x in sw.dkms_status[:6]]
    yield finding(
        "driver.module_missing_for_kernel",
        title=f"No nvidia kernel module for the running kernel {sw.running_kernel}",
        evidence=ev,
        remedy=(f"Build it for this kernel: `sudo apt install linux-headers-{sw.running_kernel}` (RHEL: "
                f"`sudo dnf install kernel-devel-{sw.running_kernel}`) then `sudo dkms autoinstall` and "
                "`sudo modprobe nvidia`; if the build fails the driver branch may not support this kernel - "
                "boot the "
                "previous kernel or install a newer driver branch. Build log: "
                "/var/lib/dkms/nvidia/<version>/build/make.log."),
        data={"running_kernel": sw.running_kernel, "module_kernels": sw.module_kernels},
        source="https://github.com/junxnone/tio/issues/206",
    )


@check("driver.nouveau_conflict", codes=["driver.nouveau_conflict"], what="nouveau driver")
def nouveau(snap: Snapshot) -> Iterator[Finding]:
    blacklist_cmd = ("`printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee "
                     "/etc/modprobe.d/blacklist-nouveau.conf && sudo update-initramfs -u` (RHEL: `sudo "
                     "dracut -f`), "
                     "then reboot")
    # saved lspci output: "Kernel driver in use: nouveau" on an NVIDIA GPU is the conflict itself
    bound = [d.bus_id for d in snap.pci_devices if d.is_gpu and d.driver == "nouveau"]
    try:
        sw = _live_sw(snap)
    except CheckSkipped:
        if not bound:
            raise
        yield finding(
            "driver.nouveau_conflict",
            title="The nouveau driver owns the NVIDIA GPU (lspci: Kernel driver in use: nouveau)",
            evidence=[f"{b}: Kernel driver in use: nouveau" for b in bound],
            remedy="Blacklist nouveau: " + blacklist_cmd + ".",
            source="https://github.com/negativo17/nvidia-driver/issues/73",
        )
        return
    if sw.nouveau_loaded is None:
        raise CheckSkipped("/proc/modules not readable")
    if sw.nouveau_loaded:
        yield finding(
            "driver.nouveau_conflict",
            title="The nouveau driver is loaded and blocks the NVIDIA driver",
            evidence=["nouveau in /proc/modules",
                      "nouveau blacklisted: "
                      f"{'yes (initramfs not rebuilt?)' if sw.nouveau_blacklisted else 'no'}"],
            remedy="Blacklist nouveau: " + blacklist_cmd + ".",
            source="https://github.com/mattshma/bigdata/issues/133",
        )
    elif not sw.nouveau_blacklisted and not sw.kernel_module_loaded and _nvidia_gpus_on_pci(snap):
        yield finding(
            "driver.nouveau_conflict",
            when="blacklisted_not_loaded",
            title="nouveau is not blacklisted while the NVIDIA driver is not loaded",
            evidence=["no 'blacklist nouveau' in /etc/modprobe.d or the kernel command line"],
            remedy="Before installing/loading the NVIDIA driver, blacklist nouveau: " + blacklist_cmd + ".",
            source="https://github.com/mattshma/bigdata/issues/133",
        )


# ------------------------------------------------------------------ daemons, OS


@check("driver.fabric_manager_missing", codes=["driver.fabric_manager_missing"], what="NVIDIA fabric manager")
def fabric_manager(snap: Snapshot) -> Iterator[Finding]:
    sw = _live_sw(snap)
    if _in_container(snap):
        raise CheckSkipped("inside a container: host services are not visible")
    nvswitch = sw.nvswitch_count or 0
    sxm = [g for g in snap.gpus if g.name and ("SXM" in g.name.upper() or "HBM3" in g.name.upper())]
    if nvswitch == 0 and len(sxm) < 8:
        return
    if sw.fabricmanager_running is None:
        raise CheckSkipped("process list not readable")
    if sw.fabricmanager_running:
        return
    driver = _driver(snap) or "<driver version>"
    branch = driver.split(".")[0]
    fm_state = "installed but not running" if sw.fabricmanager_installed else "not installed"
    ev = [f"{nvswitch} NVSwitch device(s) on the PCI bus" if nvswitch
          else f"{len(sxm)} SXM GPUs (NVSwitch baseboard likely)",
          f"nv-fabricmanager {fm_state}"]
    remedy = ("Without the fabric manager CUDA fails with \"system not yet initialized\" (error 802). "
              + ("`sudo systemctl enable --now nvidia-fabricmanager` and check `journalctl -u "
                 "nvidia-fabricmanager` / "
                 "/var/log/fabricmanager.log (its version must equal the driver's)"
                 if sw.fabricmanager_installed else
                 f"Install the fabric manager of exactly driver {driver} (Ubuntu: `sudo apt install "
                 f"nvidia-fabricmanager-{branch}="
                 f"{driver}-1`), then `sudo systemctl enable --now nvidia-fabricmanager`")
              + "; `nvidia-smi -q | grep -A2 Fabric` must show State: Completed.")
    yield finding(
        "driver.fabric_manager_missing",
        title="NVSwitch system without a running NVIDIA fabric manager", evidence=ev, remedy=remedy,
        data={"nvswitch_count": nvswitch, "installed": sw.fabricmanager_installed}, source=SRC_FM,
    )


@check("driver.persistence_off", codes=["driver.persistence_off"], what="GPU persistence")
def persistence(snap: Snapshot) -> Iterator[Finding]:
    sw = _live_sw(snap)
    if not snap.gpus:
        raise CheckSkipped("no GPUs read")
    if _in_container(snap):
        raise CheckSkipped("inside a container: host services are not visible")
    off = [g for g in snap.gpus if g.persistence_mode is False]
    if sw.persistenced_running or not off:
        return
    yield finding(
        "driver.persistence_off",
        title=f"Persistence is off on {len(off)} GPU(s) and nvidia-persistenced is not running",
        evidence=[f"GPU {g.index}: persistence mode disabled" for g in off[:8]],
        remedy=("Each new CUDA/NVML client re-initialises the GPU (seconds on big GPUs) and settings reset "
                "when idle; "
                "run the daemon: `sudo systemctl enable --now nvidia-persistenced`."),
        source="https://docs.nvidia.com/deploy/driver-persistence/index.html",
    )


@check("os.unsupported", codes=["os.unsupported"], what="operating system support")
def os_support(snap: Snapshot) -> Iterator[Finding]:
    sw = _live_sw(snap)
    if _in_container(snap):
        raise CheckSkipped("inside a container: the host OS runs the driver")
    if not sw.os_id:
        raise CheckSkipped("/etc/os-release not readable")
    table = load_data("supported_os.json")["supported"]
    entry = next((e for e in table if e["id"] == sw.os_id), None)
    ver = sw.os_version or ""
    if entry is None:
        yield finding(
            "os.unsupported",
            when="unknown",
            title=f"{sw.os_pretty or sw.os_id} is not on NVIDIA's supported distribution list",
            evidence=[f"ID={sw.os_id} VERSION_ID={ver}"],
            remedy="Drivers may still work, but NVIDIA packages and support target the listed distributions "
                   "(Ubuntu 22.04/24.04, RHEL/Rocky 8-10, Debian 12/13, ...).",
            source=table[0]["source"],
        )
        return
    ok = any(ver == v or ver.startswith(v + ".") for v in entry["versions"])
    if ok:
        return
    yield finding(
        "os.unsupported",
        title=f"{sw.os_pretty or sw.os_id + ' ' + ver} is not supported by current NVIDIA drivers/CUDA",
        evidence=[f"ID={sw.os_id} VERSION_ID={ver}", f"supported {sw.os_id} versions: "
                                                     f"{', '.join(entry['versions'])}"],
        remedy="Upgrade the OS to a supported release before upgrading the driver or CUDA (newer CUDA/driver "
               "packages are not published for it).",
        source=entry["source"],
    )


# ------------------------------------------------------------------ saved nvidia-smi error statements

_NO_DRIVER = ("couldn't communicate with the nvidia driver", "couldnt communicate with the nvidia driver",
              "nvidia driver is not loaded", "unable to find nvidia driver")


@check("driver.smi_errors", codes=["driver.not_loaded", "gpu.none_detected", "error.*"],
       what="nvidia-smi error statements in the evidence")
def smi_errors(snap: Snapshot) -> Iterator[Finding]:
    """``doctor --from``: nvidia-smi printed an error instead of a table; say what it means."""
    sw = _sw(snap)
    if not sw.nvidia_smi_errors:
        return
    if sw.kernel_module_loaded is not None:
        return  # live run: driver.presence and library_mismatch read the real state
    from gpuclinic.knowledge.signatures import match

    seen: set[str] = set()
    # GPUs only counted or listed (lspci, /proc/driver/nvidia, "Attached GPUs: 8") were not read by
    # nvidia-smi: its error still says what is wrong with them (a bug report lists the GPU it cannot see)
    read = any(g.has_readings for g in snap.gpus)
    for err in sw.nvidia_smi_errors:
        low = err.lower()
        if any(k in low for k in _NO_DRIVER) and not read and "driver.not_loaded" not in seen:
            seen.add("driver.not_loaded")
            yield finding(
                "driver.not_loaded",
                title="nvidia-smi cannot talk to the NVIDIA driver: the kernel module is not loaded",
                evidence=[err],
                remedy=("Usual causes, in order: the module was not built for the running kernel after a "
                        "kernel update "
                        "(`dkms status`, `sudo apt install linux-headers-$(uname -r) && sudo dkms "
                        "autoinstall`), Secure Boot "
                        "refuses the unsigned module (`mokutil --sb-state`), nouveau owns the GPU (`lsmod | "
                        "grep nouveau`). "
                        "Then `sudo modprobe nvidia`; run `gpuclinic doctor` on the machine for the exact "
                        "cause."),
                source="https://github.com/junxnone/tio/issues/206",
            )
            continue
        if "no devices were found" in low and not read and "gpu.none_detected" not in seen:
            seen.add("gpu.none_detected")
            yield finding(
                "gpu.none_detected",
                title="The NVIDIA driver is loaded but found no GPU",
                evidence=[err],
                remedy=("The GPU is not usable by the driver: check `lspci -nn | grep -i nvidia` (is it on "
                        "the bus?), "
                        "`sudo dmesg | grep -i -e NVRM -e Xid` (RmInitAdapter failed, Xid 79), and whether "
                        "the GPU is bound "
                        "to vfio-pci or a MIG/vGPU setup; reboot or power-cycle if it fell off the bus."),
            )
            continue
        for sm in match(err):
            if sm.id in seen or sm.id in ("nvml.version_mismatch", "nvrm.api_mismatch", "smi.device_handle",
                                          "gpu.lost"):
                continue  # covered by driver.library_mismatch and the GPU-presence checks
            seen.add(sm.id)
            yield Finding(
                code=f"error.{sm.id}",
                severity={"info": Severity.INFO, "critical": Severity.CRITICAL}.get(sm.severity,
                                                                                    Severity.WARNING),
                family=Family.SOFTWARE, title=sm.title, evidence=[err, *sm.hints], remedy=sm.fix,
                source=sm.source,
                data={"signature": sm.id, "category": sm.category},
            )


@check("software.inventory", codes=["software.inventory"], what="installed GPU software")
def inventory(snap: Snapshot) -> Iterator[Finding]:
    """On a machine without usable GPUs, list what GPU software is installed (it explains the next error)."""
    sw = _live_sw(snap)
    if snap.gpus:
        return
    ev: list[str] = []
    if sw.os_pretty:
        ev.append(f"OS: {sw.os_pretty}" + (f", kernel {sw.running_kernel}" if sw.running_kernel else ""))
    if sw.proc_driver_version:
        ev.append(f"NVIDIA kernel module {sw.proc_driver_version} ({sw.kernel_module_flavor})")
    if sw.user_lib_versions:
        ev.append(f"NVIDIA user-space libraries {', '.join(sw.user_lib_versions)}")
    for t in sw.cuda_toolkits:
        ev.append(f"CUDA toolkit {t.version or '?'} at {t.path}" + (" (nvcc)" if t.nvcc else "")
                  + (" [default]" if t.is_default else ""))
    for f in sw.frameworks:
        ev.append(f"{f.name} {f.version}" + (f" built for CUDA {f.cuda}" if f.cuda else " (no CUDA build "
                                                                                        "found)"))
    if sw.python:
        env = f" (env: {sw.extra['python_env']})" if sw.extra.get("python_env") else ""
        ev.append(f"Python {sw.python}{env}")
    if not ev:
        return
    yield finding(
        "software.inventory",
        title="GPU software installed on this machine", evidence=ev,
        remedy="For reference: with a GPU and driver present, doctor checks these against the driver and the "
               "GPUs.",
        data={"frameworks": [f.name for f in sw.frameworks],
              "toolkits": [t.version for t in sw.cuda_toolkits]},
    )
