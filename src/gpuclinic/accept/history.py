"""Accept runs in the local store: ``--compare`` against the previous run, and the latest run for
``fleet``.

Why the store: "is it slower than last week?" needs last week's numbers on the same box.  The whole
scorecard is kept as JSON (schema ``gpuclinic.accept/1``) with a few columns to select by.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

from gpuclinic.accept.model import Scorecard
from gpuclinic.accept.specs import threshold
from gpuclinic.store import connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS accept_runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  started_at TEXT NOT NULL,
  hostname TEXT,
  origin TEXT NOT NULL,
  scenario TEXT,
  mode TEXT NOT NULL,
  verdict TEXT NOT NULL,
  exit_code INTEGER NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS accept_runs_host ON accept_runs(hostname, origin, scenario, id);
"""


def _conn(db: str | os.PathLike[str] | None) -> sqlite3.Connection:
    c = connect(db)
    c.executescript(SCHEMA)
    return c


def save_run(sc: Scorecard, db: str | os.PathLike[str] | None = None) -> int:
    """Store a finished scorecard; returns its run id (also set on ``sc.run_id``)."""
    c = _conn(db)
    try:
        cur = c.execute(
            "INSERT INTO accept_runs (started_at, hostname, origin, scenario, mode, verdict, exit_code, doc) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (
                sc.started_at or "",
                sc.hostname,
                sc.origin,
                sc.scenario,
                sc.mode,
                sc.summary()["verdict"],
                sc.exit_code,
                "{}",
            ),
        )
        sc.run_id = int(cur.lastrowid or 0)
        c.execute("UPDATE accept_runs SET doc=? WHERE id=?", (json.dumps(sc.to_dict()), sc.run_id))
        return sc.run_id
    finally:
        c.close()


def previous_run(sc: Scorecard, db: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The run before ``sc`` on the same host, origin and scenario."""
    c = _conn(db)
    try:
        row = c.execute(
            "SELECT doc FROM accept_runs WHERE hostname IS ? AND origin=? AND scenario IS ? AND id < ? "
            "ORDER BY id DESC LIMIT 1",
            (sc.hostname, sc.origin, sc.scenario, sc.run_id if sc.run_id is not None else 2**62),
        ).fetchone()
    finally:
        c.close()
    return json.loads(row[0]) if row else None


def latest_run(
    hostname: str | None = None, db: str | os.PathLike[str] | None = None, include_scenarios: bool = False
) -> dict[str, Any] | None:
    """The newest stored scorecard (``gpuclinic.accept/1`` dict), optionally for one host; for ``fleet``.

    Simulated runs are left out unless ``include_scenarios``.
    """
    c = _conn(db)
    try:
        q = "SELECT doc FROM accept_runs WHERE 1=1"
        args: list[Any] = []
        if hostname is not None:
            q += " AND hostname=?"
            args.append(hostname)
        if not include_scenarios:
            q += " AND origin != 'scenario'"
        row = c.execute(q + " ORDER BY id DESC LIMIT 1", args).fetchone()
    finally:
        c.close()
    return json.loads(row[0]) if row else None


def compare(prev: dict[str, Any], cur: Scorecard) -> list[dict[str, Any]]:
    """Items present in both runs whose number moved by ``compare_min_change_pct`` or more, or whose
    status changed: previous and current value, change in percent."""
    min_pct = threshold("compare_min_change_pct")
    old = {}
    for d in prev.get("items", []):
        key = f"{d['id']}@{d.get('gpu')}" if d.get("gpu") is not None else d["id"]
        old[key] = d
    rows = []
    for it in cur.items:
        p = old.get(it.key)
        if p is None:
            continue
        a, b = p.get("measured"), it.measured
        delta = None
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and a:
            delta = round((b - a) / abs(a) * 100, 1)
        same_status = p.get("status") == it.status
        if same_status and (delta is None and a == b or delta is not None and abs(delta) < min_pct):
            continue
        rows.append(
            {
                "key": it.key,
                "title": it.title,
                "unit": it.unit,
                "previous": a,
                "current": b,
                "delta_pct": delta,
                "previous_status": p.get("status"),
                "status": it.status,
            }
        )
    return rows
