"""Parser for ``nvidia-smi --query-gpu=... --format=csv`` (and ``--query-remapped-rows``) output.

Scripts and tickets often carry this CSV instead of ``-q``.  Only output *with* its header line is
read: without it the columns mean nothing.  Units in the header (``power.draw [W]``) and in the
values (``250.00 W``, ``0 %``, ``[N/A]``, ``[Not Supported]``) are both handled.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import gpu_fields
from gpuclinic.sources import smi_common as c

MAX_LINE = 65536
_UNIT_RE = lazyre.compile(r"\s*\[[^\]]*\]\s*$")

Setter = Callable[[GpuFacts, str], None]


def _num(attr: str) -> Setter:
    def f(g: GpuFacts, v: str) -> None:
        setattr(g, attr, c.num(v))
        c.note_unreadable(g, attr, v)
    return f


def _num_unless_set(attr: str) -> Setter:
    """A fallback column (instant power when the averaged one is also queried) never overrides the main
    one."""

    def f(g: GpuFacts, v: str) -> None:
        if getattr(g, attr) is None:
            setattr(g, attr, c.num(v))

    return f


def _int(attr: str) -> Setter:
    def f(g: GpuFacts, v: str) -> None:
        setattr(g, attr, c.integer(v))
        c.note_unreadable(g, attr, v)

    return f


def _mib(attr: str) -> Setter:
    def f(g: GpuFacts, v: str) -> None:
        setattr(g, attr, c.mib_bytes(v))

    return f


def _bool(attr: str) -> Setter:
    def f(g: GpuFacts, v: str) -> None:
        setattr(g, attr, c.yes_no(v))

    return f


# nvidia-smi's gpu_recovery_action words -> the names NVML's field value decodes to (sources/nvml.py)
_RECOVERY = lazyre.compile(r"^(none|reset|reboot|drain p2p|drain and reset)\b", re.I)
_RECOVERY_NAMES = {"none": "none", "reset": "gpu_reset", "reboot": "node_reboot", "drain p2p": "drain_p2p",
                   "drain and reset": "drain_and_reset"}


def _recovery(attr: str) -> Setter:
    def f(g: GpuFacts, v: str) -> None:
        m = _RECOVERY.match(c.clean(v) or "")
        setattr(g, attr, _RECOVERY_NAMES[" ".join(m.group(1).lower().split())] if m else None)

    return f


def _str(attr: str) -> Setter:
    def f(g: GpuFacts, v: str) -> None:
        cv = c.clean(v)
        setattr(g, attr, None if c.error_reason(cv) else cv)

    return f


def _bus(g: GpuFacts, v: str) -> None:
    cv = c.clean(v)
    if cv:
        g.pci_bus_id = normalize_bus_id(cv)


def _index(g: GpuFacts, v: str) -> None:
    i = c.integer(v)
    if i is not None:
        g.index = i


def _mask(g: GpuFacts, v: str) -> None:
    m = c.integer(v)
    if m is None:
        return
    g.clock_event_reasons_mask = m
    g.clock_event_reasons = gpu_fields.decode_reason_mask(m)


def _width(g: GpuFacts, v: str) -> None:
    g.pcie_width = c.width(v)


def _width_max(g: GpuFacts, v: str) -> None:
    g.pcie_width_max = c.width(v)


# How each parse kind of knowledge/data/gpu_fields.json sets a GpuFacts attribute.
_PARSERS: dict[str, Callable[[str], Setter]] = {
    "num": _num,
    "num_unless_set": _num_unless_set,
    "int": _int,
    "mib": _mib,
    "bool": _bool,
    "str": _str,
    "bus": lambda attr: _bus,
    "index": lambda attr: _index,
    "mask": lambda attr: _mask,
    "width": lambda attr: _width if attr == "pcie_width" else _width_max,
    "recovery_action": _recovery,
}


def setter(parse: str, fact: str) -> Setter:
    """The setter of one schema row (its ``parse`` kind and ``fact``), for every reader of text values."""
    return _PARSERS[parse](fact)


# --query-gpu column -> setter, from the field schema (one row per fact)
FIELDS: dict[str, Setter] = {
    name: _PARSERS[row.parse](row.fact) for row in gpu_fields.fields() for name in row.query_gpu
}


def _field(col: str) -> str:
    return _UNIT_RE.sub("", col.strip()).strip().lower()


# the command above a `--format=csv,noheader` paste names its columns
_COMMAND = lazyre.compile(r"--query-gpu[= ](?P<fields>[\w.,]+)")


def _header(line: str) -> list[str] | None:
    cmd = _COMMAND.search(line) if "--query-gpu" in line else None
    if cmd:
        cols = [_field(x) for x in cmd.group("fields").split(",") if x]
        return cols if any(x in FIELDS for x in cols) else None
    cols = [_field(x) for x in line.split(",")]
    known = [x for x in cols if x in FIELDS or x == "driver_version"]
    # mostly our fields, or (a query of every field 5xx+ drivers know: ~220 columns) many of them
    return cols if len(known) >= 2 and (len(known) * 2 >= len(cols) or len(known) >= 8) else None


def looks_like(sample: str) -> bool:
    for line in c.first_lines(sample, 5):
        if line.strip():
            return len(line) < MAX_LINE and _header(line) is not None
    return False


def parse(text: str | Iterable[str]) -> c.SmiDump:
    lines = text.splitlines() if isinstance(text, str) else [ln.rstrip("\r\n") for ln in text]
    dump = c.SmiDump(kind="smi_csv")
    cols: list[str] | None = None
    keys: list[tuple[tuple[str, ...], object] | None] = []
    stamps: dict[str, int] = {}  # time stamp -> rows seen with it
    samples = 0
    for line in lines:
        if not line.strip() or len(line) > MAX_LINE:
            continue
        if cols is None:
            cols = _header(line)
            continue
        if _header(line) is not None:  # a second query appended to the same file
            cols = _header(line)
            continue
        try:
            values = next(csv.reader([line], skipinitialspace=True))
        except (csv.Error, StopIteration):
            continue
        if len(values) > len(cols) and cols[-1] == "gpu_recovery_action":
            values[len(cols) - 1 :] = [",".join(values[len(cols) - 1 :])]  # a note typed after the last value
        if len(values) != len(cols):
            continue
        g = GpuFacts(index=len(dump.gpus))
        for col, val in zip(cols, values, strict=True):
            if col == "driver_version":
                dump.driver_version = dump.driver_version or c.clean(val)
                continue
            setter = FIELDS.get(col)
            if setter is not None:
                setter(g, val.strip())
        # `nvidia-smi --query-gpu=... -l 1` repeats rows per GPU: the latest sample describes "now"
        # (rows of a *different* query, e.g. --query-remapped-rows appended, are joined later by bus id)
        key = (tuple(cols), g.pci_bus_id or g.index) if (g.pci_bus_id or "index" in cols) else None
        if key is None and g.uuid:
            key = (tuple(cols), g.uuid)
        elif key is None and "timestamp" in cols:
            # `-l`/`-lms` with no GPU column: the rows of one time stamp are the GPUs (in order), the next
            # time stamp samples them again
            stamp = values[cols.index("timestamp")].strip()
            at = stamps.get(stamp, 0)
            stamps[stamp] = at + 1
            key = (tuple(cols), f"#{at}")
        same = next((i for i, k in enumerate(keys) if key is not None and k == key), None)
        if same is not None:
            g.index = dump.gpus[same].index
            dump.gpus[same] = g
            samples += 1
            continue
        keys.append(key)
        dump.gpus.append(g)
    if samples:
        dump.notes.append(f"{samples} repeated sample row(s): the last one per GPU is used")
    errors, lost = c.scan_error_lines(lines[:200])
    dump.errors = errors
    c.mark_lost(dump.gpus, lost)
    return dump
