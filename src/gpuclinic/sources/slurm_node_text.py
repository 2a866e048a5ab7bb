"""Slurm node records as people paste them: ``scontrol show node`` (one ``NodeName=`` line and its indented
``Key=value`` lines) and ``scontrol -o show node`` (all on one line).

Each record is read by :func:`gpuclinic.slurm.scontrol.parse_node_line`, the parser the health check uses on
the live node, so a pasted record and the live one mean the same state and reason.  The record itself
names no GPU fault: the reasons that do (``gres/gpu count reported lower``, ``Node unexpectedly rebooted``,
``Kill task failed``) are evidence signatures and judged on their own lines.  Reading the records lets
``doctor --from`` accept such a paste (a healthy node is a valid input) and says which nodes it held.

Cheap to rule out: only lines holding ``NodeName=`` are looked at, and a record counts only with a field
``scontrol`` prints and slurm.conf / gres.conf lines (which also start ``NodeName=``) lack.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the parser loads when a record is found
    from gpuclinic.slurm.scontrol import NodeState

KEY = "NodeName="
_SCONTROL_ONLY = ("CPUAlloc=", "CPUTot=", "CfgTRES=", "BootTime=", "RealMemory=")
MAX_RECORD_LINES = 40


def read(lines: list[str], where: Iterable[int] | None) -> tuple[list[NodeState], set[int]]:
    """The node records in ``lines`` and the 1-based lines they span.  ``where``: the lines that may hold
    the key (all when None)."""
    nodes: list[NodeState] = []
    used: set[int] = set()
    for k in range(len(lines)) if where is None else where:
        line = lines[k]
        if KEY not in line or not line.lstrip().startswith(KEY) or k + 1 in used:
            continue
        end = k + 1
        while end < min(len(lines), k + MAX_RECORD_LINES) and lines[end][:1].isspace() and "=" in lines[end]:
            end += 1
        record = " ".join(x.strip() for x in lines[k:end])
        if "State=" not in record or not any(f in record for f in _SCONTROL_ONLY):
            continue
        from gpuclinic.slurm.scontrol import parse_node_line  # (dataclasses, inspect: only for a record)

        nodes.append(parse_node_line(record))
        used.update(range(k + 1, end + 1))
    return nodes, used
