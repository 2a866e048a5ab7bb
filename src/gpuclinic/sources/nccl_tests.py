"""nccl-tests output (all_reduce_perf and the other ``*_perf`` benchmarks) as users paste it.

Why a reader: a pasted benchmark table must be *read* (doctor says what it saw, not "not recognised").
Its one verdict, results out of bounds, is the error signature ``nccl.tests_wrong_results``; the bus
bandwidth is reported as a note, not judged: what is low depends on the GPUs, the NVLink/PCIe topology and
the fabric between the nodes, none of which the table names.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic import lazyre
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.record import record

_AVG = lazyre.compile(r"Avg bus bandwidth\s*:\s*([\d.]+)", need="Avg bus bandwidth")
_OOB = lazyre.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)", need="Out of bounds values")
# size count type redop root time algbw busbw #wrong (the out-of-place half; older tables have no "root" and
# an "error" column, a float such as 2e-07, where #wrong is)
_ROW = lazyre.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(?:-?\d+\s+)?([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
    r"(\d+|N/A|[\d.]+e[+-]\d+)(?:\s|$)"
)
MAX_ROWS = 400


@record
class NcclTestsRun:
    """What one pasted benchmark run shows."""

    rows: int = 0
    largest_bytes: int = 0
    largest_busbw: float | None = None
    avg_busbw: float | None = None
    out_of_bounds: int | None = None


def parse(lines: list[str], where: Iterable[int] | None = None) -> tuple[NcclTestsRun, list[int]]:
    """The run shown in ``lines`` and the 1-based lines used (the table's header, rows and summary)."""
    run = NcclTestsRun()
    used: list[int] = []
    marks = range(len(lines)) if where is None else sorted(set(where))
    for k in marks:
        ln = lines[k]
        if "busbw" in ln and "size" in ln and ln.lstrip().startswith("#"):
            used.append(k + 1)
            j = k + 1
            while j < len(lines) and j - k <= MAX_ROWS:
                row = lines[j]
                if row.lstrip().startswith("#") and "(B)" in row:
                    used.append(j + 1)
                elif m := _ROW.match(row):
                    run.rows += 1
                    used.append(j + 1)
                    if int(m.group(1)) >= run.largest_bytes:
                        run.largest_bytes, run.largest_busbw = int(m.group(1)), float(m.group(7))
                elif row.strip():
                    break
                j += 1
        elif m := _AVG.search(ln):
            run.avg_busbw = float(m.group(1))
            used.append(k + 1)
        elif m := _OOB.search(ln):
            run.out_of_bounds = int(m.group(1))
            used.append(k + 1)
    return run, sorted(set(used))


def note(run: NcclTestsRun, origin: str) -> str:
    """The note a read run leaves: what it measured, in its own units."""
    parts = []
    if run.rows:
        parts.append(f"{run.rows} sizes, busbw {run.largest_busbw:g} GB/s at {run.largest_bytes} B")
    if run.avg_busbw is not None:
        parts.append(f"avg bus bandwidth {run.avg_busbw:g} GB/s")
    if run.out_of_bounds is not None:
        parts.append(f"out of bounds values {run.out_of_bounds}")
    return f"{origin}: nccl-tests run read: " + ", ".join(parts)


def apply(snap: Snapshot, run: NcclTestsRun, origin: str) -> None:
    snap.notes.append(note(run, origin))
