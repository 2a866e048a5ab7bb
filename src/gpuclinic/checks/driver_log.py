"""Driver detector, kernel-log part: NVIDIA kernel module load errors (taint, symbols, signing, API
mismatch)."""

from __future__ import annotations

from gpuclinic import lazyre
from gpuclinic.checks import check
from gpuclinic.checks._kernel import (
    SOURCE,
    _base_data,
    _evidence,
    _previous_boot_flags,
    _steps,
)
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import severity
from gpuclinic.model import Family, Finding

# --------------------------------------------------------------------------------------------------
# xid.<N>
# --------------------------------------------------------------------------------------------------

_RE_RECOVERY = lazyre.compile(r"from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")


# --------------------------------------------------------------------------------------------------
# driver.kernel_module
# --------------------------------------------------------------------------------------------------

_MODULE_TEXT: dict[str, tuple[str, str]] = {
    "api_mismatch": (
        "the NVIDIA user-space libraries and the loaded kernel module are different versions",
        "Reboot so the kernel module matching the installed driver is loaded (or reload it: "
        "`modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`); in a "
        "container, do not install a driver inside the image.",
    ),
    "unknown_symbol": (
        "the nvidia module does not fit the running kernel (unknown symbol)",
        "Rebuild the module for this kernel (`dkms autoinstall`, or reinstall the driver package "
        "with headers for `uname -r`) and reboot.",
    ),
    "symbol_version": (
        "the nvidia module was built for another kernel",
        "Rebuild the module for this kernel (`dkms autoinstall`) or boot the kernel it was built for.",
    ),
    "no_gpu_found": (
        "the driver found no NVIDIA GPU it could use",
        "Check `lspci -d 10de:`; if the GPU is listed, check driver support and the NVRM lines above "
        "it; if not, the GPU is not visible on PCIe (seating, power, BIOS).",
    ),
    "probe_failed": (
        "the NVIDIA probe routine failed for a GPU",
        "Read the NVRM lines just before it; common causes are an unsupported GPU, a missing "
        "BAR window (enable Above 4G decoding) or another driver (nouveau) holding the GPU.",
    ),
    "probe_not_called": (
        "another driver claimed the GPU before nvidia (often nouveau or vfio-pci)",
        "Blacklist nouveau (`/etc/modprobe.d/blacklist-nouveau.conf`), rebuild the initramfs "
        "and reboot; check `lspci -k -d 10de:`.",
    ),
    "bar_invalid": (
        "the PCI memory window (BAR) assigned to the GPU is invalid",
        "Enable Above 4G decoding / Resizable BAR in the system BIOS and update it; then reboot.",
    ),
    "vbios_copy_failed": (
        "the driver could not read the GPU's VBIOS",
        "Reboot; if it persists, the GPU or its slot is faulty: reseat it or ask for a replacement.",
    ),
    "gpu_not_supported": (
        "this driver does not support the installed GPU",
        "Install a driver branch that supports this GPU (see NVIDIA's supported-products list); "
        "GPUs older than Turing have no GSP and need the proprietary kernel modules, not the open "
        "ones.",
    ),
    "firmware_missing": (
        "the driver's GSP firmware file is missing or from another version",
        "Reinstall the driver package so /lib/firmware/nvidia/<version>/gsp_*.bin matches the loaded "
        "module (a partial upgrade leaves the old firmware), then reboot.",
    ),
    "insert_failed": (
        "the nvidia kernel module could not be loaded",
        "Run `modprobe nvidia` and read `dmesg`; Secure Boot may need the module signed, or the "
        "module must be rebuilt for this kernel.",
    ),
    "unknown_parameter": (
        "a nvidia module option is not understood by this driver version",
        "Remove or fix the option in /etc/modprobe.d/*.conf.",
    ),
    "resource": (
        "the driver could not claim the GPU's resources",
        "Check that no other driver holds the GPU (`lspci -k -d 10de:`) and that the BIOS assigns "
        "its memory windows (Above 4G decoding).",
    ),
    "load_failure": (
        "the NVIDIA driver reported a failure while loading",
        "Read the NVRM lines around it; reinstall the driver if files are missing.",
    ),
}


@check("kernel.module", codes=["driver.kernel_module"], what="NVIDIA kernel module errors (kernel log)")
def module_errors(snap: Snapshot) -> list[Finding]:
    evs = [
        e
        for e in snap.kernel_events
        if e.kind == "module" and e.detail.get("severity") in ("critical", "warning")
    ]
    if not evs:
        return []
    prev = _previous_boot_flags(evs, snap)
    groups: dict[str, list[KernelEvent]] = {}
    for e in evs:
        groups.setdefault(str(e.detail.get("module")), []).append(e)
    out: list[Finding] = []
    for sub, group in groups.items():
        what, fix = _MODULE_TEXT.get(
            sub, ("the NVIDIA kernel module reported a problem", "Read the NVRM lines around it.")
        )
        critical = any(e.detail.get("severity") == "critical" for e in group)
        sev = (
            severity("driver.kernel_module", "critical_line")
            if critical
            else severity("driver.kernel_module")
        )
        data = _base_data(group)
        data["problem"] = sub
        for k in ("client_version", "kernel_version", "symbol", "devices"):
            vals = sorted({str(v) for e in group if (v := e.detail.get(k)) is not None})
            if vals:
                data[k] = vals
        loaded_later = any(
            e.kind == "module" and e.detail.get("module") == "loaded"
            for e in snap.kernel_events
            if not prev.get(id(e))
        )
        if all(prev.get(id(e)) for e in group) or (sub != "api_mismatch" and snap.gpus and loaded_later):
            sev = severity("driver.kernel_module", "resolved_later")
            data["resolved_later"] = True
        title = f"NVIDIA kernel module: {what}"
        if sub == "api_mismatch" and data.get("client_version"):
            title += (
                f" (libraries {data['client_version'][0]}, module {data.get('kernel_version', ['?'])[0]})"  # type: ignore[index]
            )
        out.append(
            Finding(
                code="driver.kernel_module",
                severity=sev,
                family=Family.SOFTWARE,
                title=title,
                evidence=_evidence(group),
                remedy=_steps(fix),
                data=data,
                source=SOURCE,
            )
        )
    return out
