"""NVIDIA devices on the PCI bus, read from sysfs without the driver.

Why: a GPU that fell off the bus, failed driver init, or is bound to vfio-pci is invisible to
NVML but still present in ``/sys/bus/pci/devices``; comparing the two finds it.  sysfs also gives
link speed/width and AER counters when NVML is missing or refuses, and the bridge above each GPU
(where AER errors are often reported).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from gpuclinic.facts.gpu import GpuFacts, PciDevice
from gpuclinic.facts.snapshot import normalize_bus_id

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions
    from gpuclinic.facts.snapshot import Snapshot

SYSFS_PCI = "/sys/bus/pci/devices"
WHAT = "PCI devices in sysfs"
NVIDIA = "0x10de"
# display VGA 0x0300, 3D controller 0x0302, NVSwitch "bridge, other" 0x0680, NVIDIA PCIe bridges 0x0604
_WANTED_CLASSES = ("0x0300", "0x0302", "0x0680", "0x0604")
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# GT/s per lane -> PCIe generation
SPEED_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


def _read(p: Path) -> str | None:
    try:
        return p.read_text(errors="replace").strip()
    except OSError:  # missing file, or config space unreadable on a dead device
        return None


def parse_speed(s: str | None) -> float | None:
    """``"16.0 GT/s PCIe"``, ``"8 GT/s"``, ``"2.5 GT/s"`` -> GT/s; ``"Unknown speed"`` -> None."""
    if not s:
        return None
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", s)
    return float(m.group(1)) if m else None


def parse_width(s: str | None) -> int | None:
    if not s:
        return None
    s = s.strip().lstrip("x")
    try:
        w = int(s)
    except ValueError:
        return None
    return w if 0 < w <= 32 else None  # 0 = link down, 255 = unreadable config space


def speed_to_gen(gts: float | None) -> int | None:
    return SPEED_TO_GEN.get(gts) if gts is not None else None


def parse_aer(text: str | None) -> dict[str, int]:
    """``aer_dev_*`` files: one ``Name count`` per line (``TOTAL_ERR_COR 3``)."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def _device(d: Path, bus_id: str) -> PciDevice:
    dev = PciDevice(bus_id=normalize_bus_id(bus_id))
    dev.vendor_id = (_read(d / "vendor") or "").lower() or dev.vendor_id
    dev.device_id = _read(d / "device")
    dev.class_code = _read(d / "class")
    try:
        dev.driver = os.path.basename(os.readlink(d / "driver"))
    except OSError:
        dev.driver = None
    numa = _read(d / "numa_node")
    if numa is not None:
        try:
            n = int(numa)
            dev.numa_node = n if n >= 0 else None
        except ValueError:
            pass
    dev.current_link_speed_gts = parse_speed(_read(d / "current_link_speed"))
    dev.max_link_speed_gts = parse_speed(_read(d / "max_link_speed"))
    dev.current_link_width = parse_width(_read(d / "current_link_width"))
    dev.max_link_width = parse_width(_read(d / "max_link_width"))
    try:
        parent = d.resolve().parent.name
    except OSError:
        parent = ""
    if _BDF.match(parent):
        dev.parent_bus_id = normalize_bus_id(parent)
    dev.aer_corrected = parse_aer(_read(d / "aer_dev_correctable"))
    dev.aer_nonfatal = parse_aer(_read(d / "aer_dev_nonfatal"))
    dev.aer_fatal = parse_aer(_read(d / "aer_dev_fatal"))
    return dev


def read_devices(root: str | os.PathLike[str] = SYSFS_PCI) -> list[PciDevice]:
    """NVIDIA display/3D/NVSwitch functions plus the bridge directly above each GPU, by bus id.

    Raises OSError when ``root`` itself cannot be listed (no sysfs, e.g. macOS or a locked container).
    """
    base = Path(root)
    names = sorted(n for n in os.listdir(base) if _BDF.match(n))
    found: dict[str, PciDevice] = {}
    for name in names:
        d = base / name
        vendor = (_read(d / "vendor") or "").lower()
        cls = (_read(d / "class") or "").lower()
        if vendor == NVIDIA and cls.startswith(_WANTED_CLASSES):
            dev = _device(d, name)
            found[dev.bus_id] = dev
    # The bridge/switch port above each GPU: its link and AER counters often carry the error.
    for dev in list(found.values()):
        p = dev.parent_bus_id
        if dev.is_gpu and p and p not in found:
            pd = base / p
            if pd.exists():
                found[p] = _device(pd, p)
    return sorted(found.values(), key=lambda x: x.bus_id)


def fill_gpu_pcie(gpus: list[GpuFacts], devices: list[PciDevice]) -> None:
    """Fill PCIe gen/width that NVML did not give (lost GPU, refused call) from sysfs."""
    by_bus = {d.bus_id: d for d in devices}
    for g in gpus:
        if not g.pci_bus_id:
            continue
        d = by_bus.get(normalize_bus_id(g.pci_bus_id))
        if d is None:
            continue
        if g.pcie_gen is None:
            g.pcie_gen = speed_to_gen(d.current_link_speed_gts)
        if g.pcie_gen_max is None:
            g.pcie_gen_max = speed_to_gen(d.max_link_speed_gts)
        if g.pcie_width is None:
            g.pcie_width = d.current_link_width
        if g.pcie_width_max is None:
            g.pcie_width_max = d.max_link_width


def gpus_from_pci(devices: list[PciDevice], why: str) -> list[GpuFacts]:
    """GpuFacts for each PCI GPU when NVML is unusable, so link state is still checked.

    Indexes follow PCI bus order, which is NVML's default enumeration order.
    """
    out: list[GpuFacts] = []
    for i, d in enumerate(x for x in devices if x.is_gpu):
        g = GpuFacts(index=i, pci_bus_id=d.bus_id, pci_device_id=d.device_id)
        g.unreadable["nvml"] = why
        out.append(g)
    fill_gpu_pcie(out, devices)
    return out


def collect(snap: Snapshot, opts: CollectOptions, root: str | os.PathLike[str] = SYSFS_PCI) -> None:
    try:
        devices = read_devices(root)
    except OSError as e:
        snap.skip(WHAT, f"cannot list {root}: {e.strerror or e}")
        return
    snap.pci_devices = devices
    snap.pci_read = True
    if snap.gpus:
        fill_gpu_pcie(snap.gpus, devices)
    elif snap.nvml_available is False and any(d.is_gpu for d in devices):
        nvml_skips = (s.why for s in snap.skipped if s.what.startswith("GPUs through NVML"))
        why = next(nvml_skips, "NVML unavailable")
        snap.gpus = gpus_from_pci(devices, why)
        snap.notes.append(f"{len(snap.gpus)} GPU(s) known only from sysfs: NVML unavailable")
