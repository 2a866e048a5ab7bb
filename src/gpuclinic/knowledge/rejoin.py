"""Logical lines cut over several physical ones, joined again for the error signatures' second pass.

A terminal hard-wraps a long message mid-word (the wrap width: :mod:`gpuclinic.knowledge.wrapwidth`), and a
table cell that does not fit continues on the next row (Triton's ``| ... operation no |`` then ``|   |   |
t supported |``); a signature looking for the whole message finds it only in the joined line.
"""

from __future__ import annotations

import re

from gpuclinic.bigtext import BigText, Text, as_str
from gpuclinic.knowledge.wrapwidth import RECORD, at_length, wrap_width
from gpuclinic.textscan import split

MAX_JOIN = 32  # physical lines per logical line, at most
_TABLE_CONT = re.compile(r"^(\s*\|(?:\s*\|)+ )\S")  # "|      |     | rest of the last cell |"


def rejoined(text: Text) -> list[tuple[int, str]]:
    """The logical lines that were cut over several physical lines: (0-based first line, joined text).

    Two cuts are undone: a terminal's hard wrap (the most common long line length, seen at least twice
    and almost never exceeded, is the terminal width: such a line continues on the next one, mid-word,
    unless both lines start like log records) and a table cell continued on the next row
    (``| ... operation no |`` then ``|    |    | t supported |``, as Triton prints).  Only logical lines
    made of two or more physical lines are returned (none for most texts).
    """
    # the segmenting reader's lines of the same text, when it read it; ``tail``: an empty last line follows
    lines, tail = split(text)
    count = len(lines) + tail
    if count < 2:
        return []
    lens = list(map(len, lines))
    width = wrap_width(lines, lens, tail)
    wrapped = at_length(lens, width, count - 1) if width is not None else []
    starts = sorted(set(_table_rows(text)) | set(wrapped))
    if not starts:
        return []
    out: list[tuple[int, str]] = []
    i = 0
    for k in starts:
        if k < i:
            continue
        i = k
        parts, j = [lines[i].rstrip("\r")], i
        while j + 1 < count and j - i < MAX_JOIN:
            nxt = lines[j + 1].rstrip("\r") if j + 1 < len(lines) else ""
            last = lines[j].rstrip("\r")
            if (
                width
                and len(lines[j]) == width
                and nxt.strip()
                and not last.lstrip().startswith(("|", "+"))
                and not (RECORD.match(nxt) and RECORD.match(last))
            ):
                parts.append(nxt)
            elif (
                last.lstrip().startswith("|")
                and last.rstrip().endswith("|")
                and (m := _TABLE_CONT.match(nxt))
            ):
                head = parts[-1].rstrip()[:-1]
                parts[-1] = head[:-1] if head.endswith(" ") else head
                parts.append(nxt[m.end(1) :].rstrip().rstrip("|").rstrip())
            else:
                break
            j += 1
        if j > i:
            out.append((i, "".join(parts)))
        i = j + 1
    return out


_TABLE_PAIR = re.compile(r"\|[ \t]*\r?\n(?=[ \t]*\|(?:[ \t]*\|)+ \S)")  # a row, then a continuation row


_PIPES_ONE_BY_ONE = 4096  # "|" tried one by one (a memchr to each); past these, the regex's own scan


def _table_rows(text: Text) -> list[int]:
    """0-based numbers of the table rows whose last cell continues on the next row.  A match starts at a
    "|": the pattern is tried at each "|" (found at ``memchr`` speed; a long log has a few), the same
    matches as its scan of every character; a text full of tables is left to that scan."""
    if isinstance(text, BigText):
        rows = _table_rows_of(text.data)
        if rows is not None:
            return rows
        text = as_str(text)
    out: list[int] = []
    line, pos = 0, 0
    i = text.find("|")
    tried = 0
    while i >= 0:
        tried += 1
        if tried > _PIPES_ONE_BY_ONE:
            for mm in _TABLE_PAIR.finditer(text, i):
                line += text.count("\n", pos, mm.start())
                pos = mm.start()
                out.append(line)
            break
        m = _TABLE_PAIR.match(text, i)
        if m is None:
            i = text.find("|", i + 1)
            continue
        line += text.count("\n", pos, i)
        pos = i
        out.append(line)
        i = text.find("|", m.end())
    return out


def _table_rows_of(data: bytes) -> list[int] | None:
    """:func:`_table_rows` of the text whose UTF-8 bytes are ``data`` (a :class:`BigText`'s), or None past
    ``_PIPES_ONE_BY_ONE`` pipes.  A match ends at the newline after its "|" and looks no further than the
    next line's end, so the pattern is tried on those two lines decoded (only where the "|" ends its
    line but for blanks)."""
    out: list[int] = []
    line = pos = 0
    i = data.find(b"|")
    for _ in range(_PIPES_ONE_BY_ONE):
        if i < 0:
            return out
        nl = data.find(b"\n", i)
        if nl < 0:
            return out
        if data[i + 1 : nl].strip(b" \t"):  # more than blanks after it: no row end
            i = data.find(b"|", i + 1)
            continue
        nxt = data.find(b"\n", nl + 1)
        if _TABLE_PAIR.match(data[i : len(data) if nxt < 0 else nxt].decode("utf-8", "surrogateescape")):
            line += data.count(b"\n", pos, i)
            pos = i
            out.append(line)
            i = data.find(b"|", nl + 1)
        else:
            i = data.find(b"|", i + 1)
    return out if i < 0 else None
