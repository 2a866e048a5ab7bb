"""The bytes of a text that grep -P and Python's ``re`` read differently, and the lines holding them.

On plain ASCII PCRE's ``\\s \\d \\w`` are ``re``'s, but ``re``'s are Unicode-aware and its ``\\s`` takes
``\\x1c``-``\\x1f``: a line holding such a byte is one grep cannot judge for ``re`` (``textscan``'s line-start
scan hands those lines to the caller to check itself).
"""

from __future__ import annotations

import bisect

ODD_ASCII = (b"\x1c", b"\x1d", b"\x1e", b"\x1f")  # whitespace to re's \s, not to PCRE's
PLAIN = bytes(range(0x1C)) + bytes(range(0x20, 0x80))  # the bytes both engines read alike
CHUNK = 1 << 16


def odd_bytes(data: bytes) -> list[int] | None:
    """The offsets of the bytes outside ``PLAIN``, in order, or None when there are more than one per KiB
    (and 64).  Looked for in 64 KiB chunks: a chunk that is ASCII without \\x1c-\\x1f (``isascii`` and four
    ``memchr``, a fraction of a byte-by-byte pass) holds none, and only the others are filtered byte by
    byte, then searched with a ``memchr`` pass per distinct such byte."""
    limit = len(data) // 1024 + 64
    found = 0
    pos: list[int] = []
    for a in range(0, len(data), CHUNK):
        chunk = data[a : a + CHUNK]
        if chunk.isascii() and not any(c in chunk for c in ODD_ASCII):
            continue
        odd = chunk.translate(None, PLAIN)  # those bytes, in order
        found += len(odd)
        if found > limit:
            return None
        for v in set(odd):
            b = bytes((v,))
            i = chunk.find(b)
            while i >= 0:
                pos.append(a + i)
                i = chunk.find(b, i + 1)
    pos.sort()
    return pos


def odd_lines(data: bytes, anchors: list[tuple[int, int]]) -> list[int] | None:
    """The 0-based lines of ``data`` holding a byte outside ``PLAIN``, or None when there are many: a
    ``memchr`` pass per distinct such byte (a log has a few characters: a progress bar, a check mark).
    ``anchors``: (0-based line, byte offset of its start) of lines known already (the literal grep's), so
    the newlines are counted from the nearest one, not from the start of the text."""
    pos = odd_bytes(data)
    if pos is None:
        return None
    offsets = [off for _, off in anchors]
    out: list[int] = []
    line = prev = 0
    for i in sorted(pos):
        k = bisect.bisect_right(offsets, i) - 1
        if k >= 0 and anchors[k][1] > prev:
            line, prev = anchors[k]
        line += data.count(b"\n", prev, i)
        prev = i
        if not out or out[-1] != line:
            out.append(line)
    return out
