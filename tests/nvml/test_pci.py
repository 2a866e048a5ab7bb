"""sysfs PCI source on fake trees shaped like /sys (symlinks into /sys/devices)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sysfs_tree import SysfsTree

from gpuclinic.collect import CollectOptions
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import pci


@pytest.fixture
def tree(tmp_path: Path) -> SysfsTree:
    return SysfsTree(tmp_path / "sys")


def test_enumerates_gpus_and_their_bridges(tree: SysfsTree) -> None:
    gpus = tree.h100_node(2)
    tree.add("0000:00:1f.3", vendor="0x8086", cls="0x040300", driver="snd_hda_intel")  # not NVIDIA
    tree.add("0000:c1:00.1", vendor="0x10de", cls="0x040300", driver="snd_hda_intel")  # GPU HDMI audio
    tree.add("0000:05:00.0", cls="0x068000", device="0x22a3", driver="nvidia-nvswitch")  # NVSwitch
    devs = pci.read_devices(tree.devices)
    by = {d.bus_id: d for d in devs}
    assert set(by) == {*gpus, "0000:10:00.0", "0000:20:00.0", "0000:05:00.0"}
    g = by[gpus[0]]
    assert g.is_gpu and g.driver == "nvidia" and g.numa_node == 0 and g.device_id == "0x2330"
    assert (g.current_link_speed_gts, g.max_link_speed_gts, g.current_link_width, g.max_link_width) == (
        32.0,
        32.0,
        16,
        16,
    )
    assert g.parent_bus_id == "0000:10:00.0"
    assert (
        g.aer_corrected["TOTAL_ERR_COR"] == 0
        and "CmpltTO" in g.aer_nonfatal
        and g.aer_fatal == {"Undefined": 0, "DLP": 0, "TOTAL_ERR_FATAL": 0}
    )
    bridge = by["0000:10:00.0"]
    assert not bridge.is_gpu and bridge.vendor_id == "0x1000" and bridge.driver == "pcieport"
    assert not by["0000:05:00.0"].is_gpu


@pytest.mark.parametrize(
    ("text", "gts"),
    [
        ("16.0 GT/s PCIe", 16.0),
        ("8 GT/s", 8.0),
        ("2.5 GT/s PCIe", 2.5),
        ("Unknown speed", None),
        ("", None),
        (None, None),
        ("garbage", None),
    ],
)
def test_parse_speed(text: str | None, gts: float | None) -> None:
    assert pci.parse_speed(text) == gts


@pytest.mark.parametrize(
    ("text", "w"), [("16", 16), ("8", 8), ("0", None), ("255", None), ("x4", 4), ("", None), ("?", None)]
)
def test_parse_width(text: str, w: int | None) -> None:
    assert pci.parse_width(text) == w


def test_parse_aer_ignores_junk() -> None:
    assert pci.parse_aer("RxErr 3\nbroken line here\nBadTLP x\nTOTAL_ERR_COR 3\n") == {
        "RxErr": 3,
        "TOTAL_ERR_COR": 3,
    }


def test_dead_device_without_link_files(tree: SysfsTree) -> None:
    tree.add(
        "0000:3b:00.0",
        speed=None,
        max_speed=None,
        width="255",
        max_width=None,
        numa="-1",
        aer_rx=None,
        driver=None,
    )
    d = pci.read_devices(tree.devices)[0]
    assert d.driver is None and d.numa_node is None and d.current_link_width is None
    assert d.current_link_speed_gts is None and d.aer_corrected == {} and d.parent_bus_id is None


def test_collect_fills_missing_nvml_pcie_facts(tree: SysfsTree) -> None:
    gpus = tree.h100_node(2)
    tree.add("0000:99:00.0", speed="16.0 GT/s PCIe", width="8")
    snap = Snapshot(
        nvml_available=True,
        gpus=[
            GpuFacts(index=0, pci_bus_id=gpus[0], pcie_gen=5, pcie_width=16),
            GpuFacts(index=1, pci_bus_id="00000000:99:00.0", lost=True),
        ],
    )
    pci.collect(snap, CollectOptions(), root=tree.devices)
    assert snap.pci_read and len([d for d in snap.pci_devices if d.is_gpu]) == 3
    lost = snap.gpus[1]
    assert (lost.pcie_gen, lost.pcie_gen_max, lost.pcie_width, lost.pcie_width_max) == (4, 5, 8, 16)
    assert snap.gpus[0].pcie_gen == 5  # NVML's own value wins


def test_collect_without_nvml_builds_gpus_from_pci(tree: SysfsTree) -> None:
    tree.h100_node(3)
    snap = Snapshot(nvml_available=False)
    snap.skip("GPUs through NVML", "driver not loaded")
    pci.collect(snap, CollectOptions(), root=tree.devices)
    assert [g.index for g in snap.gpus] == [0, 1, 2]
    assert snap.gpus[0].pci_bus_id == "0000:18:00.0" and snap.gpus[0].pcie_gen == 5
    assert snap.gpus[0].unreadable["nvml"] == "driver not loaded"


def test_collect_without_sysfs(tmp_path: Path) -> None:
    snap = Snapshot()
    pci.collect(snap, CollectOptions(), root=tmp_path / "nope")
    assert not snap.pci_read and snap.skipped and snap.skipped[0].what == pci.WHAT
    assert "cannot list" in snap.skipped[0].why


def test_live_sysfs_does_not_crash() -> None:
    snap = Snapshot()
    pci.collect(snap, CollectOptions())
    assert snap.pci_read or snap.skipped
