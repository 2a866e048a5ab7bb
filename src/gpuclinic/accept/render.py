"""Scorecard renderers: a plain table for the terminal, Markdown for a ticket, the ``--compare``
table.  (``html.py`` draws the self-contained page.)"""

from __future__ import annotations

from typing import Any

from gpuclinic.accept.model import Item, Scorecard
from gpuclinic.accept.specs import threshold

HEADERS = ["status", "item", "gpu", "measured", "expected", "unit", "basis / why"]


def fmt_value(v: float | str | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 1:
            return f"{v:.1f}"
        return f"{v:.3g}"
    return str(v)


def _note(it: Item) -> str:
    if it.status == "skipped":
        return it.why
    if it.status == "pass":
        return it.basis if it.basis else it.why
    return it.why or it.basis


def rows(sc: Scorecard) -> list[list[str]]:
    return [[it.status.upper() if it.status in ("fail", "warn") else it.status, it.id, it.gpu or "-",
             fmt_value(it.measured), fmt_value(it.expected), it.unit, _note(it)] for it in sc.items]


def header_lines(sc: Scorecard) -> list[str]:
    where = f"scenario {sc.scenario}" if sc.scenario else sc.origin
    out = [f"gpuclinic accept: {sc.hostname or '?'} ({where}, {sc.mode} mode)"]
    ran = sc.backend is not None and (not sc.backend.startswith("simulated") or "workload:" in sc.backend)
    out.append(f"backend: {sc.backend or 'none'}" + (f" via {sc.python}" if sc.python and ran else ""))
    if sc.gpus:
        names: dict[str, int] = {}
        for g in sc.gpus:
            k = f"{g.get('name')} [{g.get('sku') or 'no spec row'}]"
            names[k] = names.get(k, 0) + 1
        out.append("GPUs: " + "; ".join(f"{n} x {k}" for k, n in names.items()))
    if sc.burn_stopped:
        out.append(f"burn stopped early: {sc.burn_stopped}")
    return out


def summary_line(sc: Scorecard) -> str:
    s = sc.summary()
    c = s["counts"]
    return (f"verdict: {s['verdict'].upper()}  ({c['fail']} fail, {c['warn']} warn, {c['pass']} pass, "
            f"{c['skipped']} skipped; exit {s['exit_code']})")


def merged_rows(sc: Scorecard) -> list[list[str]]:
    """Rows that differ only in the GPU fold into one ("0-5,7"), so an 8-GPU card stays readable."""
    out: list[list[str]] = []
    for r in rows(sc):
        last = out[-1] if out else None
        if (last is not None and last[0] == r[0] and last[1] == r[1] and last[3:] == r[3:] and r[2] != "-"
                and "-" not in r[2]):
            last[2] = last[2] + "," + r[2]
            continue
        out.append(list(r))
    return out


def render_text(sc: Scorecard, width: int = 160) -> str:
    rs = merged_rows(sc)
    widths = [max(len(h), *(len(r[i]) for r in rs)) if rs else len(h) for i, h in enumerate(HEADERS[:-1])]
    widths = [min(w, 26) for w in widths]
    lines = header_lines(sc) + [""]

    def line(cells: list[str]) -> str:
        head = "  ".join(c[:w].ljust(w) for c, w in zip(cells[:-1], widths, strict=True))
        room = max(30, width - len(head) - 2)
        note = cells[-1] if len(cells[-1]) <= room else cells[-1][: room - 1] + "…"
        return (head + "  " + note).rstrip()

    lines.append(line(HEADERS))
    lines += [line(r) for r in rs]
    lines += [""] + [f"note: {n}" for n in sc.notes] + [summary_line(sc)]
    return "\n".join(lines)


def render_markdown(sc: Scorecard) -> str:
    out = [f"## {header_lines(sc)[0]}", ""] + [f"- {x}" for x in header_lines(sc)[1:]] + [""]
    out.append("| " + " | ".join(HEADERS) + " |")
    out.append("|" + "---|" * len(HEADERS))
    for r in rows(sc):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    out += [""] + [f"- note: {n}" for n in sc.notes] + ["", f"**{summary_line(sc)}**"]
    return "\n".join(out)


def render_compare(prev: dict[str, Any] | None, deltas: list[dict[str, Any]]) -> str:
    if prev is None:
        return "compare: no earlier run of this host in the store"
    lines = [f"compare with run {prev.get('run_id')} of {prev.get('started_at')} ({prev.get('mode')} mode):"]
    if not deltas:
        return (
            lines[0]
            + f" no differences (numbers within {threshold('compare_min_change_pct'):g}%, same statuses)"
        )
    w = max(len(d["key"]) for d in deltas)
    for d in deltas:
        ch = f"{d['delta_pct']:+.1f}%" if d["delta_pct"] is not None else ""
        st = "" if d["previous_status"] == d["status"] else f"  {d['previous_status']} -> {d['status']}"
        lines.append(
            f"  {d['key'].ljust(w)}  {fmt_value(d['previous'])} -> {fmt_value(d['current'])} "
            f"{d['unit']}  {ch}{st}".rstrip()
        )
    return "\n".join(lines)
