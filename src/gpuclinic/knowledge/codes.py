"""Every finding code as data: its failure class, family, one severity rule, runbook and source.

``knowledge/data/codes.json`` is the only place a code's severity is decided.  Detectors ask
:func:`severity` (``severity("thermal.throttle", "software")``) instead of writing a severity of their
own, and the watch rules, the alert-rule generator and the runbooks read the same entries, so a code
cannot mean two things in two commands.  Families of codes (``xid.*``, ``error.*``) take their severity
from their own catalog (the Xid catalog, the error signatures).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuclinic.knowledge import load_data
from gpuclinic.model import Family, Finding, GpuRef, Severity
from gpuclinic.record import field, record

CODES_FILE = "codes.json"
KINDS = ("hardware", "software", "configuration", "job", "network")


@record(frozen=True)
class CodeInfo:
    """One code's entry.  ``when`` maps a named condition to the severity it gives instead of the default."""

    code: str
    detector: str
    family: Family
    default: str  # a severity label, or "catalog"/"signature" for families of codes
    title: str
    runbook: str
    kind: str
    source: str
    when: dict[str, str] = field(default_factory=dict)
    thresholds: tuple[str, ...] = ()
    job_effect: str | None = None  # "fatal" / "fault": what it means for a job on that GPU (``run``)

    def severities(self) -> set[str]:
        """Every severity label this code can carry."""
        return {self.default, *self.when.values()}


@cache
def _entries() -> dict[str, CodeInfo]:
    out: dict[str, CodeInfo] = {}
    for code, e in load_data(CODES_FILE)["codes"].items():
        sev = e["severity"]
        default, when = (sev, {}) if isinstance(sev, str) else (sev["default"], dict(sev.get("when") or {}))
        out[code] = CodeInfo(
            code=code,
            detector=e["detector"],
            family=Family(e["family"]),
            default=default,
            title=e["title"],
            runbook=e["runbook"],
            kind=e["kind"],
            source=e["source"],
            when=when,
            thresholds=tuple(e.get("thresholds") or ()),
            job_effect=e.get("job_effect"),
        )
    return out


def all_codes() -> list[CodeInfo]:
    return [v for _, v in sorted(_entries().items())]


def info(code: str) -> CodeInfo | None:
    """The entry for ``code``: exact, else the family pattern (``xid.79`` -> ``xid.*``)."""
    e = _entries()
    if code in e:
        return e[code]
    parts = code.split(".")
    for n in range(len(parts) - 1, 0, -1):
        pat = ".".join(parts[:n]) + ".*"
        if pat in e:
            return e[pat]
    return None


def require(code: str) -> CodeInfo:
    """The entry for ``code``; a code missing from the knowledge is a programming error."""
    i = info(code)
    if i is None:
        raise KeyError(f"finding code {code!r} is not in knowledge/data/{CODES_FILE}")
    return i


def severity(code: str, when: str | None = None) -> Severity:
    """The severity of ``code`` under the named condition ``when`` (None: the default).

    Raises KeyError for an unknown code or condition, so a typo cannot silently pick a severity.
    """
    i = require(code)
    label = i.default
    if when is not None:  # a named condition; families of codes (xid.*) have some of their own
        if when not in i.when:
            raise KeyError(f"{code}: no severity condition {when!r} in {CODES_FILE}")
        label = i.when[when]
    if label in ("catalog", "signature"):
        raise KeyError(f"{code}: severity comes from its {label}, not from {CODES_FILE}")
    return Severity[label.upper()]


def family(code: str) -> Family:
    return require(code).family


def finding(
    code: str,
    *,
    when: str | None = None,
    title: str,
    evidence: list[str] | None = None,
    gpu: GpuRef | None = None,
    data: dict[str, Any] | None = None,
    source: str | None = None,
    remedy: str = "",
) -> Finding:
    """A finding of ``code`` whose severity (under ``when``) and family are its entry's: a detector
    names neither a second time."""
    return Finding(
        code=code,
        severity=severity(code, when),
        family=family(code),
        title=title,
        evidence=evidence if evidence is not None else [],
        remedy=remedy,
        gpu=gpu,
        data=data if data is not None else {},
        source=source,
    )


def runbook_id(code: str) -> str:
    """The runbook that fixes the cause behind ``code`` (``xid.N`` resolves through its Xid class)."""
    i = require(code)
    if i.code == "xid.*":
        from gpuclinic.knowledge.xid import runbook_for_xid

        try:
            return runbook_for_xid(int(code.split(".", 1)[1]))
        except ValueError:
            return i.runbook
    return i.runbook


@cache
def _computed() -> tuple[str, ...]:
    return tuple(load_data(CODES_FILE).get("remedy_computed", {}).get("codes", ()))


def remedy_computed(code: str) -> bool:
    """Whether the detector of ``code`` computes its remedy for the case from knowledge data (the versions
    and commands of a driver/CUDA mismatch, a mirror's lines): ``remedy_computed`` in codes.json.  Every
    other code's remedy is its runbook's first step."""
    return any(code == p or (p.endswith(".*") and code.startswith(p[:-1])) for p in _computed())


def kind(code: str) -> str:
    """hardware / software / configuration / job: what sort of cause ``code`` names."""
    i = require(code)
    if i.code == "xid.*":
        from gpuclinic.knowledge.xid import classify

        try:
            return "job" if classify(int(code.split(".", 1)[1])).application else "hardware"
        except ValueError:
            return i.kind
    return i.kind


def job_effect(code: str) -> str | None:
    """What ``code`` appearing on a GPU means for a job running there: "fatal" (it cannot continue on
    that GPU), "fault" (it may have been hit) or None (not a fault of the job's run)."""
    return require(code).job_effect


def fatal_to_job(code: str, sev: Severity) -> bool:
    """A finding after which a job cannot continue on its GPU: a critical one of a code whose job effect
    is fatal (a GPU that is lost, or not in this container at all, says info and is not)."""
    return sev == Severity.CRITICAL and job_effect(code) == "fatal"


def allowed(code: str) -> set[Severity] | None:
    """Severities ``code`` may carry, or None when its own catalog decides (Xids, signatures)."""
    i = require(code)
    labels = i.severities()
    if labels & {"catalog", "signature"}:
        return None
    return {Severity[s.upper()] for s in labels}


def markdown_table() -> str:
    """The code table of ``docs/diagnosis.md`` (a test keeps the page equal to this)."""
    rows = ["| code | class | severity rule | runbook | kind |", "|---|---|---|---|---|"]
    for c in all_codes():
        rule = c.default + "".join(f"; {k}: {v}" for k, v in sorted(c.when.items()))
        rows.append(f"| `{c.code}` | {c.detector} | {rule} | `{c.runbook}` | {c.kind} |")
    return "\n".join(rows) + "\n"
