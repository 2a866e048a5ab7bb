"""``--markdown``: a report to paste into a ticket."""

from __future__ import annotations

from gpuclinic.diagnose import Report
from gpuclinic.knowledge.runbooks import all_steps
from gpuclinic.model import Severity
from gpuclinic.render.terminal import all_clear_line, gpu_rows, grouped_skipped


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report, prelude: list[str] | None = None) -> str:
    snap = report.snapshot
    out: list[str] = []
    host = snap.hostname or "unknown host"
    from gpuclinic.render.terminal import _verdict_word

    out.append(f"# gpuclinic {report.command}: {host} — **{_verdict_word(report)}**")
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
    if prelude:  # a command's own table (net's probes): after the verdict, before the incidents
        out.extend([*prelude, ""])
    bad = [i for i in report.incidents if i.severity > Severity.INFO]
    notes = [i for i in report.incidents if i.severity == Severity.INFO]
    if not bad:
        out.append(all_clear_line(report, bool(notes)))
        out.append("")
    for inc in bad:
        bus = inc.gpu.pci_bus_id if inc.gpu and inc.gpu.pci_bus_id and inc.gpu.index is not None else None
        where = f" ({inc.gpu.label()}{', ' + bus if bus else ''})" if inc.gpu else ""
        out.append(f"## [{inc.severity.label.upper()}] {inc.title}")
        out.append("")
        out.append(f"Root cause `{inc.code}`{where}.")
        syms = [f for f in report.findings if f.incident == inc.id and f.code != inc.code]
        if syms:
            out.append("")
            out.append("Explains:")
            out.append("")
            out.extend(f"- `{f.code}` [{f.severity.label}]: {_esc(f.title)}" for f in syms)
        if inc.evidence:
            out.append("")
            out.append("Evidence:")
            out.append("")
            out.append("```")
            out.extend(inc.evidence)
            out.append("```")
        out.append("")
        if inc.first_step:
            out.append(f"**First step:** {inc.first_step}")
            out.append("")
        if inc.runbook:
            out.append(all_steps(inc.code, inc.gpu, markdown=True))
            out.append("")
    if notes:
        out.append("## Notes")
        out.append("")
        out.extend(
            f"- `{i.code}`" + (f" ({i.gpu.label()})" if i.gpu else "") + f": {_esc(i.title)}" for i in notes
        )
        out.append("")
    if report.skipped:
        out.append("## Could not check")
        out.append("")
        out.extend(f"- {line}" for line in grouped_skipped(report))
        out.append("")
    return "\n".join(out)
