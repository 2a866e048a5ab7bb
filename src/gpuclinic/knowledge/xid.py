"""The NVIDIA Xid catalog (codes 1-173) as data: what an Xid means and what a person should do.

Loaded from ``knowledge/data/xid_catalog.json`` (built by ``tools/build_xid_catalog.py`` from NVIDIA's
Xid catalog, the legacy Xid table and NVSentinel's mapping; each entry names its sources).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from gpuclinic.knowledge import load_data
from gpuclinic.model import Family, Severity
from gpuclinic.record import field, record

_PLACEHOLDERS = ("unused", "reserved")
_DRIVERS_NOTE = re.compile(r"\s*\((?:newer|older) drivers\)\s*$")


@record(frozen=True)
class XidInfo:
    """One catalog entry, with the severity and family gpuclinic reports it under."""

    xid: int
    name: str
    description: str
    category: str
    action: str
    severity: Severity
    family: Family
    immediate_action: str | None = None  # NVIDIA resolution bucket, e.g. RESET_GPU
    investigatory_action: str | None = None
    immediate_step: str | None = None  # the bucket in words a person follows
    investigatory_step: str | None = None
    catalog_description: str | None = None
    legacy_name: str | None = None
    potential_causes: tuple[str, ...] = ()
    nvsentinel_fatal: bool | None = None
    severity_reason: str | None = None
    notes: str | None = None
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_application(self) -> bool:
        return classify(self.xid).application

    @property
    def is_unused(self) -> bool:
        return self.category == "unused"

    @property
    def summary(self) -> str:
        """What the Xid means, in a few words: the catalog's description; for a code NVIDIA's current catalog
        lists as unused or reserved, the meaning its earlier table gave (drivers still log some: Xid 61,
        "Internal micro-controller breakpoint/warning", which "Unused" would leave unexplained)."""
        short = self.description.split(". ")[0].split(": ", 1)[0].rstrip(".")
        old = _DRIVERS_NOTE.sub("", self.legacy_name or "").strip()
        if short.lower() in _PLACEHOLDERS and old and old.lower() not in _PLACEHOLDERS:
            return f"{old} (NVIDIA's earlier Xid table; {short.lower()} in its current catalog)"
        return short

    def steps(self) -> list[str]:
        """The catalog's immediate then investigatory action as sentences, without repeats."""
        out: list[str] = []
        for s in (self.immediate_step, self.investigatory_step):
            if s and s not in out:
                out.append(s)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "xid": self.xid,
            "name": self.name,
            "description": self.description,
            "category": self.category,
            "action": self.action,
            "nvidia_immediate_action": self.immediate_action,
            "nvidia_investigatory_action": self.investigatory_action,
            "severity": self.severity.label,
            "family": self.family.value,
            "notes": self.notes,
            "source": self.source,
        }


@cache
def _entries() -> dict[int, dict[str, Any]]:
    """The catalog's raw entries by Xid; an XidInfo is built only for the Xids asked about."""
    return {int(e["xid"]): e for e in load_data("xid_catalog.json")["xids"]}


@cache
def _info(n: int) -> XidInfo | None:
    e = _entries().get(n)
    if e is None:
        return None
    data = load_data("xid_catalog.json")
    imm_steps: dict[str, str] = data["immediate_steps"]
    inv_steps: dict[str, str] = data["investigatory_steps"]
    sev_steps: dict[str, str] = data.get("severity_steps", {})
    imm = e.get("nvidia_immediate_action")
    inv = e.get("nvidia_investigatory_action")
    return XidInfo(
        xid=int(e["xid"]),
        name=e["name"],
        description=e["description"],
        category=e["category"],
        action=e["action"],
        severity=Severity[e["severity"].upper()],
        family=Family(e["family"]),
        immediate_action=imm,
        investigatory_action=inv,
        immediate_step=(imm_steps.get(imm) if imm else None)
        or (None if inv else sev_steps.get(e["severity"])),
        investigatory_step=inv_steps.get(inv) if inv else None,
        catalog_description=e.get("nvidia_catalog_description"),
        legacy_name=e.get("legacy_name"),
        potential_causes=tuple(e.get("legacy_potential_causes") or ()),
        nvsentinel_fatal=e.get("nvsentinel_fatal"),
        severity_reason=e.get("severity_reason"),
        notes=e.get("notes"),
        source=e["source"],
        extra={k: e[k] for k in ("dcgm_health", "nvsentinel_action") if k in e},
    )


def lookup(n: int) -> XidInfo | None:
    """The catalog entry for Xid ``n``, or None for a code the catalog does not know."""
    return _info(int(n))


def all_xids() -> list[XidInfo]:
    return [i for n in sorted(_entries()) if (i := _info(n)) is not None]


def family_for_category(category: str) -> Family:
    """Report family of a catalog category (``pcie_bus`` -> PCIe & power, most -> GPU fault)."""
    fam = load_data("xid_catalog.json")["category_family"].get(category)
    return Family(fam) if fam else Family.GPU_FAULT


def unknown(n: int) -> XidInfo:
    """A stand-in for an Xid newer than the catalog: treated as a GPU fault worth a look."""
    return XidInfo(
        xid=n,
        name=f"XID_{n}",
        description=f"Xid {n} is not in gpuclinic's catalog (newer than NVIDIA's list it was built from).",
        category="unknown",
        action="unknown",
        severity=Severity.WARNING,
        family=Family.GPU_FAULT,
        immediate_step="Look the code up in NVIDIA's current Xid catalog "
        "(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).",
        source="gpuclinic (not catalogued)",
    )


@record(frozen=True)
class XidClass:
    """The one classification of an Xid (``knowledge/data/xid_classes.json``), used by every command."""

    xid: int
    application: bool
    hardware: bool
    fatal_to_job: bool
    needs_reset: bool
    needs_reboot: bool
    needs_rma: bool

    def labels(self) -> list[str]:
        names = load_data("xid_classes.json")["classes"]
        return [names[k]["label"] for k in CLASS_NAMES if getattr(self, k)]

    def to_dict(self) -> dict[str, bool]:
        return {k: bool(getattr(self, k)) for k in CLASS_NAMES}


CLASS_NAMES = ("application", "hardware", "fatal_to_job", "needs_reset", "needs_reboot", "needs_rma")


def _matches(rule: dict[str, list[Any]], info: XidInfo) -> bool:
    fields = {
        "category": info.category,
        "action": info.action,
        "severity": info.severity.label,
        "xid": info.xid,
    }
    return any(fields.get(k) in vals for k, vals in rule.items())


@cache
def classify(n: int) -> XidClass:
    """Which classes Xid ``n`` belongs to (an uncatalogued Xid: none but a possible hardware fault)."""
    info = lookup(n) or unknown(n)
    rules = load_data("xid_classes.json")["classes"]
    flags = {k: _matches(rules[k]["rule"], info) for k in CLASS_NAMES}
    return XidClass(xid=int(n), **flags)


def runbook_for_xid(n: int) -> str:
    """The runbook id for Xid ``n``: its own entry in ``runbook_by_xid`` (an Xid whose action NVIDIA states
    beyond its class, e.g. 63: reset when convenient), else the first class of ``runbook_order`` it is in."""
    data = load_data("xid_classes.json")
    own = (data.get("runbook_by_xid") or {}).get(str(n))
    if own is not None:
        return str(own["runbook"])
    c = classify(n)
    for cls, rb in data["runbook_order"]:
        if getattr(c, cls):
            return str(rb)
    return str(data["runbook_default"])
