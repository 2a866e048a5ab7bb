"""The terminal width a log was hard-wrapped at, from its line lengths (``rejoin.rejoined`` undoes the
wrap so a wrapped error message still matches).

The most common long line length, seen at least twice and almost never exceeded, is the width, unless
the lines of that length are table rows or log records that merely share a length.
"""

from __future__ import annotations

import bisect
import re

WRAP_MIN = 60  # a terminal narrower than this is not a hard wrap worth undoing
_SAMPLE = 64

# the start of a log record: two records in a row are two lines, whatever their length
RECORD = re.compile(
    r"^\s*(?:\[|<\d|\d{4}-\d\d-\d\d|\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d |[IWEF]\d{4} |[\w.-]+\[\d+\]:|"
    r"\d{4}/\d\d/\d\d|frame #|File \"|Traceback|#\d)"
)


def at_length(lens: list[int], width: int, stop: int, limit: int | None = None) -> list[int]:
    """The first ``limit`` (or all) indexes below ``stop`` whose length is ``width``: ``list.index`` steps
    through a big log's line lengths in C, not a generator in Python."""
    out: list[int] = []
    k = 0
    while limit is None or len(out) < limit:
        try:
            k = lens.index(width, k, stop)
        except ValueError:
            break
        out.append(k)
        k += 1
    return out


def wrap_width(lines: list[str], lens: list[int] | None = None, tail: int = 0) -> int | None:
    """``lens``: ``[len(ln) for ln in lines]``, when the caller has it; ``tail``: 1 when an empty line
    follows ``lines`` (a text's final newline)."""
    lens = list(map(len, lines)) if lens is None else lens
    counts = length_counts(lens, WRAP_MIN)
    total = sum(counts.values())
    for width, seen in sorted(counts.items(), key=lambda kv: (-kv[1], -kv[0]))[:3]:
        if seen < 2:
            return None
        if sum(c for n, c in counts.items() if n > width) > max(2, total // 20):
            continue
        # tables and logs whose records merely share a length are not wrapped: look at a sample
        sample = at_length(lens, width, len(lines) - 1 + tail, _SAMPLE)
        tables = sum(1 for k in sample if lines[k].lstrip().startswith(("|", "+")))
        # (the line after the last is the empty one of ``tail``: no record)
        records = sum(
            1 for k in sample if k + 1 < len(lines) and RECORD.match(lines[k]) and RECORD.match(lines[k + 1])
        )
        if (tables + records) * 2 <= len(sample):
            return width
    return None


def length_counts(lens: list[int], lo: int) -> dict[int, int]:
    """How many of ``lens`` have each length from ``lo`` on: runs of the sorted list (a C sort of small
    ints costs less than a ``Counter`` step per line)."""
    s, out = sorted(lens), {}
    i = bisect.bisect_left(s, lo)
    while i < len(s):
        j = bisect.bisect_right(s, s[i], i)
        out[s[i]] = j - i
        i = j
    return out
