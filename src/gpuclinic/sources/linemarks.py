"""Lines the segmenting reader marks before it reads a text: blank lines and quoted lines.

Both are found without a scan by grep (so a big log's reader finds them while grep still runs), and
both are exact: ``strip()`` for blank, the first non-space character ``>`` for quoted.
"""

from __future__ import annotations

import itertools
import operator

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


def unquote_lines(lines: list[str], quoted: list[int]) -> list[str]:
    """A quoted excerpt inside an unquoted paste ("> [ 12.3] NVRM: ..."): the lines without their markers."""
    out = list(lines)
    for k in quoted:
        if not lines[k].lstrip().startswith(">>>"):
            out[k] = _QUOTE.sub("", lines[k], count=1)
    return out
