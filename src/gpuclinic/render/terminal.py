"""Terminal renderer (rich).  Plain text when NO_COLOR is set or stdout is not a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from gpuclinic.diagnose import Report
from gpuclinic.model import FAMILY_ORDER, Finding, Severity, Verdict

if TYPE_CHECKING:  # rich is imported when rendering, so JSON/Markdown output never loads it
    from rich.console import Console

_SEV_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "cyan"}
_VERDICT_STYLE = {Verdict.DRAIN: "bold white on red", Verdict.WARNING: "bold black on yellow", Verdict.HEALTHY: "bold white on green"}


def make_console(file: TextIO | None = None) -> Console:
    """A console that honours NO_COLOR and degrades to plain text when not a TTY."""
    from rich.console import Console

    f = file or sys.stdout
    no_color = bool(os.environ.get("NO_COLOR"))
    is_tty = hasattr(f, "isatty") and f.isatty()
    return Console(
        file=f,
        no_color=no_color or not is_tty,
        highlight=False,
        emoji=False,
        soft_wrap=not is_tty,
        force_terminal=is_tty and not no_color,
        width=None if is_tty else 120,
    )


def _fmt(v: float | None, unit: str, nd: int = 0) -> str:
    return "-" if v is None else f"{v:.{nd}f}{unit}"


def short_name(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3': the vendor prefix only costs width."""
    if not name:
        return "-"
    for prefix in ("NVIDIA ", "Tesla "):
        if name.startswith(prefix) and len(name) > len(prefix) + 2:
            name = name[len(prefix):]
    return name if len(name) <= 24 else name[:23] + "…"


def gpu_rows(report: Report) -> list[list[str]]:
    """One row per GPU: index, name, bus, temp, power, util, memory, pcie, verdict."""
    verdicts = {(gv.ref.index, gv.ref.pci_bus_id): gv for gv in report.gpu_verdicts}
    rows: list[list[str]] = []
    for g in report.snapshot.gpus:
        gv = verdicts.get((g.index, g.pci_bus_id))
        temp = _fmt(g.temperature_c, "°C")
        if g.memory_temperature_c is not None:
            temp += f" HBM {g.memory_temperature_c:.0f}°C"
        power = _fmt(g.power_draw_w, "W")
        if g.power_limit_w is not None:
            power += f"/{g.power_limit_w:.0f}W"
        mem = "-"
        if g.memory_used_bytes is not None and g.memory_total_bytes:
            mem = f"{g.memory_used_bytes / 2**30:.1f}/{g.memory_total_bytes / 2**30:.0f} GiB"
        pcie = "-"
        if g.pcie_gen is not None or g.pcie_width is not None:
            pcie = f"Gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}"
            below = (g.pcie_gen_max is not None and g.pcie_gen is not None and g.pcie_gen < g.pcie_gen_max) or (
                g.pcie_width_max is not None and g.pcie_width is not None and g.pcie_width < g.pcie_width_max
            )
            if below:
                pcie += f" of Gen{g.pcie_gen_max or '?'} x{g.pcie_width_max or '?'}"
        verdict = gv.verdict.value if gv else "-"
        if g.lost:
            verdict = "drain (lost)"
        rows.append([
            str(g.index), short_name(g.name), g.pci_bus_id or "-", temp, power,
            _fmt(g.utilization_gpu_pct, "%"), mem, pcie, verdict,
        ])
    for gv in report.gpu_verdicts:
        if gv.ref.index is None:
            rows.append(["?", gv.name or "(not in NVML)", gv.ref.pci_bus_id or "-", "-", "-", "-", "-", "-", gv.verdict.value])
    return rows


_COLUMNS = ("GPU", "Name", "Bus", "Temp", "Power", "Util", "Memory", "PCIe", "Verdict")
PLAIN_WIDTH = 120


def _plain_table(rows: list[list[str]], width: int = PLAIN_WIDTH) -> list[str]:
    """The GPU table as rich lays it out without a TTY (no box, 2-space gaps, ellipsis past ``width``)."""
    table = [list(_COLUMNS), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(_COLUMNS))]
    while sum(widths) + 2 * (len(widths) - 1) > width and max(widths) > 4:
        widths[widths.index(max(widths))] -= 1
    out = []
    for r in table:
        cells = [c if len(c) <= w else c[: w - 1] + "…" for c, w in zip(r, widths, strict=True)]
        out.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return out


def render_plain(report: Report, file: TextIO | None = None, *, prelude: list[str] | None = None) -> None:
    """Plain text for pipes and logs: the same lines as the rich renderer without importing rich.

    Why a second path: rich costs ~25 ms to import, a third of ``doctor --scenario``'s run time,
    and brings nothing when there is no terminal to colour.
    """
    f = file or sys.stdout
    snap = report.snapshot
    lines = [f"gpuclinic {report.command}  {snap.hostname or ''}   {report.verdict.value.upper()}"]
    lines.append(" · ".join(_meta(report)))
    rows = gpu_rows(report)
    if rows:
        lines.extend(_plain_table(rows))
    lines.extend(prelude or [])  # a command's own table (net's probes): after the verdict, before findings
    lines.append("")
    if not report.findings:
        lines.append("No problems found.")
    for fam in FAMILY_ORDER:
        fs = [x for x in report.findings if x.family == fam]
        if not fs:
            continue
        lines.append(fam.label)
        for fi in fs:
            lines.append(_finding_head(fi))
            lines.extend(_finding_body(fi))
        lines.append("")
    if report.skipped:
        lines.append("Could not check")
        lines.extend(f"  - {line}" for line in grouped_skipped(report))
    f.write("\n".join(lines) + "\n")
    f.flush()


def _meta(report: Report) -> list[str]:
    snap = report.snapshot
    meta = []
    if snap.origin != "live":
        meta.append(f"from {snap.origin}: {', '.join(snap.inputs) or '-'}")
    if snap.driver_version:
        meta.append(f"driver {snap.driver_version}")
    if snap.cuda_driver_version:
        meta.append(f"CUDA {snap.cuda_driver_version}")
    n = len(snap.gpus)
    # "0 GPUs seen" means something for doctor; for explain or net it is noise.
    if n or report.command == "doctor":
        meta.append(f"{n} GPU{'s' if n != 1 else ''} seen")
    return meta


def remedy_lines(remedy: str) -> list[str]:
    """The remedy as display lines: first after '→', continuation lines indented under it."""
    parts = [p.rstrip() for p in remedy.strip().splitlines() if p.strip()]
    if not parts:
        return []
    return [f"      → {parts[0]}"] + [f"        {p}" for p in parts[1:]]


def grouped_skipped(report: Report) -> list[str]:
    """'Could not check' lines, with checks that share one reason folded into one line.

    Evidence from another machine lacks whole areas (no host facts, say); listing every check of
    that area with the same reason buries the lines that matter.
    """
    by_why: dict[str, list[str]] = {}
    for s in report.skipped:
        by_why.setdefault(s.why, []).append(s.what)
    out = []
    for why, whats in by_why.items():
        if len(whats) >= 3:
            out.append(f"{why}: {', '.join(whats)}")
        else:
            out.extend(f"{w}: {why}" for w in whats)
    return out


def _finding_head(f: Finding) -> str:
    return f"  {f.severity.label.upper():8} {f.code}" + (f" [{f.gpu.label()}]" if f.gpu else "") + f"  {f.title}"


def _finding_body(f: Finding) -> list[str]:
    out = [f"      │ {ev}" for ev in f.evidence[:8]]
    if len(f.evidence) > 8:
        out.append(f"      │ … {len(f.evidence) - 8} more (see --json)")
    out.extend(remedy_lines(f.remedy))
    return out


def render_terminal(report: Report, console: Console | None = None, *,
                    prelude: Callable[[Console], None] | None = None, prelude_lines: list[str] | None = None) -> None:
    """``prelude`` (rich) / ``prelude_lines`` (plain): a command's own table, printed after the verdict
    header and before the findings, so the verdict comes first (net's probe table)."""
    if console is None and not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty()):
        render_plain(report, prelude=prelude_lines)
        return
    from rich.table import Table
    from rich.text import Text

    con = console or make_console()
    snap = report.snapshot
    head = Text()
    head.append(f"gpuclinic {report.command}", style="bold")
    head.append(f"  {snap.hostname or ''}  ")
    head.append(f" {report.verdict.value.upper()} ", style=_VERDICT_STYLE[report.verdict])
    con.print(head)
    con.print(" · ".join(_meta(report)), style="dim")

    rows = gpu_rows(report)
    if rows:
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col in ("GPU", "Name", "Bus", "Temp", "Power", "Util", "Memory", "PCIe", "Verdict"):
            t.add_column(col, no_wrap=True, overflow="ellipsis")
        for r in rows:
            style = {"drain": "red", "warning": "yellow"}.get(r[-1].split()[0], "")
            t.add_row(*r, style=style)
        con.print(t)
    if prelude is not None:
        prelude(con)
    con.print()
    if not report.findings:
        con.print("No problems found.", style="green")
    for fam in FAMILY_ORDER:
        fs = [f for f in report.findings if f.family == fam]
        if not fs:
            continue
        con.print(Text(fam.label, style="bold underline"))
        for f in fs:
            line = Text("  ")
            line.append(f"{f.severity.label.upper():8}", style=_SEV_STYLE[f.severity])
            line.append(f" {f.code}", style="bold")
            if f.gpu:
                line.append(f" [{f.gpu.label()}]")
            line.append(f"  {f.title}")
            con.print(line)
            for ev in f.evidence[:8]:
                con.print(Text(f"      │ {ev}", style="dim"))
            if len(f.evidence) > 8:
                con.print(Text(f"      │ … {len(f.evidence) - 8} more (see --json)", style="dim"))
            for rl in remedy_lines(f.remedy):
                con.print(Text(rl))
        con.print()
    if report.skipped:
        con.print(Text("Could not check", style="bold"))
        for skipline in grouped_skipped(report):
            con.print(Text(f"  - {skipline}", style="dim"))
