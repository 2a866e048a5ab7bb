"""The big-input index of the segmenting reader (issue 14): its kernel candidate lines, found with one
search per needle over the hit lines joined (``LineHits.only``), are the lines the per-line test it
replaced finds (``needle in line.lower()`` for each hit line and needle)."""

from __future__ import annotations

import random
from pathlib import Path

from gpuclinic import textscan
from gpuclinic.sources import segments as S

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _big_text() -> str:
    rng = random.Random(5)
    texts = [p.read_text(errors="replace") for p in sorted((FIXTURES / "kernel_log").glob("*.log"))]
    texts += [p.read_text(errors="replace") for p in sorted((FIXTURES / "software" / "errors").glob("*.txt"))]
    parts = []
    for i in range(4000):
        prose = f"step {i} loss {rng.random():.3f} NvRm-ish\n"
        parts.append(rng.choice(texts) if rng.random() < 0.05 else prose)
    return "".join(parts)


def test_kernel_keys_are_the_lines_the_per_line_test_finds() -> None:
    text = _big_text()
    lines = text.split("\n")
    hits = textscan.line_hits(text, S._needles())
    assert hits is not None and len(lines) >= S.BIG
    ix = S._Index(lines, text, hits, [], None)
    needles = [n.encode() for n in S._KERNEL_NEEDLES]
    assert all(b"\n" not in n for n in needles)
    old = {k for k, _, b in hits.lines if any(n in b.lower() for n in needles)}
    assert ix.kernel_keys == old
    assert 100 < len(old) < len(hits.lines)  # kernel lines among other hit lines (the error texts')


def test_evidence_signatures_on_the_hit_lines_find_what_every_line_gives() -> None:
    """``signals.scan_lines(prefiltered=True)`` over the index's hit lines (its needle pass then runs over
    those lines only) against the plain scan of every line: the same signals, events and claimed lines."""
    from gpuclinic.sources import signals
    from gpuclinic.sources.evidence_text import new_snapshot

    text = _big_text()
    lines = text.split("\n")
    hits = textscan.line_hits(text, S._needles())
    assert hits is not None
    fast, full = new_snapshot(), new_snapshot()
    got = signals.scan_lines(fast, ((k + 1, lines[k]) for k, _, _ in hits.lines), "t", prefiltered=True)
    want = signals.scan_lines(full, enumerate(lines, start=1), "t")
    assert got == want and len(want) > 20
    assert repr(fast.signals) == repr(full.signals) and fast.signals == full.signals
    assert repr(fast.kernel_events) == repr(full.kernel_events) and fast.kernel_events
