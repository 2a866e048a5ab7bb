"""``nvidia-smi mig -lgi`` / ``-lci`` / ``-lgip``: the MIG tables, read for the GPUs they name.

Each table names itself in a banner (``| GPU instances:``, ``| Compute instances:``, ``| GPU instance
profiles:``) above its column headers; its rows start with the GPU index (``|   0  MIG 1g.6gb   14   3
0:1 |``; compute-instance rows put the GPU instance id between: ``|   0     11   MIG 1g.5gb   0   0
0:1 |``).  The GPU and compute instance lists exist only on a GPU in MIG mode, so their GPUs are read as
MIG-enabled; the profile list only names the GPU.  No fault is in these tables: they keep a pasted MIG
layout from being unrecognised input and give the report its GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.sources.smi_common import SmiDump

MIG_KEYS = ("GPU instances:", "Compute instances:", "GPU instance profiles:")  # the banners' literals
_BANNER = lazyre.compile(
    r"^\s*\|\s*(?P<what>GPU instances|Compute instances|GPU instance profiles):\s*\|?\s*$"
)
_ROW = lazyre.compile(r"^\s*\|\s+(?P<gpu>\d{1,3})\s+(?:\d+\s+)?(?P<name>MIG\s+\S+)\s")


def banner(line: str) -> str | None:
    """The table a banner line starts ("GPU instances", ...), or None."""
    m = _BANNER.match(line)
    return m.group("what") if m else None


def table_line(line: str) -> bool:
    """A line that belongs to a MIG table: a ``|`` row or a ``+---+`` rule."""
    s = line.strip()
    return bool(s) and s[0] in "|+"


def parse(numbered: Iterable[tuple[int, str]]) -> tuple[SmiDump, list[int]]:
    """The GPUs the MIG tables in ``numbered`` (line number, line) name, and the line numbers read."""
    what: str | None = None
    used: list[int] = []
    # GPU index -> table -> (the banner's line, the profile names of its rows): a table listed again (after
    # instances were created or destroyed) replaces the earlier listing
    seen: dict[int, dict[str, tuple[int, list[str]]]] = {}
    at = 0
    for n, line in numbered:
        b = banner(line)
        if b is not None:
            what, at = b, n
            used.append(n)
            continue
        if what is None:
            continue
        if not table_line(line):  # the table ended
            what = None
            continue
        used.append(n)
        m = _ROW.match(line)
        if m:
            tables = seen.setdefault(int(m.group("gpu")), {})
            if tables.get(what, (0, []))[0] != at:
                tables[what] = (at, [])
            tables[what][1].append(m.group("name").split()[1])
    dump = SmiDump(kind="smi_mig")
    for idx, tables in sorted(seen.items()):
        instances = "GPU instances" in tables or "Compute instances" in tables
        dump.gpus.append(GpuFacts(index=idx, mig_mode_current=True if instances else None))
        for table, (_, names) in tables.items():
            dump.notes.append(f"nvidia-smi mig: GPU {idx} {table}: {', '.join(names)}")
    return dump, used
