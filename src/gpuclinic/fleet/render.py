"""The fleet as a terminal table, Markdown or JSON (``gpuclinic.fleet/1``)."""

from __future__ import annotations

import json
import os
import sys
from typing import TextIO

from gpuclinic.fleet.model import Fleet, FleetIncident, NodeView

_SHORT = {
    "ecc_corrected": "ECC",
    "remapped_rows": "remap",
    "pcie_replays": "replay",
    "throttle_s": "throttle s",
    "xids_per_day": "XID/day",
}


def _age(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0.0, s)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def _inc(i: FleetIncident) -> str:
    gpu = f" GPU {i.gpu}" if i.gpu is not None else ""
    return f"{i.code}{gpu} ({_age(i.age_s)})"


def _incidents(n: NodeView, limit: int = 3) -> str:
    if n.verdict == "unreachable":
        return n.error or "unreachable"
    items = sorted(n.incidents, key=lambda i: (i.severity != "critical", i.gpu or "", i.code))
    text = ", ".join(_inc(i) for i in items[:limit]) or "-"
    return text + (f" +{len(items) - limit}" if len(items) > limit else "")


def _gpus(n: NodeView) -> str:
    if n.gpus_seen is None:
        return "-"
    return f"{n.gpus_seen}/{n.gpus_expected}" if n.gpus_expected is not None else str(n.gpus_seen)


def _trends(n: NodeView) -> str:
    d = n.trends.to_dict()
    return ", ".join(f"{_SHORT[k]} +{d[k]:g}" for k in n.trends.degrading()) or "-"


def _idle(n: NodeView) -> str:
    if n.idle_gpu_hours is None:
        return "-"
    return f"{n.idle_gpu_hours:.1f}" + (f" (${n.idle_cost:,.0f})" if n.idle_cost is not None else "")


def _ledger(n: NodeView) -> str:
    if n.interruptions is None and n.goodput is None:
        return "-"
    g = f"{100 * n.goodput:.1f}%" if n.goodput is not None else "?"
    return f"{n.interruptions or 0} / {g}"


def _room(n: NodeView) -> str:
    r = n.room
    if r is None:
        return "-"
    if not r.get("bmc_up"):
        return "BMC not answering"
    parts = [f"inlet {r['inlet_c']:g} C" if r.get("inlet_c") is not None else ""]
    parts += [
        f"{r[k]} {what} failed"
        for k, what in (("fans_failed", "fan(s)"), ("psus_failed", "PSU(s)"))
        if r.get(k)
    ]
    return ", ".join(p for p in parts if p) or "ok"


def rows(fleet: Fleet) -> list[list[str]]:
    return [
        [n.node, n.verdict, _incidents(n), _gpus(n), _trends(n), _idle(n), _ledger(n), _room(n)]
        for n in fleet.sorted_nodes()
    ]


HEADER = [
    "node",
    "verdict",
    "open incidents (age)",
    "GPUs seen/exp",
    "degrading",
    "idle GPU-h",
    "interr. / goodput",
    "room (BMC)",
]


def summary_line(fleet: Fleet) -> str:
    s = fleet.summary()
    by = s["by_verdict"]
    parts = [
        f"{s['nodes']} nodes: {by['drain']} drain, {by['unreachable']} unreachable, {by['warning']} warning, "
        f"{by['healthy']} healthy" + (f", {by['unknown']} unknown" if by["unknown"] else ""),
        f"GPUs {s['gpus_seen']}/{s['gpus_expected']}",
    ]
    if s["idle_gpu_hours"] is not None:
        parts.append(
            f"idle {s['idle_gpu_hours']:.1f} GPU-h over {fleet.window_s / 3600:g}h"
            + (f" (${s['idle_cost']:,.0f})" if "idle_cost" in s else "")
        )
    if fleet.took_s is not None:
        parts.append(f"answered in {fleet.took_s:.2f}s")
    return "; ".join(parts)


def render_markdown(fleet: Fleet) -> str:
    out = [
        f"## Fleet ({fleet.source})",
        "",
        summary_line(fleet),
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    for r in rows(fleet):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    return "\n".join(out) + "\n"


def render_json(fleet: Fleet) -> str:
    return json.dumps(fleet.to_dict(), indent=1)


def render_plain(fleet: Fleet, file: TextIO | None = None) -> None:
    """Pipes, logs and NO_COLOR: one line per node (aligned columns, never folded mid-word), then
    the summary."""
    table = [HEADER, *rows(fleet)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    f = file or sys.stdout
    f.write("\n".join([f"gpuclinic fleet: {fleet.source}", *lines, summary_line(fleet)]) + "\n")
    f.flush()


def render_terminal(fleet: Fleet) -> None:
    if os.environ.get("NO_COLOR") or not sys.stdout.isatty():
        render_plain(fleet)
        return
    from rich.console import Console
    from rich.table import Table

    style = {
        "drain": "bold red",
        "unreachable": "bold magenta",
        "unknown": "magenta",
        "warning": "yellow",
        "healthy": "green",
    }
    t = Table(title=f"gpuclinic fleet: {fleet.source}", show_lines=False)
    for h in HEADER:
        t.add_column(h, overflow="fold")
    for n, r in zip(fleet.sorted_nodes(), rows(fleet), strict=True):
        t.add_row(*r, style=style.get(n.verdict))
    c = Console()
    c.print(t)
    c.print(summary_line(fleet))
