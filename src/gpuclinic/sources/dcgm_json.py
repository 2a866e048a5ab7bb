"""``dcgmi diag -j`` output saved as evidence: each test result whose status is Fail becomes a
``dcgm.diag_fail`` signal (the same code the text table's ``Fail - GPU: N`` / ``GPU1: Fail`` rows give,
``evidence_signatures.json`` entry ``dcgm_diag_test_fail``).  The JSON is walked by the one reader of
that layout, ``accept.checks._walk_dcgm`` (DCGM 3.x "test_categories" -> "tests" -> "results"; 4.x the
same with "Fail" spelled so)."""

from __future__ import annotations

import json

from gpuclinic.facts.snapshot import Snapshot

MARKS = ('"DCGM GPU Diagnostic"', '"DCGM Diagnostic"')
_SIGNATURE = "dcgm_diag_test_fail"


def is_dcgm_json(text: str) -> bool:
    return "{" in text and any(m in text for m in MARKS)


def read(snap: Snapshot, lines: list[str], origin: str, first: int) -> int:
    """Fail results of the ``dcgmi diag -j`` JSON starting in line ``first`` (1-based) of ``lines`` ->
    signals.  Returns the last line the JSON takes (it runs past the segment: one-line result objects
    split it into other segments), or 0 when it does not parse (a cut paste stays unread)."""
    from gpuclinic.accept.checks import _walk_dcgm
    from gpuclinic.sources.signals import evidence_signatures, signal_of

    text = "\n".join(lines[first - 1 :])
    start = text.find("{")
    try:
        data, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return 0
    found: list[tuple[str, str, str]] = []
    _walk_dcgm(data, found)
    if not found:
        return 0
    last = first + text.count("\n", 0, end)
    run = lines[first - 1 : last]
    sig = next(s for s in evidence_signatures() if s.id == _SIGNATURE)
    for name, status, info in found:
        if status.lower() != "fail":
            continue
        line = f"{name}: {status}" + (f" - {info}" if info else "")
        snap.signals.append(signal_of(sig, line, origin, _lineno(run, name, first), {"test": name}))
    return last


def _lineno(run: list[str], name: str, first: int) -> int | None:
    needle = f'"{name}"'
    return next((first + i for i, ln in enumerate(run) if needle in ln), None)
