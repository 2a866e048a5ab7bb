"""The segmenting reader's bookkeeping of lines: blank and quoted lines, runs of one class, heads.

Blank and quoted lines need no scan by grep (so a big log's reader finds them while grep still runs), and
both are exact: ``strip()`` for blank, the first non-space character ``>`` for quoted.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Sequence

from gpuclinic import lazyre

_QUOTE = lazyre.compile(r"^[ \t]*(?:>[ \t]?)+")


def blank_lines(lines: list[str]) -> list[int]:
    """The (0-based) lines that ``strip()`` to nothing."""
    return list(itertools.compress(itertools.count(), map(operator.not_, map(str.strip, lines))))


def quoted_lines(joined: str) -> list[int]:
    """The (0-based) lines of ``joined`` whose first non-space character is ``>``: one ``find`` per line
    holding a ``>``, not a regex step per character."""
    out: list[int] = []
    line = prev = 0
    i = joined.find(">")
    while i >= 0:
        ls = joined.rfind("\n", 0, i) + 1
        if ls == i or joined[ls:i].isspace():
            line += joined.count("\n", prev, ls)
            prev = ls
            out.append(line)
        nl = joined.find("\n", i)
        i = joined.find(">", nl) if nl >= 0 else -1
    return out


def quoted_lines_of(data: bytes, anchors: Sequence[tuple[int, int, bytes]]) -> list[int]:
    """:func:`quoted_lines` of the text whose UTF-8 bytes are ``data``, from the bytes: the lines are
    numbered by counting newlines from the nearest line known before each (``anchors``: grep's hit lines,
    (0-based line, byte offset, bytes) in order), not from the text's start (a 19 MB log: a count over all
    of its 38 MB of UCS-2 text, ~10 ms, for a handful of quoted lines)."""
    offsets = [off for _, off, _ in anchors]
    out: list[int] = []
    line = prev = 0
    i = data.find(b">")
    while i >= 0:
        ls = data.rfind(b"\n", 0, i) + 1
        # (str.isspace, not bytes.isspace: \x1c-\x1f and non-ASCII spaces count, as in quoted_lines)
        if ls == i or data[ls:i].decode("utf-8", "surrogateescape").isspace():
            k = bisect.bisect_right(offsets, ls) - 1
            if k >= 0 and offsets[k] > prev:
                line, prev = anchors[k][0], offsets[k]
            line += data.count(b"\n", prev, ls)
            prev = ls
            out.append(line)
        nl = data.find(b"\n", i)
        i = data.find(b">", nl) if nl >= 0 else -1
    return out


def unquote_lines(lines: list[str], quoted: list[int]) -> list[str]:
    """A quoted excerpt inside an unquoted paste ("> [ 12.3] NVRM: ..."): the lines without their markers."""
    out = list(lines)
    for k in quoted:
        if not lines[k].lstrip().startswith(">>>"):
            out[k] = _QUOTE.sub("", lines[k], count=1)
    return out


def runs(classes: list[str], special: list[int]) -> list[tuple[str, int, int]]:
    """Runs of one class (1-based, inclusive); blank lines join the run they sit in.  Only the lines in
    ``special`` (sorted 0-based) have a class other than "other"."""
    runs: list[tuple[str, int, int]] = []

    def add(c: str, a: int, b: int) -> None:
        # every line since the run's last one is blank (others start or extend runs)
        if runs and runs[-1][0] == c:
            runs[-1] = (c, runs[-1][1], b)
        else:
            runs.append((c, a, b))

    nxt = 0  # the first 0-based line not looked at yet
    for k in special:
        if k > nxt:
            add("other", nxt + 1, k)
        if classes[k] != "blank":
            add(classes[k], k + 1, k + 1)
        nxt = k + 1
    if nxt < len(classes):
        add("other", nxt + 1, len(classes))
    return runs


def rest_lines(lines: list[str], classes: list[str], special: list[int]) -> list[str]:
    """The "other" and blank lines, in order: ``lines`` without the special lines of other classes (a shell
    prompt running ``nvidia-smi --query-gpu=...`` stays: a ``--format=csv,noheader`` paste takes its columns
    from that command)."""
    out: list[str] = []
    nxt = 0
    for k in special:
        if _left_out(lines, classes, k):
            out.extend(lines[nxt:k])
            nxt = k + 1
    out.extend(lines[nxt:])
    return out


def _left_out(lines: list[str], classes: list[str], k: int) -> bool:
    return classes[k] != "blank" and not (classes[k] == "prompt" and "--query-gpu" in lines[k])


def rest_head(lines: list[str], classes: list[str], special: list[int], size: int) -> list[str]:
    """``rest_lines(...)[:head_end(rest_lines(...), size)]`` without building all of the rest: its first
    lines, until they and their newlines reach ``size`` characters."""
    out: list[str] = []
    total = nxt = 0
    for k in [*(k for k in special if _left_out(lines, classes, k)), len(lines)]:
        for ln in itertools.islice(lines, nxt, k):
            if total >= size:
                return out
            out.append(ln)
            total += len(ln) + 1
        nxt = k + 1
    return out


def rest_line_at(lines: list[str], classes: list[str], special: list[int], n: int) -> int:
    """The index in ``lines`` just after the first ``n`` lines :func:`rest_lines` keeps."""
    kept = nxt = 0
    for k in special:
        if _left_out(lines, classes, k):
            if kept + (k - nxt) >= n:
                break
            kept += k - nxt
            nxt = k + 1
    return nxt + (n - kept)


def head(lines: list[str], size: int, lo: int = 0, hi: int | None = None) -> str:
    """The first ``size`` characters (or more) of ``"\\n".join(lines[lo:hi])``, without joining all of it."""
    return "\n".join(lines[lo : head_end(lines, size, lo, hi)])


def head_end(lines: list[str], size: int, lo: int = 0, hi: int | None = None) -> int:
    """The end of the lines :func:`head` joins: the first line after ``lo`` by which the lines and their
    newlines reach ``size`` characters (their running sums in C, a few hundred lines at a time)."""
    end = len(lines) if hi is None else hi
    n, total = lo, 0
    while n < end and total < size:
        chunk = lines[n : min(end, n + _CHUNK)]
        # the total after i more lines (newlines included), rising: the first i at which it reaches size
        sums = itertools.accumulate(map(len, chunk), initial=total)
        totals = list(map(operator.add, sums, range(len(chunk) + 1)))
        i = min(bisect.bisect_left(totals, size, 1), len(chunk))
        total = totals[i]
        n += i
    return n


_CHUNK = 256
