"""The literal every match of a regex starts with, read from its source: a cheap test before a scan.

``explain`` runs each error signature's patterns over the candidate lines of a big log; most patterns of a
signature whose needles are there still find nothing.  A plain ``literal in text`` (a fast substring
search) rules such a pattern out before the regex engine steps through the text.  Only the plain start of
a pattern counts: literal characters (and escaped punctuation) up to the first metacharacter, none at all
when the pattern has a top-level ``|`` (then no single start is required), and a character a ``*``, ``?``
or ``{`` makes optional is left out.  Patterns with inline flags start with ``(``: no literal.
"""

from __future__ import annotations

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
    depth = 0
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class: up to its closing "]" (a "]" right after "[" or "[^" is a member)
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


_PLAIN = r"[^\\.^$*+?{}\[\]()|]+"  # literal characters only
_ALTS = lazyre.compile(rf"\(\?:((?:{_PLAIN}\|)+{_PLAIN})\)(?![*+?{{])")  # (?:one|two|three), not optional
_CLASS = lazyre.compile(r"\[([A-Za-z0-9]+)\](?![*+?{])")  # [Tt], not optional


@cache
def leading_literals(pattern: str) -> tuple[str, ...] | None:
    """Texts one of which every match of ``pattern`` (compiled without flags) starts with, for a pattern
    without a single leading literal: ``(?m)^literal``, ``(?:one|two)...`` with plain branches, or
    ``[Tt]oo ...`` (each member, then the literal after the class); else None."""
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
    return None
