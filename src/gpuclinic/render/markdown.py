"""``--markdown``: a report to paste into a ticket."""

from __future__ import annotations

from gpuclinic.diagnose import Report
from gpuclinic.model import FAMILY_ORDER
from gpuclinic.render.terminal import gpu_rows, grouped_skipped


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report, prelude: list[str] | None = None) -> str:
    snap = report.snapshot
    out: list[str] = []
    host = snap.hostname or "unknown host"
    out.append(f"# gpuclinic {report.command}: {host} — **{report.verdict.value.upper()}**")
    out.append("")
    meta = [f"generated {report.generated_at}", f"origin: {snap.origin}"]
    if snap.driver_version:
        meta.append(f"driver {snap.driver_version}")
    if snap.cuda_driver_version:
        meta.append(f"CUDA (driver) {snap.cuda_driver_version}")
    out.append(" · ".join(meta))
    out.append("")
    rows = gpu_rows(report)
    if rows:
        out.append("| GPU | Name | Bus | Temp | Power | Util | Memory | PCIe | Verdict |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            out.append("| " + " | ".join(_esc(c) for c in r) + " |")
        out.append("")
    if prelude:  # a command's own table (net's probes): after the verdict, before the findings
        out.extend([*prelude, ""])
    if not report.findings:
        out.append("No problems found.")
        out.append("")
    for fam in FAMILY_ORDER:
        fs = [f for f in report.findings if f.family == fam]
        if not fs:
            continue
        out.append(f"## {fam.label}")
        out.append("")
        for f in fs:
            where = f" ({f.gpu.label()})" if f.gpu else ""
            out.append(f"### [{f.severity.label.upper()}] `{f.code}`{where}: {f.title}")
            out.append("")
            if f.evidence:
                out.append("Evidence:")
                out.append("")
                out.append("```")
                out.extend(f.evidence)
                out.append("```")
                out.append("")
            if f.remedy:
                steps = [p.strip() for p in f.remedy.strip().splitlines() if p.strip()]
                out.append(f"**What to do:** {steps[0]}")
                if len(steps) > 1:
                    out.append("")
                    out.extend(steps[1:])
                out.append("")
    if report.skipped:
        out.append("## Could not check")
        out.append("")
        out.extend(f"- {line}" for line in grouped_skipped(report))
        out.append("")
    return "\n".join(out)
