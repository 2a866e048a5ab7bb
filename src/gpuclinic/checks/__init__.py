"""Detectors: one per failure class, each the only definition of its codes.

A detector (``gpu_presence``, ``hbm``, ``heat``, ``pcie``...; the classes are named in
``knowledge/data/codes.json``) is the set of checks whose codes belong to that class.  A check is a
small pure function from a :class:`Snapshot` to findings, registered with :func:`check`; every code
it declares must be in the knowledge, which holds its one severity rule, family and runbook.
:meth:`Detector.evaluate` runs on one snapshot (doctor, ``doctor --from``, explain, the run
pre-flight); :meth:`Detector.observe` runs the same rules on every sample of a window (watch, run) and
keeps a fault seen in any of them.  :func:`run_checks` runs everything and turns a check that cannot decide
(:class:`CheckSkipped`) or that breaks into a "could not check" line instead of a crash.
"""

from __future__ import annotations

import copy
import importlib
import os
from collections.abc import Callable, Iterable

from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Finding, Severity, Skipped
from gpuclinic.record import record

CheckFn = Callable[[Snapshot], Iterable[Finding]]


class CheckSkipped(Exception):
    """Raised by a check that lacks the facts it needs; the message says why."""


@record(frozen=True)
class Check:
    """A registered check: its function, the codes it may emit and what it checks (for skip lines)."""

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

    codes = tuple(codes)
    from gpuclinic.knowledge.codes import require

    for c in codes:
        require(c)  # a code must be in knowledge/data/codes.json before a check may emit it

    def deco(fn: CheckFn) -> CheckFn:
        _REGISTRY[name] = Check(name=name, fn=fn, codes=codes, what=what or name)
        return fn

    return deco


def load_all() -> dict[str, Check]:
    """Import every check module once, so their ``@check`` decorators run."""
    global _loaded
    if not _loaded:
        for name in _module_names(__path__[0]):
            importlib.import_module(f"{__name__}.{name}")
        _loaded = True
    return dict(_REGISTRY)


def _module_names(directory: str) -> list[str]:
    """The check modules in ``directory``, sorted: ``*.py`` files and packages not starting with ``_``.

    A directory listing rather than ``pkgutil.iter_modules``, whose import costs every doctor run ~1 ms.
    """
    out = set()
    for entry in os.listdir(directory):
        stem, ext = os.path.splitext(entry)
        if entry.startswith("_") or not stem.isidentifier():
            continue
        if ext == ".py" or not ext and os.path.isfile(os.path.join(directory, entry, "__init__.py")):
            out.add(stem)
    return sorted(out)


def run_checks(snap: Snapshot, *, only: Iterable[str] | None = None) -> tuple[list[Finding], list[Skipped]]:
    """Run all (or ``only`` the named) checks; never raises because of one check.  Every finding's remedy
    is its code's runbook first step (:func:`gpuclinic.knowledge.runbooks.finding_remedy`)."""
    from gpuclinic.knowledge.runbooks import finding_remedy

    checks = load_all()
    wanted = set(only) if only is not None else None
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for name, c in checks.items():
        if wanted is not None and name not in wanted:
            continue
        try:
            found = list(c.fn(snap))
        except CheckSkipped as e:
            skipped.append(Skipped(c.what, str(e)))
            continue
        except Exception as e:  # a bug in one check must not hide the others
            skipped.append(Skipped(c.what, f"check {name} failed: {type(e).__name__}: {e}"))
            continue
        for f in found:
            f.remedy = finding_remedy(f.code, f.gpu, f.remedy)
        findings.extend(found)
    return findings, skipped


@record(frozen=True)
class Window:
    """What a stream command has seen: samples oldest first (each a Snapshot) over ``span_s`` seconds."""

    samples: tuple[Snapshot, ...]
    span_s: float = 0.0

    @property
    def latest(self) -> Snapshot:
        return self.samples[-1]


@record(frozen=True)
class Detector:
    """One failure class: its codes (from the knowledge) and the checks that emit them."""

    name: str
    codes: tuple[str, ...]
    checks: tuple[Check, ...]

    def evaluate(self, snap: Snapshot) -> tuple[list[Finding], list[Skipped]]:
        """One-shot: the findings of this class on one snapshot."""
        return run_checks(snap, only=[c.name for c in self.checks])

    def observe(
        self, window: Window, memo: dict[int, tuple[list[Finding], list[Skipped]]] | None = None
    ) -> tuple[list[Finding], list[Skipped]]:
        """Streaming: the same rules on every sample of the window, so a fault that came and went inside
        it (a power brake that released, a GPU briefly in thermal slowdown) is not lost because the newest
        sample looks fine.  One finding per code and GPU: its newest occurrence, with
        ``data["window"]`` saying in how many samples it was seen and whether the newest is one (watch
        opens a clock-slowdown event only when it was in every sample of a window as long as its onset).  A
        warning or worse seen earlier stays relevant for the whole window; an earlier INFO note does not.
        What cannot be checked is judged on the newest sample.  (Onset and counters: watch/rules.py.)

        ``memo`` (``id(sample)`` -> its evaluation) lets a caller whose window slides over the same
        samples (watch, every tick) judge each sample once; the caller drops the ids of samples it let
        go.  The memoised findings are never changed: the window's notes go on copies."""
        n = len(window.samples)
        from gpuclinic.checks._baseline import FindingKey, finding_key

        seen: dict[FindingKey, tuple[Finding, int, int, int]] = {}
        skipped: list[Skipped] = []
        for i, snap in enumerate(window.samples):
            hit = memo.get(id(snap)) if memo is not None else None
            found, sk = hit if hit is not None else self.evaluate(snap)
            if memo is not None and hit is None:
                memo[id(snap)] = (found, sk)
            if i == n - 1:
                skipped = sk
            for f in found:
                key = finding_key(f)  # one per code, GPU and sensor (the GPU's and its HBM's temperature)
                first = seen[key][1] if key in seen else i
                count = seen[key][3] + 1 if key in seen else 1
                seen[key] = (f, first, i, count)
        out = []
        for f, first, last, count in seen.values():
            newest = last == n - 1
            if not newest and f.severity == Severity.INFO:
                continue
            f = copy.copy(f)
            f.data = {**f.data, "window": {
                "samples": count, "of": n, "in_newest": newest,
                "first_seen": window.samples[first].taken_at, "last_seen": window.samples[last].taken_at,
            }}
            if not newest:
                when = window.samples[last].taken_at
                f.evidence = [
                    *f.evidence,
                    f"seen in {count} of {n} samples" + (f" (last at {when})" if when else "")
                    + ", not in the newest",
                ]
            out.append(f)
        return out, skipped


def detectors() -> dict[str, Detector]:
    """Every detector, by failure class; a check belongs to the class of its codes."""
    from gpuclinic.knowledge.codes import all_codes, require

    by: dict[str, list[Check]] = {}
    for c in load_all().values():
        det = require(c.codes[0]).detector if c.codes else "other"
        by.setdefault(det, []).append(c)
    out: dict[str, Detector] = {}
    for ci in all_codes():
        out.setdefault(ci.detector, Detector(ci.detector, (), ()))
    for name in out:
        codes = tuple(ci.code for ci in all_codes() if ci.detector == name)
        out[name] = Detector(name, codes, tuple(by.get(name, [])))
    return out
