"""What was read from saved evidence: per input, its segments and what read them; fault signals.

``doctor --from`` and ``explain`` must never drop what they were given silently, so every input keeps a
record of how it was split (kernel-log runs, nvidia-smi dumps, tables, JSON lines, ...), which reader
claimed each part, and the lines nothing claimed (``doctor --from ... --show-unread`` prints them).
"""

from __future__ import annotations

from typing import Any

from gpuclinic.record import field, record


@record
class Segment:
    """A run of lines of one kind: ``first``..``last`` are 1-based line numbers in the input."""

    # kernel_log | smi_text | smi_xml | smi_table | smi_csv | smi_nvlink | smi_topo | lspci | smi_error
    kind: str
    #            | json | metrics | dcgm | traceback | prompt | text | bugreport_section
    first: int | None = None
    last: int | None = None
    readers: list[str] = field(default_factory=list)  # parsers that used it
    title: str | None = None  # bug report section title


@record
class InputRecord:
    """One input of ``doctor --from`` / ``explain`` and how it was read."""

    input: str
    kind: str  # the main kind (bugreport, capture, json, kernel_log, smi_text, mixed, ...)
    lines: int = 0
    segments: list[Segment] = field(default_factory=list)
    readers: list[str] = field(default_factory=list)
    unclaimed: int = 0  # non-blank lines no reader used
    unread: list[list[Any]] = field(default_factory=list)  # [line number, text] of the first unclaimed lines
    streamed: bool = False  # too large to segment: streamed through the kernel-log scan only


@record
class Signal:
    """A known fault signature seen on one line of the evidence (see
    ``knowledge/data/evidence_signatures.json``
    and ``error_signatures.json``); :mod:`gpuclinic.checks.signals` reports it."""

    code: str
    severity: str  # info | warning | critical
    family: str
    title: str
    line: str
    input: str | None = None
    lineno: int | None = None
    pci_bus_id: str | None = None
    remedy: str = ""
    source: str = ""
    data: dict[str, Any] = field(default_factory=dict)
