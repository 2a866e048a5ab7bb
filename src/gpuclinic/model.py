"""The finding model every check produces and every renderer consumes.

A :class:`Finding` has a stable ``code`` (``xid.79``, ``pcie.link_degraded``) that scripts may rely on,
a severity, a family (which of the five causes it belongs to), the GPU it concerns, evidence lines, a
remedy a person can follow and free-form ``data`` for machines.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from gpuclinic.record import field, record


class Severity(enum.IntEnum):
    """Ordered: a higher value is worse.  CRITICAL drives a "drain" verdict."""

    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


class Family(str, enum.Enum):
    """The families of causes, in the order a report lists them."""

    GPU_FAULT = "gpu_fault"
    HEAT = "heat"
    PCIE_POWER = "pcie_power"
    SOFTWARE = "software"
    NETWORK = "network"
    HOST = "host"

    @property
    def label(self) -> str:
        return _FAMILY_TITLES[self]


_FAMILY_TITLES = {
    Family.GPU_FAULT: "GPU fault",
    Family.HEAT: "Heat",
    Family.PCIE_POWER: "PCIe & power",
    Family.SOFTWARE: "Software",
    Family.NETWORK: "Network",
    Family.HOST: "Host",
}
FAMILY_ORDER = list(Family)


class Verdict(str, enum.Enum):
    """Node or GPU verdict.  ``drain`` means: take it out of service until fixed."""

    HEALTHY = "healthy"
    WARNING = "warning"
    DRAIN = "drain"

    @classmethod
    def from_severity(cls, sev: Severity | None) -> Verdict:
        if sev is None or sev == Severity.INFO:
            return cls.HEALTHY
        return cls.WARNING if sev == Severity.WARNING else cls.DRAIN

    @property
    def exit_code(self) -> int:
        return {Verdict.HEALTHY: 0, Verdict.WARNING: 1, Verdict.DRAIN: 2}[self]


@record(frozen=True)
class GpuRef:
    """Which GPU a finding concerns; any field may be unknown (e.g. a log line names only a bus id)."""

    index: int | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None

    def label(self) -> str:
        if self.index is not None:
            return f"GPU {self.index}"
        if self.pci_bus_id:
            return f"GPU {self.pci_bus_id}"
        if self.uuid:
            return f"GPU {self.uuid}"
        return "GPU ?"

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "pci_bus_id": self.pci_bus_id, "uuid": self.uuid}


def dedupe(lines: Iterable[str]) -> list[str]:
    """Each evidence line once, in the order first seen."""
    return list(dict.fromkeys(lines))


@record
class Finding:
    """One diagnosed problem (or notable fact) with its evidence and what to do about it."""

    code: str
    severity: Severity
    family: Family
    title: str
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""
    gpu: GpuRef | None = None
    data: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    incident: str | None = None  # id of the incident this finding belongs to (set by diagnose)

    def __post_init__(self) -> None:
        # the same log line reached through two paths (two inputs, a repeated unstamped line) is one fact
        self.evidence = dedupe(self.evidence)

    def sort_key(self) -> tuple[int, int, int, str]:
        gi = self.gpu.index if self.gpu and self.gpu.index is not None else -1
        return (-int(self.severity), FAMILY_ORDER.index(self.family), gi, self.code)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.label,
            "family": self.family.value,
            "gpu": self.gpu.to_dict() if self.gpu else None,
            "title": self.title,
            "evidence": list(self.evidence),
            "remedy": self.remedy,
            "data": self.data,
            "source": self.source,
            "incident": self.incident,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        g = d.get("gpu")
        return cls(
            code=d["code"],
            severity=Severity[d["severity"].upper()],
            family=Family(d["family"]),
            title=d.get("title", ""),
            evidence=list(d.get("evidence") or []),
            remedy=d.get("remedy", ""),
            gpu=GpuRef(**g) if g else None,
            data=dict(d.get("data") or {}),
            source=d.get("source"),
            incident=d.get("incident"),
        )


@record
class Incident:
    """One root cause and the symptoms it explains: what a person acts on.

    ``code`` is the root-cause finding's code, ``symptoms`` the codes of the other findings it explains,
    ``evidence`` all their evidence in time order (the root cause first), ``runbook`` the runbook id and
    ``first_step`` its first step.  Severity is the worst of its parts.
    """

    id: str
    code: str
    severity: Severity
    family: Family
    title: str
    gpu: GpuRef | None = None
    symptoms: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    runbook: str = ""
    first_step: str = ""

    def __post_init__(self) -> None:
        self.evidence = dedupe(self.evidence)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "code": self.code,
            "severity": self.severity.label,
            "family": self.family.value,
            "gpu": self.gpu.to_dict() if self.gpu else None,
            "title": self.title,
            "symptoms": list(self.symptoms),
            "evidence": list(self.evidence),
            "runbook": self.runbook,
            "first_step": self.first_step,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Incident:
        g = d.get("gpu")
        return cls(
            id=d["id"],
            code=d["code"],
            severity=Severity[d["severity"].upper()],
            family=Family(d["family"]),
            title=d.get("title", ""),
            gpu=GpuRef(**g) if g else None,
            symptoms=list(d.get("symptoms") or []),
            evidence=list(d.get("evidence") or []),
            runbook=d.get("runbook", ""),
            first_step=d.get("first_step", ""),
        )


@record(frozen=True)
class Skipped:
    """Something that could not be checked, and why ("could not check X: why")."""

    what: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "why": self.why}
