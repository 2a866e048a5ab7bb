"""Build fake /sys/bus/pci/devices trees shaped like the real one (symlinks into /sys/devices)."""

from __future__ import annotations

from pathlib import Path

AER_COR = (
    "RxErr {rx}\nBadTLP 0\nBadDLLP {dllp}\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\n"
    "TOTAL_ERR_COR {total}\n"
)
AER_NONFATAL = (
    "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO {cto}\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\n"
    "ECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\n"
    "PoisonTLPBlocked 0\nTOTAL_ERR_NONFATAL {cto}\n"
)


class SysfsTree:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices = root / "bus" / "pci" / "devices"
        self.devices.mkdir(parents=True)
        (root / "drivers").mkdir()

    def add(
        self,
        bdf: str,
        *,
        parent: str | None = None,
        vendor: str = "0x10de",
        device: str = "0x2330",
        cls: str = "0x030200",
        driver: str | None = "nvidia",
        speed: str | None = "32.0 GT/s PCIe",
        max_speed: str | None = "32.0 GT/s PCIe",
        width: str | None = "16",
        max_width: str | None = "16",
        numa: str = "0",
        aer_rx: int | None = 0,
        aer_cto: int = 0,
    ) -> Path:
        base = self.root / "devices" / "pci0000:00"
        d = (base / parent / bdf) if parent else (base / bdf)
        d.mkdir(parents=True, exist_ok=True)
        files = {
            "vendor": vendor,
            "device": device,
            "class": cls,
            "numa_node": numa,
            "current_link_speed": speed,
            "max_link_speed": max_speed,
            "current_link_width": width,
            "max_link_width": max_width,
        }
        for k, v in files.items():
            if v is not None:
                (d / k).write_text(v + "\n")
        if aer_rx is not None:
            (d / "aer_dev_correctable").write_text(AER_COR.format(rx=aer_rx, dllp=0, total=aer_rx))
            (d / "aer_dev_nonfatal").write_text(AER_NONFATAL.format(cto=aer_cto))
            (d / "aer_dev_fatal").write_text("Undefined 0\nDLP 0\nTOTAL_ERR_FATAL 0\n")
        if driver:
            drv = self.root / "drivers" / driver
            drv.mkdir(exist_ok=True)
            (d / "driver").symlink_to(drv)
        (self.devices / bdf).symlink_to(d)
        return d

    def h100_node(self, n: int = 8) -> list[str]:
        """n H100 GPUs, each behind its own PCIe switch port (like an HGX board)."""
        gpus = []
        for i in range(n):
            port = f"0000:{0x10 + i * 0x10:02x}:00.0"
            gpu = f"0000:{0x18 + i * 0x10:02x}:00.0"
            self.add(port, vendor="0x1000", device="0xc030", cls="0x060400", driver="pcieport")
            self.add(gpu, parent=port)
            gpus.append(gpu)
        return gpus
