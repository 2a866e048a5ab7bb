"""The run ledger: every supervised run and every interruption, in the shared SQLite store.

Time lost per interruption = progress since the last complete checkpoint (or since the attempt
started, if it made none) + the restart gap (backoff and relaunch until the next attempt starts).
Goodput = (wall time - time lost) / wall time, the figure Meta reports for Llama 3 pre-training.
"""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuclinic.supervise.classify import CLASSES, class_info, is_planned

REPORT_SCHEMA = "gpuclinic.interruptions/1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY,
  started_at REAL NOT NULL,
  ended_at REAL,
  host TEXT,
  command TEXT,
  cwd TEXT,
  gpus TEXT,
  status TEXT NOT NULL DEFAULT 'running',
  exit_code INTEGER,
  attempts INTEGER NOT NULL DEFAULT 0,
  log_path TEXT
);
CREATE TABLE IF NOT EXISTS interruptions (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  attempt INTEGER NOT NULL,
  attempt_started_at REAL NOT NULL,
  at REAL NOT NULL,
  class TEXT NOT NULL,
  planned INTEGER NOT NULL,
  summary TEXT,
  evidence TEXT,
  gpu TEXT,
  exit_code INTEGER,
  signal INTEGER,
  action TEXT,
  last_checkpoint_at REAL,
  checkpoint TEXT,
  lost_s REAL NOT NULL,
  restart_s REAL NOT NULL DEFAULT 0,
  remedy TEXT
);
CREATE INDEX IF NOT EXISTS interruptions_at ON interruptions(at);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at);
"""


# columns added after the first release: (table, column, SQL type)
_ADDED_COLUMNS = (("interruptions", "remedy", "TEXT"), ("interruptions", "incidents", "TEXT"))


def ensure_schema(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)
    for table, col, typ in _ADDED_COLUMNS:
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if col not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {col} {typ}")


class Ledger:
    """Writes one run's rows.  Every write is its own short transaction (WAL: readers never wait)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        ensure_schema(conn)

    def start_run(
        self, *, started_at: float, host: str, command: list[str], cwd: str, gpus: list[str], log_path: str
    ) -> int:
        cur = self.conn.execute(
            "INSERT INTO runs(started_at, host, command, cwd, gpus, log_path) VALUES (?,?,?,?,?,?)",
            (started_at, host, json.dumps(command), cwd, json.dumps(gpus), log_path),
        )
        assert cur.lastrowid is not None
        return int(cur.lastrowid)

    def attempt_started(self, run_id: int, attempt: int, at: float) -> None:
        """Count the attempt and charge the restart gap to the interruption that caused it."""
        self.conn.execute("UPDATE runs SET attempts=? WHERE id=?", (attempt, run_id))
        self.conn.execute(
            "UPDATE interruptions SET restart_s=max(0, ? - at)"
            " WHERE run_id=? AND attempt=? AND action LIKE 'restart%'",
            (at, run_id, attempt - 1),
        )

    def add_interruption(
        self,
        run_id: int,
        *,
        attempt: int,
        attempt_started_at: float,
        at: float,
        cls: str,
        summary: str,
        evidence: list[str],
        gpu: dict[str, Any] | None,
        exit_code: int | None,
        signal: int | None,
        action: str,
        last_checkpoint_at: float | None,
        checkpoint: str | None,
        remedy: str = "",
        incidents: list[dict[str, Any]] | None = None,
    ) -> float:
        """Record one interruption (with its incidents, ``Incident.to_dict()`` each); returns the progress
        lost (seconds)."""
        base = attempt_started_at
        if last_checkpoint_at is not None and last_checkpoint_at > base:
            base = last_checkpoint_at
        lost = max(0.0, at - base)
        self.conn.execute(
            "INSERT INTO interruptions(run_id, attempt, attempt_started_at, at, class, planned, summary,"
            " evidence, gpu, exit_code, signal, action, last_checkpoint_at, checkpoint, lost_s, "
            "remedy, incidents) VALUES"
            " (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                attempt,
                attempt_started_at,
                at,
                cls,
                int(is_planned(cls)),
                summary,
                json.dumps(evidence),
                json.dumps(gpu) if gpu else None,
                exit_code,
                signal,
                action,
                last_checkpoint_at,
                checkpoint,
                lost,
                remedy or None,
                json.dumps(incidents) if incidents else None,
            ),
        )
        return lost

    def finish_run(self, run_id: int, *, ended_at: float, status: str, exit_code: int | None) -> None:
        self.conn.execute(
            "UPDATE runs SET ended_at=?, status=?, exit_code=? WHERE id=?",
            (ended_at, status, exit_code, run_id),
        )


@dataclass
class CauseRow:
    cls: str
    title: str
    category: str
    planned: bool
    count: int
    share_pct: float
    share_unexpected_pct: float | None  # Llama 3's table gives shares of unexpected interruptions
    lost_s: float


def _tenths(seconds: float) -> int:
    """Lost time in whole tenths of a second (half up): every row and every total is built from these,
    so the per-cause totals are exactly the sum of the per-interruption rows as printed."""
    return int(max(0.0, seconds) * 10 + 0.5)


def interruption_report(
    conn: sqlite3.Connection, *, since: float | None = None, now: float | None = None, recent: int = 10
) -> dict[str, Any]:
    """Counts and shares by root cause, planned vs unexpected, MTBI and goodput over runs since ``since``."""
    ensure_schema(conn)
    now = time.time() if now is None else now
    since_v = since if since is not None else float("-inf")
    runs = conn.execute(
        "SELECT id, started_at, ended_at, status FROM runs WHERE started_at >= ? ORDER BY started_at",
        (since_v,),
    ).fetchall()
    ids = [r[0] for r in runs]
    wall = sum(max(0.0, (r[2] if r[2] is not None else now) - r[1]) for r in runs)
    rows: list[tuple[str, float, float]] = []
    last: list[dict[str, Any]] = []
    if ids:
        q = ",".join("?" * len(ids))
        rows = conn.execute(
            f"SELECT class, lost_s, restart_s FROM interruptions WHERE run_id IN ({q}) ORDER BY at", ids
        ).fetchall()
        for r in conn.execute(
            "SELECT run_id, attempt, at, class, planned, summary, gpu, action, lost_s, restart_s, incidents"
            " FROM interruptions"
            f" WHERE run_id IN ({q}) ORDER BY at DESC, id DESC LIMIT ?",
            [*ids, max(0, recent)],
        ):
            gpu = json.loads(r[6]) if r[6] else None
            last.append(
                {
                    "run_id": r[0],
                    "attempt": r[1],
                    "at": r[2],
                    "class": r[3],
                    "planned": bool(r[4]),
                    "summary": r[5],
                    "gpu": gpu,
                    "action": r[7],
                    "lost_s": _tenths(float(r[8]) + float(r[9] or 0)) / 10,
                    "incidents": json.loads(r[10]) if r[10] else [],
                }
            )
    counts: Counter[str] = Counter(r[0] for r in rows)
    lost_t: dict[str, int] = {}
    for c, lost, restart in rows:
        lost_t[c] = lost_t.get(c, 0) + _tenths(float(lost) + float(restart or 0.0))
    lost_by = {c: t / 10 for c, t in lost_t.items()}
    total = len(rows)
    planned = sum(n for c, n in counts.items() if is_planned(c))
    unexpected = total - planned
    lost_total = sum(lost_t.values()) / 10
    order = {c: i for i, c in enumerate(CLASSES)}
    causes = [
        CauseRow(
            c,
            class_info(c)["title"],
            class_info(c)["category"],
            is_planned(c),
            n,
            round(100.0 * n / total, 1) if total else 0.0,
            None if is_planned(c) else round(100.0 * n / unexpected, 1),
            round(lost_by.get(c, 0.0), 3),
        )
        for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], order.get(kv[0], 99), kv[0]))
    ]
    useful = max(0.0, wall - lost_total)
    return {
        "schema": REPORT_SCHEMA,
        "since": since,
        "generated_at": now,
        "runs": len(runs),
        "runs_completed": sum(1 for r in runs if r[3] == "completed"),
        "interruptions": total,
        "planned": planned,
        "unexpected": unexpected,
        "wall_s": round(wall, 3),
        "lost_s": round(lost_total, 3),
        "useful_s": round(useful, 3),
        "goodput_pct": round(100.0 * useful / wall, 2) if wall > 0 else None,
        "mtbi_s": round(wall / total, 3) if total else None,
        "mtbi_unexpected_s": round(wall / unexpected, 3) if unexpected else None,
        "causes": [c.__dict__ for c in causes],
        "recent": last,
    }


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = float(s)
    if s < 60:  # tenths, like the report's sums: 2.6s + 1.6s + 0.4s is shown as 4.6s, not 3s + 2s + 0s = 4s
        return f"{s:.1f}s".replace(".0s", "s")
    if s < 3600:
        return f"{s / 60:.1f}m"
    if s < 86400 * 3:
        return f"{s / 3600:.2f}h"
    return f"{s / 86400:.1f}d"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _summary_lines(rep: dict[str, Any]) -> list[str]:
    gp = rep["goodput_pct"]
    return [
        f"{rep['interruptions']} interruptions ({rep['unexpected']} unexpected, {rep['planned']} planned) "
        f"over {fmt_duration(rep['wall_s'])} of wall time in {rep['runs']} runs",
        f"mean time between interruptions: {fmt_duration(rep['mtbi_s'])} "
        f"(unexpected only: {fmt_duration(rep['mtbi_unexpected_s'])})",
        f"time lost: {fmt_duration(rep['lost_s'])}; goodput (useful / wall time): "
        + (f"{gp:.1f}%" if gp is not None else "-"),
    ]


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _gpu_label(g: dict[str, Any] | None) -> str:
    if not g:
        return "-"
    return str(
        g.get("uuid") or (f"GPU {g['index']}" if g.get("index") is not None else g.get("pci_bus_id") or "-")
    )


def render_markdown(rep: dict[str, Any]) -> str:
    out = ["# Training interruptions", ""]
    out += [f"- {line}" for line in _summary_lines(rep)]
    out += [
        "",
        "| Root cause | Category | Planned | Count | % of all | % of unexpected | Time lost |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for c in rep["causes"]:
        out.append(
            f"| {c['title']} | {c['category']} | {'yes' if c['planned'] else 'no'} | {c['count']} | "
            f"{c['share_pct']:.1f}% | {_pct(c['share_unexpected_pct'])} | {fmt_duration(c['lost_s'])} |"
        )
    if not rep["causes"]:
        out.append("| (none) | | | 0 | | | |")
    if rep.get("recent"):
        out += [
            "",
            "## Most recent",
            "",
            "| When | Run/attempt | Cause | GPU | Action | Time lost | What |",
            "|---|---|---|---|---|---:|---|",
        ]
        for r in rep["recent"]:
            what = str(r["summary"] or "").replace("|", "\\|")[:160]
            out.append(
                f"| {_when(r['at'])} | {r['run_id']}/{r['attempt']} | {r['class']} | "
                f"{_gpu_label(r['gpu'])} | {r['action']} | {fmt_duration(r['lost_s'])} | {what} |"
            )
    return "\n".join(out) + "\n"


def render_text(rep: dict[str, Any]) -> str:
    headers = ("Root cause", "Category", "Planned", "Count", "% all", "% unexp.", "Time lost")
    body = [
        (
            c["title"],
            c["category"],
            "yes" if c["planned"] else "no",
            str(c["count"]),
            f"{c['share_pct']:.1f}%",
            _pct(c["share_unexpected_pct"]),
            fmt_duration(c["lost_s"]),
        )
        for c in rep["causes"]
    ]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    right = {3, 4, 5, 6}

    def row(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)
        ).rstrip()

    out = ["Training interruptions", *(f"  {s}" for s in _summary_lines(rep)), ""]
    out.append(row(headers))
    out.append(row(tuple("-" * w for w in widths)))
    out += [row(r) for r in body] or ["(no interruptions recorded)"]
    if rep.get("recent"):
        out += ["", "Most recent:"]
        for r in rep["recent"]:
            out.append(
                f"  {_when(r['at'])}  run {r['run_id']}/{r['attempt']}  {r['class']:<17} "
                f"{_gpu_label(r['gpu'])}  {r['action']}  lost {fmt_duration(r['lost_s'])}  "
                f"{str(r['summary'] or '')[:120]}"
            )
    return "\n".join(out) + "\n"


def render_json(rep: dict[str, Any]) -> str:
    return json.dumps(rep, indent=2, sort_keys=False)
