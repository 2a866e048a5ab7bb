"""The two grep scans of a big ``explain`` input, started as soon as its bytes are read.

The literals a big log is searched for (~400: kernel marks, the readers' keys, every signature's
triggers) and the line-start pattern are defined by the readers, and loading those to learn them took the
first ~35 ms of a run, while grep's literal scan of a 19 MB log takes ~95 ms of the second core: the
main process then waited for it.  What the last run searched for is kept in a small file (where the
package's bytecode goes, as ``recache`` keeps compiled regexes), so the scans start before the readers
load.

The file can only save time.  A scan started from it is taken over by the reader only when it searched
for every literal the reader asks for and the same pattern (``textscan.start_line_hits`` and
``prefetch_line_starts`` check); otherwise the reader starts its own and :func:`keep` writes the plan it
used.  ``PYTHONDONTWRITEBYTECODE`` and ``GPUCLINIC_RECACHE=0`` apply as for ``recache``.
"""

from __future__ import annotations

import marshal
import sys

from gpuclinic import recache

# (the size from which an input is scanned ahead, the literals, the line-start pattern)
Plan = tuple[int, tuple[str, ...], str]

_FILE = f"scanplan-{sys.implementation.cache_tag}.marshal"
_LOADED: list[Plan | None] = []  # the plan read from the file this run (one entry once read)


def cached() -> Plan | None:
    """The plan the file holds, or None (no file, unreadable, foreign, or the cache is off)."""
    if _LOADED:
        return _LOADED[0]
    plan: Plan | None = None
    if recache.switched_on():
        for path in recache.paths(_FILE):
            try:
                with open(path, "rb") as fh:
                    blob = marshal.loads(fh.read())
            except (OSError, ValueError, EOFError, TypeError):
                continue
            if _valid(blob):
                plan = (blob[0], tuple(blob[1]), blob[2])
                break
    _LOADED.append(plan)
    return plan


def _valid(blob: object) -> bool:
    return (
        isinstance(blob, tuple)
        and len(blob) == 3
        and isinstance(blob[0], int)
        and isinstance(blob[1], tuple)
        and all(isinstance(n, str) for n in blob[1])
        and isinstance(blob[2], str)
    )


def keep(plan: Plan) -> None:
    """Write ``plan`` for the next run when the file does not hold it already (atomically; never
    raises)."""
    if cached() == plan or not recache.writable():
        return
    _LOADED[:] = [plan]
    blob = marshal.dumps(plan)
    for path in recache.paths(_FILE):
        if recache.write_atomic(path, blob):
            return
