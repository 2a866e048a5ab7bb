"""``dcgmi dmon`` tables: the Xid column (field 230, ``XIDER``) as Xid events.

``dcgmi dmon -e 230`` prints ``#Entity  XIDER`` (other fields add columns by their short names), a units
row (``ID``), then one row per entity: ``GPU 1      120``. The value is the last Xid the GPU reported
(0: none). Other fields are samples, not faults, and are left alone.
"""

from __future__ import annotations

from gpuclinic import lazyre
from gpuclinic.facts.kernel import KernelEvent

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
