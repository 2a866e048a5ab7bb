"""Module-level regexes compiled when first used, not at import.

``explain`` on one log loads the readers of every format it might meet, and compiling their ~300
patterns at import was a fifth of its run; most never meet a line.  :func:`compile` returns a
:class:`LazyPattern` with the methods of ``re.Pattern`` that the readers call: the first call compiles the
pattern (``re.compile``, so the same flags and errors) and puts the compiled pattern's bound methods on the
instance, so every later call goes straight to ``re`` at the cost of an attribute lookup.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from gpuclinic import recache


class LazyPattern:
    """``re.compile(pattern, flags)``, compiled on the first match, search or substitution."""

    def __init__(self, pattern: str, flags: int | re.RegexFlag = 0, need: str | None = None) -> None:
        if need is not None and (not need or flags & re.IGNORECASE):
            raise ValueError("need: a non-empty literal of a case-sensitive pattern")
        self.pattern = pattern
        self.flags = flags
        self.need = need
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now on the first use)."""
        c = self._compiled
        if c is None:
            c = self._compiled = recache.compile(self.pattern, self.flags)
            for name in _METHODS:  # later calls: the bound method of the compiled pattern, from __dict__
                self.__dict__[name] = getattr(c, name)
            if self.need is not None:
                for name in ("search", "match", "fullmatch"):
                    self.__dict__[name] = _needing(self.need, getattr(c, name))
        return c

    def search(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        return self.compiled.search(string, pos, endpos)

    def match(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        return self.compiled.match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string, pos, endpos)

    def findall(self, string: str, pos: int = 0, endpos: int = 2**63 - 1) -> list[Any]:
        return self.compiled.findall(string, pos, endpos)

    def split(self, string: str, maxsplit: int = 0) -> list[str | Any]:
        return self.compiled.split(string, maxsplit)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count)

    def subn(
        self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0
    ) -> tuple[str, int]:
        return self.compiled.subn(repl, string, count)

    @property
    def groupindex(self) -> dict[str, int]:
        return dict(self.compiled.groupindex)

    @property
    def groups(self) -> int:
        return self.compiled.groups

    def __repr__(self) -> str:
        return f"lazyre.compile({self.pattern!r}, {self.flags!r})"


_METHODS = ("search", "match", "fullmatch", "finditer", "findall", "split", "sub", "subn")


def _needing(need: str, fn: Callable[..., re.Match[str] | None]) -> Callable[..., re.Match[str] | None]:
    def call(string: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        return fn(string, pos, endpos) if need in string else None

    return call


def compile(pattern: str, flags: int | re.RegexFlag = 0, *, need: str | None = None) -> LazyPattern:
    """A pattern compiled on first use (see the module's note).

    ``need``: a literal that every match contains.  ``search``, ``match`` and ``fullmatch`` of a string
    without it return None at the cost of an ``in`` test: a pattern that starts with a free-form word
    (``[\\w.-]+ BDF: ...``) is tried at every position of every line it is searched in, ~3-6 us a line.
    """
    return LazyPattern(pattern, flags, need)
