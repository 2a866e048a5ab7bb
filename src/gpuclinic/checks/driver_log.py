"""Driver detector, kernel-log part: NVIDIA kernel module load errors (taint, symbols, signing, API
mismatch)."""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuclinic import lazyre
from gpuclinic.checks import check
from gpuclinic.checks._kernel import (
    SOURCE,
    _base_data,
    _evidence,
    _previous_boot_flags,
    _steps,
)
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.codes import severity
from gpuclinic.model import Family, Finding

# --------------------------------------------------------------------------------------------------
# xid.<N>
# --------------------------------------------------------------------------------------------------

_RE_RECOVERY = lazyre.compile(r"from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")


# --------------------------------------------------------------------------------------------------
# driver.kernel_module
# --------------------------------------------------------------------------------------------------


@cache
def _module_texts() -> dict[str, Any]:
    return dict(load_data("driver_module.json"))


def _module_text(sub: str) -> tuple[str, str]:
    """What a module-load problem means and its fix (``knowledge/data/driver_module.json``)."""
    d = _module_texts()
    e = d["problems"].get(sub) or d["unknown"]
    return str(e["what"]), str(e["fix"])


@check("kernel.module", codes=["driver.kernel_module"], what="NVIDIA kernel module errors (kernel log)")
def module_errors(snap: Snapshot) -> list[Finding]:
    evs = [
        e
        for e in snap.kernel_events
        if e.kind == "module" and e.detail.get("severity") in ("critical", "warning")
    ]
    if not evs:
        return []
    prev = _previous_boot_flags(evs, snap)
    groups: dict[str, list[KernelEvent]] = {}
    for e in evs:
        groups.setdefault(str(e.detail.get("module")), []).append(e)
    for sub in list(groups):  # a consequence joins its cause's finding (driver_module.json explained_by)
        causes = _module_texts()["problems"].get(sub, {}).get("explained_by", ())
        cause = next((c for c in causes if c in groups), None)
        if cause is not None:
            groups[cause] = sorted(groups[cause] + groups.pop(sub), key=lambda e: e.lineno or 0)
    out: list[Finding] = []
    for sub, group in groups.items():
        what, fix = _module_text(sub)
        critical = any(e.detail.get("severity") == "critical" for e in group)
        sev = (
            severity("driver.kernel_module", "critical_line")
            if critical
            else severity("driver.kernel_module")
        )
        data = _base_data(group)
        data["problem"] = sub
        for k in ("client_version", "kernel_version", "symbol", "devices"):
            vals = sorted({str(v) for e in group if (v := e.detail.get(k)) is not None})
            if vals:
                data[k] = vals
        loaded_later = any(
            e.kind == "module" and e.detail.get("module") == "loaded"
            for e in snap.kernel_events
            if not prev.get(id(e))
        )
        if all(prev.get(id(e)) for e in group) or (sub != "api_mismatch" and snap.gpus and loaded_later):
            sev = severity("driver.kernel_module", "resolved_later")
            data["resolved_later"] = True
        title = f"NVIDIA kernel module: {what}"
        if sub == "api_mismatch" and data.get("client_version"):
            title += (
                f" (libraries {data['client_version'][0]}, module {data.get('kernel_version', ['?'])[0]})"  # type: ignore[index]
            )
        out.append(
            Finding(
                code="driver.kernel_module",
                severity=sev,
                family=Family.SOFTWARE,
                title=title,
                evidence=_evidence(group),
                remedy=_steps(fix),
                data=data,
                source=SOURCE,
            )
        )
    return out
