"""The embedded SQLite store shared by ``watch`` (samples, events), ``run`` (the ledger) and
``accept`` (table ``accept_runs``, owned by ``accept/history.py``: one scorecard per run).

One file, WAL mode, so the agent writes while ``history``/``events``/``report`` read.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


def default_db_path() -> Path:
    """``$GPUCLINIC_DB``, else ``$XDG_STATE_HOME/gpuclinic/gpuclinic.db`` (``~/.local/state/...``)."""
    env = os.environ.get("GPUCLINIC_DB")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "gpuclinic" / "gpuclinic.db"


def connect(path: str | os.PathLike[str] | None = None, *, timeout_s: float = 10.0) -> sqlite3.Connection:
    """Open (creating folders) the store in WAL mode with sane durability settings."""
    p = Path(path) if path is not None else default_db_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(p), timeout=timeout_s, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn
