"""Terminal renderer: incidents first, their symptoms folded under them, laid out for the width at hand.

One layout (:func:`layout`) makes the lines; :func:`render_plain` writes them for pipes and NO_COLOR
(without importing rich), :func:`render_terminal` prints the same lines in colour on a TTY.  Lines are
wrapped here with hanging indents, so an 80-column terminal keeps the structure.
"""

from __future__ import annotations

import os
import sys
import textwrap
from typing import TYPE_CHECKING, TextIO

from gpuclinic.diagnose import Report
from gpuclinic.knowledge.runbooks import all_steps
from gpuclinic.model import Finding, Incident, Severity, Verdict

if TYPE_CHECKING:  # rich is imported when rendering, so JSON/Markdown output never loads it
    from rich.console import Console

_SEV_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "cyan"}
_VERDICT_STYLE = {
    Verdict.DRAIN: "bold white on red",
    Verdict.WARNING: "bold black on yellow",
    Verdict.HEALTHY: "bold white on green",
}


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
            name = name[len(prefix) :]
    return name if len(name) <= 24 else name[:23] + "…"


def _short_bus(bus: str | None) -> str:
    """'0000:9a:00.0' -> '9a:00.0' (the domain is 0000 on nearly every server)."""
    if not bus:
        return "-"
    return bus[5:] if bus.startswith("0000:") else bus


def gpu_rows(report: Report, compact: bool = False) -> list[list[str]]:
    """One row per GPU: index, name, bus, temp, power, util, memory, pcie, verdict."""
    verdicts = {(gv.ref.index, gv.ref.pci_bus_id): gv for gv in report.gpu_verdicts}
    rows: list[list[str]] = []
    for g in report.snapshot.gpus:
        gv = verdicts.get((g.index, g.pci_bus_id))
        temp = _fmt(g.temperature_c, "°C")
        if g.memory_temperature_c is not None and not compact:
            temp += f" HBM {g.memory_temperature_c:.0f}°C"
        power = _fmt(g.power_draw_w, "W")
        if g.power_limit_w is not None:
            power = (
                f"{_fmt(g.power_draw_w, '')}/{g.power_limit_w:.0f}W"
                if compact
                else power + f"/{g.power_limit_w:.0f}W"
            )
        mem = "-"
        if g.memory_used_bytes is not None and g.memory_total_bytes:
            mem = (
                f"{g.memory_used_bytes / 2**30:.0f}/{g.memory_total_bytes / 2**30:.0f}G"
                if compact
                else f"{g.memory_used_bytes / 2**30:.1f}/{g.memory_total_bytes / 2**30:.0f} GiB"
            )
        pcie = "-"
        if g.pcie_gen is not None or g.pcie_width is not None:
            pcie = (
                f"G{g.pcie_gen or '?'}x{g.pcie_width or '?'}"
                if compact
                else f"Gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}"
            )
            below = (
                g.pcie_gen_max is not None and g.pcie_gen is not None and g.pcie_gen < g.pcie_gen_max
            ) or (
                g.pcie_width_max is not None and g.pcie_width is not None and g.pcie_width < g.pcie_width_max
            )
            if below:
                pcie += (
                    f"<x{g.pcie_width_max or '?'}"
                    if compact and g.pcie_width != g.pcie_width_max
                    else f"<G{g.pcie_gen_max or '?'}"
                    if compact
                    else f" of Gen{g.pcie_gen_max or '?'} x{g.pcie_width_max or '?'}"
                )
        verdict = gv.label if gv else "-"
        if verdict == "unknown":
            verdict = "no readings"
        if g.lost:
            verdict = "lost" if compact else "drain (lost)"
        name = short_name(g.name)
        if compact and len(name) > 14:
            name = name[:13] + "…"
        rows.append(
            [
                str(g.index),
                name,
                _short_bus(g.pci_bus_id) if compact else (g.pci_bus_id or "-"),
                temp,
                power,
                _fmt(g.utilization_gpu_pct, "%"),
                mem,
                pcie,
                verdict,
            ]
        )
    for gv in report.gpu_verdicts:
        if gv.ref.index is None:
            rows.append(
                [
                    "?",
                    gv.name or "(not in NVML)",
                    _short_bus(gv.ref.pci_bus_id) if compact else (gv.ref.pci_bus_id or "-"),
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    gv.verdict.value,
                ]
            )
    return rows


_COLUMNS = ("GPU", "Name", "Bus", "Temp", "Power", "Util", "Memory", "PCIe", "Verdict")
PLAIN_WIDTH = 120
COMPACT_BELOW = 110  # narrower than this: compact cells (short bus ids, no HBM temperature)


def _plain_table(rows: list[list[str]], width: int = PLAIN_WIDTH) -> list[str]:
    """The GPU table: 2-space gaps; past ``width`` the widest column is cut with an ellipsis."""
    table = [list(_COLUMNS), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(_COLUMNS))]
    while sum(widths) + 2 * (len(widths) - 1) > width and max(widths) > 4:
        widths[widths.index(max(widths))] -= 1
    out = []
    for r in table:
        cells = [c if len(c) <= w else c[: w - 1] + "…" for c, w in zip(r, widths, strict=True)]
        out.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return out


Line = tuple[str, str]  # (text, rich style)


def _wrap(text: str, width: int, first: str, rest: str, style: str = "") -> list[Line]:
    """``text`` wrapped to ``width`` with a hanging indent, so continuation lines stay under their item."""
    out: list[Line] = []
    paras = [p for p in text.splitlines() if p.strip()] or [""]
    for i, para in enumerate(paras):
        lines = textwrap.wrap(
            para.strip(),
            width=max(20, width),
            initial_indent=first if i == 0 else rest,
            subsequent_indent=rest,
            break_long_words=True,
            break_on_hyphens=False,
        ) or [first]
        out.extend((ln, style) for ln in lines)
    return out


def _verdict_word(report: Report) -> str:
    if report.command == "explain":
        return explain_verdict(report)
    return report.verdict.value.upper()


def explain_verdict(report: Report) -> str:
    """What explain found, in its own words: the cause and its kind, never a node verdict for software."""
    summ = report.explain_summary()
    if not summ["cause_found"]:
        return "NO KNOWN CAUSE FOUND"
    word = " - DRAIN" if report.verdict == Verdict.DRAIN else ""
    return f"CAUSE FOUND: {summ['kind']} ({summ['severity']}){word}"


def layout(report: Report, width: int = PLAIN_WIDTH, prelude: list[str] | None = None) -> list[Line]:
    """Every line of the terminal report for ``width`` columns, with the style each is printed in.

    ``prelude``: a command's own table (net's probes), after the verdict header and before the
    incidents, so the verdict comes first."""
    snap = report.snapshot
    out: list[Line] = []
    out.append((f"gpuclinic {report.command}  {snap.hostname or ''}   {_verdict_word(report)}", "bold"))
    out += _wrap(" · ".join(_meta(report)), width, "", "", "dim")
    rows = gpu_rows(report, compact=width < COMPACT_BELOW)
    if rows:
        out += [
            (ln, "bold" if i == 0 else _row_style(rows[i - 1][-1]))
            for i, ln in enumerate(_plain_table(rows, width))
        ]
    out += [(ln, "") for ln in prelude or []]
    out.append(("", ""))
    bad = [i for i in report.incidents if i.severity > Severity.INFO]
    info_inc = [i for i in report.incidents if i.severity == Severity.INFO]
    if not bad:
        out.append((all_clear_line(report, bool(info_inc)), "green"))
        out.append(("", ""))
    by_id = {i.id: [f for f in report.findings if f.incident == i.id] for i in report.incidents}
    for inc in bad:
        out += _incident_lines(inc, by_id.get(inc.id, []), width)
        out.append(("", ""))
    if info_inc:
        out.append(("Notes", "bold underline"))
        for inc in info_inc:
            out += _wrap(
                f"{inc.code}" + (f" [{inc.gpu.label()}]" if inc.gpu else "") + f"  {inc.title}",
                width,
                "  INFO     ",
                "           ",
                "cyan",
            )
        out.append(("", ""))
    if report.skipped:
        out.append(("Could not check", "bold"))
        for line in grouped_skipped(report):
            out += _wrap(line, width, "  - ", "    ", "dim")
    while out and not out[-1][0]:
        out.pop()
    return out


def all_clear_line(report: Report, notes: bool) -> str:
    """The line when nothing needs action; with notes it must not read as "nothing was flagged"
    (net: a mirror candidate's "per-conn cap" row above an all-clear contradicted itself)."""
    if report.command == "explain" and not report.explain_summary()["cause_found"]:
        return "No known problem found."  # (an explain whose only cause is information: its notes, below)
    return "Nothing needs action; see the notes below." if notes else "No problems found."


def _row_style(verdict: str) -> str:
    return {"drain": "red", "lost": "red", "warning": "yellow"}.get(verdict.split()[0] if verdict else "", "")


def _incident_lines(inc: Incident, findings: list[Finding], width: int) -> list[Line]:
    out: list[Line] = []
    sev = inc.severity.label.upper()
    out += _wrap(inc.title, width, f"{sev:9}", " " * 9, _SEV_STYLE[inc.severity])
    label = inc.gpu.label() if inc.gpu else ""
    bus = inc.gpu.pci_bus_id if inc.gpu and inc.gpu.pci_bus_id and inc.gpu.pci_bus_id not in label else ""
    where = " · ".join(x for x in (inc.code, label, bus) if x)
    out += _wrap(where, width, " " * 9, " " * 9, "bold")
    root = next((f for f in findings if f.code == inc.code), None)
    symptoms = [f for f in findings if f is not root]
    if symptoms:
        out.append((" " * 9 + "explains:", "dim"))
        for f in symptoms:
            out += _wrap(f"{f.code}  {f.title}", width, " " * 11 + "· ", " " * 15, "dim")
    ev = inc.evidence[:6]
    for e in ev:
        out += _wrap(e, width, " " * 9 + "│ ", " " * 9 + "│   ", "dim")
    if len(inc.evidence) > 6:
        out.append((" " * 9 + f"│ … {len(inc.evidence) - 6} more (see --json)", "dim"))
    if inc.first_step:
        out += _wrap(inc.first_step, width, " " * 9 + "→ ", " " * 11, "")
    elif root is not None and root.remedy:
        out += _wrap(root.remedy.strip().splitlines()[0], width, " " * 9 + "→ ", " " * 11, "")
    if inc.runbook:
        out += _wrap(all_steps(inc.code, inc.gpu), width, " " * 9 + "→ ", " " * 11, "dim")
    return out


def render_plain(
    report: Report, file: TextIO | None = None, width: int | None = None, *, prelude: list[str] | None = None
) -> None:
    """Plain text for pipes, logs and NO_COLOR: the same lines as on a terminal, without importing rich.

    Why a second path: rich costs ~25 ms to import, a third of ``doctor --scenario``'s run time,
    and brings nothing when there is no terminal to colour.
    """
    f = file or sys.stdout
    w = width or _env_width() or PLAIN_WIDTH
    f.write("\n".join(text.rstrip() for text, _ in layout(report, w, prelude)) + "\n")
    f.flush()


def _env_width() -> int | None:
    try:
        v = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return v if v >= 40 else None


def _meta(report: Report) -> list[str]:
    snap = report.snapshot
    meta = []
    if snap.origin != "live":  # "scenario:fallen-off-bus" reads "scenario fallen-off-bus", not twice
        names = [i.removeprefix(f"{snap.origin}:") for i in snap.inputs]
        meta.append(f"{snap.origin} {', '.join(names)}" if snap.origin == "scenario" and names
                    else f"from {snap.origin}: {', '.join(names) or '-'}")
    if snap.driver_version:
        meta.append(f"driver {snap.driver_version}")
    if snap.cuda_driver_version:
        meta.append(f"CUDA {snap.cuda_driver_version}")
    n = len(snap.gpus)
    # "0 GPUs seen" means something for doctor; for explain or net it is noise.
    if n or report.command == "doctor":
        meta.append(f"{n} GPU{'s' if n != 1 else ''} seen")
    return meta


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


def render_terminal(
    report: Report, console: Console | None = None, *, prelude: list[str] | None = None
) -> None:
    """Colour on a TTY (the console's width); the plain path otherwise."""
    if console is None and not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty()):
        render_plain(report, prelude=prelude)
        return
    from rich.text import Text

    con = console or make_console()
    for text, style in layout(report, con.width, prelude):
        con.print(Text(text.rstrip(), style=style), no_wrap=True, overflow="ignore", crop=False)
