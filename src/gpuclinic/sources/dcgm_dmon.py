"""``dcgmi dmon`` tables: the Xid column (field 230, ``XIDER``) as Xid events, the other known columns as
GPU readings.

``dcgmi dmon -e 230`` prints ``#Entity  XIDER`` (other fields add columns by their short names), a units
row (``ID``), then one row per entity and sample: ``GPU 1      120``. The XIDER value is the last Xid the
GPU reported (0: none).  Columns the field schema names (``dcgm_dmon`` in
``knowledge/data/gpu_fields.json``: TMPTR, POWER, EDVTL, RRP ...) become the GPU's readings, its last
sample winning; ``N/A`` is no reading.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.knowledge import gpu_fields
from gpuclinic.sources.smi_common import SmiDump
from gpuclinic.sources.smi_csv import Setter, setter

DMON_KEY = "#Entity"

_HEADER = lazyre.compile(r"^\s*#Entity\s+(?P<cols>.+?)\s*$")
_ROW = lazyre.compile(r"^\s*GPU\s+(?P<gpu>\d{1,3})\s+(?P<vals>.+?)\s*$")


def xid_events(lines: list[str], origin: str, first: int = 1) -> list[KernelEvent]:
    """One Xid event per GPU row whose XIDER value is not 0 (``first``: the line number of ``lines[0]``)."""
    out: list[KernelEvent] = []
    col: int | None = None
    for n, line in enumerate(lines, start=first):
        h = _HEADER.match(line)
        if h:
            names = h.group("cols").split()
            col = names.index("XIDER") if "XIDER" in names else None
            continue
        m = _ROW.match(line) if col is not None else None
        if m is None or col is None:
            continue
        vals = m.group("vals").split()
        if col < len(vals) and vals[col].isdigit() and int(vals[col]) > 0:
            out.append(
                KernelEvent(
                    kind="xid",
                    line=line.strip(),
                    xid=int(vals[col]),
                    message=line.strip(),
                    origin=origin,
                    lineno=n,
                    detail={"format": "dcgmi dmon XIDER", "gpu_index": int(m.group("gpu"))},
                )
            )
    return out


@cache
def _columns() -> dict[str, Setter]:
    """``dcgmi dmon`` column name -> the setter of its fact, from the field schema."""
    return {name: setter(row.parse, row.fact) for row in gpu_fields.fields() for name in row.dcgm_dmon}


def readings(numbered: Iterable[tuple[int, str]]) -> tuple[SmiDump, list[int]]:
    """The GPUs of the ``dcgmi dmon`` rows in ``numbered`` (line number, line) with the columns the field
    schema names, and the line numbers used (headers, units rows and GPU rows)."""
    known = _columns()
    names: list[str] = []
    last: dict[int, list[str]] = {}
    used: list[int] = []
    for n, line in numbered:
        h = _HEADER.match(line)
        if h:
            names = h.group("cols").split()
            if any(c in known for c in names):
                used.append(n)
            else:
                names = []
            continue
        if not names:
            continue
        if line.strip() == "ID" or line.lstrip().startswith("ID "):
            used.append(n)
            continue
        m = _ROW.match(line)
        if m is None:
            continue
        vals = m.group("vals").split()
        if len(vals) != len(names):
            continue
        last[int(m.group("gpu"))] = vals
        used.append(n)
    dump = SmiDump(kind="dcgm_dmon")
    for idx, vals in sorted(last.items()):
        g = GpuFacts(index=idx)
        for col, val in zip(names, vals, strict=True):
            set_ = known.get(col)
            if set_ is not None:
                set_(g, val)
        dump.gpus.append(g)
    if dump.gpus:
        dump.notes.append(f"dcgmi dmon: the last sample of each of {len(dump.gpus)} GPU(s) read")
    return dump, used
