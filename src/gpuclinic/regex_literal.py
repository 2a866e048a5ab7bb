"""The literal every match of a regex starts with, read from its source: a cheap test before a scan.

``explain`` runs each error signature's patterns over the candidate lines of a big log; most patterns of a
signature whose needles are there still find nothing.  A plain ``literal in text`` (a fast substring
search) rules such a pattern out before the regex engine steps through the text.  Only the plain start of
a pattern counts: literal characters (and escaped punctuation) up to the first metacharacter, none at all
when the pattern has a top-level ``|`` (then no single start is required), and a character a ``*``, ``?``
or ``{`` makes optional is left out.  Patterns with inline flags start with ``(``: no literal.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from gpuclinic import lazyre

_SPECIAL = frozenset(".^$*+?{}[]()|\\")
MIN_LITERAL = 3  # shorter starts rule little out


@cache
def leading_literal(pattern: str) -> str | None:
    """The text every match of ``pattern`` (compiled without flags) starts with, or None."""
    if _top_level_bar(pattern):
        return None
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if not nxt or nxt.isalnum() or not nxt.isascii():
                break  # a class (\d \w \s), an anchor (\b \A), a reference or an escape like \n: stop
            ch, step = nxt, 2
        elif c in _SPECIAL:
            break
        else:
            ch, step = c, 1
        after = pattern[i + step : i + step + 1]
        if after and after in "*?{":
            break  # this character may be absent
        out.append(ch)
        if after == "+":
            break  # there once at least; what follows starts after a repeat
        i += step
    lit = "".join(out)
    return lit if len(lit) >= MIN_LITERAL else None


def _top_level_bar(pattern: str) -> bool:
    """``pattern`` has a ``|`` outside every group and class: its branches start differently."""
    return any(c == "|" and depth == 0 for _, c, depth in _structure(pattern))


def _structure(pattern: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, depth after it) of each ``(``, ``)`` and ``|`` outside escapes and classes: what
    the scans for a top-level ``|``, a group's end and a split at the top level walk."""
    depth, i, n = 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
        elif c in "()|":
            depth += 1 if c == "(" else -1 if c == ")" else 0
            yield i, c, depth
        i += 1


_PLAIN = r"[^\\.^$*+?{}\[\]()|]+"  # literal characters only
_ALTS = lazyre.compile(rf"\(\?:((?:{_PLAIN}\|)+{_PLAIN})\)(?![*+?{{])")  # (?:one|two|three), not optional
_CLASS = lazyre.compile(r"\[([A-Za-z0-9]+)\](?![*+?{])")  # [Tt], not optional


@cache
def leading_literals(pattern: str) -> tuple[str, ...] | None:
    """Texts one of which every match of ``pattern`` (compiled without flags) starts with, for a pattern
    without a single leading literal: ``(?m)^literal``, ``(?:one|two)...`` with plain branches, ``[Tt]oo
    ...`` (each member, then the literal after the class), a lookaround first (``(?<![A-Za-z])State:``:
    it matches no character, so the match starts with what follows), or an optional group first
    (``(?:Reset |Resetting )?TDR``: the group's starts and those of what follows); else None."""
    if _top_level_bar(pattern):
        return None
    if pattern.startswith("(?m)^"):  # ^ is zero-width: the match starts with what follows it
        lit = leading_literal(pattern[5:])
        return (lit,) if lit else None
    if m := _ALTS.match(pattern):
        return tuple(dict.fromkeys(m.group(1).split("|")))
    if m := _CLASS.match(pattern):
        rest = leading_literal(pattern[m.end() :])
        return tuple(dict.fromkeys(c + rest for c in m.group(1))) if rest else None
    end = _group_end(pattern) if pattern.startswith("(?") else None
    if end is None:
        return None
    if pattern.startswith(("(?<!", "(?<=", "(?!", "(?=")):
        return _starts_of(pattern[end + 1 :])
    if pattern.startswith("(?:") and pattern[end + 1 : end + 2] == "?":  # (?:...)? , ?? or ?+
        rest = pattern[end + 2 :]
        rest = rest[1:] if rest[:1] in ("?", "+") else rest
        group, after = _branch_starts(pattern[3:end]), _starts_of(rest)
        return tuple(dict.fromkeys((*group, *after))) if group and after else None
    return None


def _starts_of(pattern: str) -> tuple[str, ...] | None:
    lit = leading_literal(pattern)
    return (lit,) if lit else leading_literals(pattern)


def _branch_starts(group: str) -> tuple[str, ...] | None:
    """The starts of every branch of a group's body (``a|b|c``), or None when one branch has none."""
    out: list[str] = []
    for branch in _top_level_split(group):
        starts = _starts_of(branch)
        if not starts:
            return None
        out.extend(starts)
    return tuple(out)


def _top_level_split(pattern: str) -> list[str]:
    """``pattern`` cut at its top-level ``|``."""
    cuts = [i for i, c, depth in _structure(pattern) if c == "|" and depth == 0]
    return [pattern[a + 1 : b] for a, b in zip([-1, *cuts], [*cuts, len(pattern)], strict=True)]


def _class_end(pattern: str, i: int) -> int:
    """The index of the "]" closing the class that opens at ``pattern[i]`` (a "]" right after "[" or
    "[^" is a member), or the end."""
    n = len(pattern)
    i += 1
    if i < n and pattern[i] == "^":
        i += 1
    if i < n and pattern[i] == "]":
        i += 1
    while i < n and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def _group_end(pattern: str) -> int | None:
    """The index of the ")" closing the group that opens at ``pattern[0]``, or None."""
    return next((i for i, c, depth in _structure(pattern) if c == ")" and depth == 0), None)
