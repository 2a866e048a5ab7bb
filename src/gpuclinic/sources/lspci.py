"""Parser for ``lspci`` output (plain, ``-nn``, ``-D``, ``-vvv``): NVIDIA devices and their PCIe link.

Bug reports and captures carry lspci output; its ``LnkCap``/``LnkSta`` lines give the link's
maximum and trained speed and width even when NVML is gone, e.g.
``LnkSta: Speed 8GT/s (downgraded), Width x8 (downgraded)``.  A device whose configuration space reads
as all ones (``(rev ff)``, ``!!! Unknown header type 7f``) no longer answers on the bus: a GPU that fell
off it still shows in a plain ``lspci | grep -i nvidia`` that way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuclinic import lazyre
from gpuclinic.facts.gpu import PciDevice
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.sources import sniffgates

_DEV_RE = lazyre.compile(
    r"^(?P<bus>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<cls>[^:\[]+?)\s*(?:\[(?P<clsid>[0-9a-fA-F]{4})\])?:\s*(?P<desc>.*)$"
)
_IDS_RE = lazyre.compile(r"\[(?P<ven>[0-9a-fA-F]{4}):(?P<dev>[0-9a-fA-F]{4})\]")
_LNK_RE = lazyre.compile(
    r"(?P<kind>LnkCap|LnkSta):.*?Speed\s+(?P<speed>[\d.]+)GT/s[^,]*,\s*Width\s+x(?P<width>\d+)"
)
_CLASS_NAMES = {
    "vga compatible controller": "0x030000",
    "3d controller": "0x030200",
    "display controller": "0x038000",
    "bridge": "0x068000",
}


_NVIDIA_ID = lazyre.compile(r"\[10[dD][eE]:")  # (sniffgates.LSPCI's last literal, case folded)
_NN_LINE_RE = lazyre.compile(
    r"^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [^:\n]+?(?: \[[0-9a-fA-F]{4}\])?: "
    r".*\[[0-9a-fA-F]{4}:[0-9a-fA-F]{4}\]",
    re.M,
)


# a plain listing line of an NVIDIA function ("1c:00.0 VGA compatible controller: NVIDIA Corporation TU102GL")
_PLAIN_LINE_RE = lazyre.compile(
    r"^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [^:\n]+?(?: \[[0-9a-fA-F]{4}\])?: "
    r"NVIDIA Corporation ",
    re.M,
)
_UNREADABLE = "(rev ff)"  # the revision byte of a configuration space that reads all ones


def looks_like(sample: str) -> bool:
    """``lspci -vvv`` with NVIDIA devices, an ``lspci -nn`` listing (vendor:device ids) with an NVIDIA one, or
    a plain listing of NVIDIA functions (``lspci | grep -i nvidia``)."""
    if "NVIDIA Corporation" in sample and _PLAIN_LINE_RE.search(sample):
        return True
    verbose = any(k in sample for k in sniffgates.LSPCI[:3]) and bool(
        re.search(r"^\S+ (VGA compatible controller|3D controller|PCI bridge|Bridge).*:", sample, re.M)
    )  # the literals first: they are cheap, and a prose sample has none
    if verbose:
        return True
    # a line below lower-cases to hold "[10de:" only where this matches ("[10" first: a substring search)
    if "[10" not in sample or not _NVIDIA_ID.search(sample):
        return False
    nn = _NN_LINE_RE.findall(sample)
    return len(nn) >= 1 and any("[10de:" in ln.lower() for ln in nn)


def parse(lines: Iterable[str]) -> list[PciDevice]:
    """NVIDIA devices (vendor 10de, or "NVIDIA" in the description) with link facts."""
    out: list[PciDevice] = []
    cur: PciDevice | None = None
    for raw in lines:
        if len(raw) > 4096:
            continue
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if not line[0].isspace():
            cur = _device(line)
            if cur is not None:
                out.append(cur)
            continue
        if cur is None:
            continue
        s = line.strip()
        if s.startswith("!!! Unknown header type 7f"):
            cur.config_unreadable = True
        lk = _LNK_RE.search(s)
        if lk:
            speed, width = float(lk.group("speed")), int(lk.group("width"))
            if lk.group("kind") == "LnkCap" and cur.max_link_speed_gts is None:
                cur.max_link_speed_gts, cur.max_link_width = speed, width
            elif lk.group("kind") == "LnkSta" and cur.current_link_speed_gts is None:
                cur.current_link_speed_gts, cur.current_link_width = speed, width
        elif s.startswith("Kernel driver in use:"):
            cur.driver = s.split(":", 1)[1].strip() or None
        elif s.startswith("NUMA node:"):
            try:
                cur.numa_node = int(s.split(":", 1)[1].strip())
            except ValueError:
                pass
    return out


def _device(line: str) -> PciDevice | None:
    """The NVIDIA function a device line names (vendor 10de, or "NVIDIA" in its description), or None."""
    m = _DEV_RE.match(line)
    if not m:
        return None
    desc = m.group("desc")
    ids = _IDS_RE.search(desc)
    if not ((ids is not None and ids.group("ven").lower() == "10de") or "nvidia" in desc.lower()):
        return None
    cls = m.group("cls").strip().lower()
    class_code = ("0x" + m.group("clsid").lower() + "00") if m.group("clsid") else _CLASS_NAMES.get(cls)
    if class_code is None and "bridge" in cls:
        class_code = "0x068000"
    return PciDevice(
        bus_id=normalize_bus_id(m.group("bus")),
        device_id=("0x" + ids.group("dev").lower()) if ids else None,
        class_code=class_code,
        config_unreadable=desc.rstrip().endswith(_UNREADABLE),
    )
