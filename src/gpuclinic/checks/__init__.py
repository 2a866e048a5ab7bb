"""Checks: small pure functions from a :class:`Snapshot` to :class:`Finding` objects.

Each module in this package registers its checks with :func:`check`; :func:`run_checks` imports
them all, runs every one, and turns a check that cannot decide (:class:`CheckSkipped`) or that
breaks into a "could not check" line instead of a crash.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Finding, Skipped

CheckFn = Callable[[Snapshot], Iterable[Finding]]


class CheckSkipped(Exception):
    """Raised by a check that lacks the facts it needs; the message says why."""


@dataclass(frozen=True)
class Check:
    name: str
    fn: CheckFn
    codes: tuple[str, ...]
    what: str  # human name for "could not check <what>"


_REGISTRY: dict[str, Check] = {}
_loaded = False


def check(name: str, *, codes: Iterable[str], what: str | None = None) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as a check producing findings with the given stable ``codes``.

    A code ending in ``.*`` (``xid.*``) stands for a family of codes.
    """

    def deco(fn: CheckFn) -> CheckFn:
        _REGISTRY[name] = Check(name=name, fn=fn, codes=tuple(codes), what=what or name)
        return fn

    return deco


def load_all() -> dict[str, Check]:
    """Import every check module once, so their ``@check`` decorators run."""
    global _loaded
    if not _loaded:
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{__name__}.{mod.name}")
        _loaded = True
    return dict(_REGISTRY)


def run_checks(snap: Snapshot, *, only: Iterable[str] | None = None) -> tuple[list[Finding], list[Skipped]]:
    """Run all (or ``only`` the named) checks; never raises because of one check."""
    checks = load_all()
    wanted = set(only) if only is not None else None
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for name, c in checks.items():
        if wanted is not None and name not in wanted:
            continue
        try:
            findings.extend(c.fn(snap))
        except CheckSkipped as e:
            skipped.append(Skipped(c.what, str(e)))
        except Exception as e:  # a bug in one check must not hide the others
            skipped.append(Skipped(c.what, f"check {name} failed: {type(e).__name__}: {e}"))
    return findings, skipped
