"""node-problem-detector custom-plugin contract: one short stdout line and exit 0 / 1 / 2.

NPD reads at most 4 KiB of stdout, trims it and cuts it to ``max_output_length`` bytes (80 by
default); the result is the condition message ``kubectl describe node`` shows.  Exit 0 is OK
(condition False), 1 is NonOK (condition True), anything else is Unknown, which is what a check
that could not run must say so that the condition does not claim a problem it did not see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuclinic.diagnose import Report
from gpuclinic.knowledge import load_data
from gpuclinic.model import Severity, Verdict
from gpuclinic.slurm.health import critical_problems, judge


def contract() -> dict[str, Any]:
    return dict(load_data("cluster.json")["npd"])


@dataclass(frozen=True)
class PluginResult:
    status: int  # 0 OK, 1 NonOK, 2 Unknown
    message: str
    code: str | None = None  # root-cause code behind a NonOK, for the taint value


def cut(text: str, limit: int) -> str:
    """One line, at most ``limit`` bytes of UTF-8, never a broken character."""
    line = " ".join(text.split())
    raw = line.encode("utf-8")
    if len(raw) <= limit:
        return line
    return raw[: max(0, limit - 3)].decode("utf-8", "ignore").rstrip() + "..."


def plugin_result(report: Report | None, *, fail_on: str = "drain", limit: int | None = None,
                  error: str | None = None) -> PluginResult:
    """The NPD answer for a doctor report (or for a check that failed with ``error``)."""
    c = contract()
    limit = limit or int(c["max_output_length"])
    if report is None or error:
        return PluginResult(
            int(c["exit_unknown"]), cut(f"gpuclinic could not check: {error or 'no report'}", limit)
        )
    j = judge(report)
    if j.verdict is None:
        return PluginResult(
            int(c["exit_unknown"]), cut(f"gpuclinic could not judge: {j.why_unjudged}", limit)
        )
    if j.verdict == Verdict.DRAIN:
        probs = j.problems
        head = probs[0].label() if probs else "drain verdict"
        more = f" (+{len(probs) - 1} more)" if len(probs) > 1 else ""
        return PluginResult(
            int(c["exit_nonok"]), cut(f"drain: {head}{more}", limit), code=probs[0].code if probs else None
        )
    if j.verdict == Verdict.WARNING:
        warn = [f for f in report.findings if f.severity == Severity.WARNING]
        first = (
            f"{warn[0].code} {warn[0].gpu.label()}"
            if warn and warn[0].gpu
            else (warn[0].code if warn else "")
        )
        msg = cut(f"warning: {first}" + (f" (+{len(warn) - 1} more)" if len(warn) > 1 else ""), limit)
        status = int(c["exit_nonok"]) if fail_on == "warning" else int(c["exit_ok"])
        return PluginResult(status, msg, code=warn[0].code if warn and status else None)
    return PluginResult(int(c["exit_ok"]), cut(f"healthy: {len(report.snapshot.gpus)} GPUs", limit))


__all__ = ["PluginResult", "contract", "critical_problems", "cut", "plugin_result"]
