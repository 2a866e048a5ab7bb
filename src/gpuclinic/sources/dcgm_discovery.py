"""``dcgmi discovery -l``: the GPUs DCGM sees (its GPU id, name, PCI bus id and UUID per table block).

``N GPUs found.`` heads a table of blocks: ``| 0 | Name: NVIDIA H100 80GB HBM3 |`` then ``PCI Bus ID:``
and ``Device UUID:`` rows.  DCGM prints ``<<<NULL>>>`` for a name it could not read (NVIDIA/DCGM#229).
"""

from __future__ import annotations

import re

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id

_ID = re.compile(r"^\|\s*(?P<id>\d{1,3})\s*\|\s*Name:\s*(?P<name>.*?)\s*\|\s*$")
_ROW = re.compile(r"^\|\s*\|\s*(?P<key>PCI Bus ID|Device UUID):\s*(?P<val>\S+)\s*\|\s*$")
_FOUND = re.compile(r"^\s*(?P<n>\d{1,4}) GPUs? found\.\s*$")
_NULL = "<<<NULL>>>"


def parse(lines: list[str]) -> tuple[list[GpuFacts], int | None]:
    """The GPUs of a ``dcgmi discovery -l`` table, and the count its ``N GPUs found.`` line gives."""
    gpus: list[GpuFacts] = []
    found: int | None = None
    for line in lines:
        m = _FOUND.match(line)
        if m:
            found = int(m.group("n"))
            continue
        m = _ID.match(line)
        if m:
            g = GpuFacts(index=int(m.group("id")))
            name = m.group("name")
            if name == _NULL:
                g.unreadable["name"] = f"DCGM printed {_NULL}"
            else:
                g.name = name or None
            gpus.append(g)
            continue
        r = _ROW.match(line)
        if r and gpus:
            if r.group("key") == "PCI Bus ID":
                gpus[-1].pci_bus_id = normalize_bus_id(r.group("val"))
            elif r.group("val").startswith(("GPU-", "MIG-")):
                gpus[-1].uuid = r.group("val")
    return gpus, found
