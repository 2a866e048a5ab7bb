"""Samples and events on disk: one SQLite file (WAL) shared with ``run``.

Samples are one wide row per (GPU, time) in a ``WITHOUT ROWID`` table keyed by (gpu, ts), so a day of
one metric is a single range scan and a GPU-day at 1 Hz costs a few MB.  Raw rows are kept for
``raw_retention`` (48 h) and folded into 1-minute rollups kept for ``rollup_retention`` (30 days).
Writes are batched (one transaction per flush); a failing disk (``database or disk is full``) keeps
the rows in memory, reports it, and retries, so alerting never depends on the disk.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.model import Severity
from gpuclinic.store import connect
from gpuclinic.watch.events import Event

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Metric:
    name: str  # what users type: `gpuclinic history temperature`
    column: str
    unit: str
    help: str


METRICS: tuple[Metric, ...] = (
    Metric("temperature", "temp_c", "celsius", "GPU core temperature"),
    Metric("memory_temperature", "mem_temp_c", "celsius", "HBM/memory temperature"),
    Metric("slowdown_temperature", "slowdown_c", "celsius", "temperature where hardware slowdown starts"),
    Metric("power", "power_w", "watts", "power draw"),
    Metric("power_limit", "power_limit_w", "watts", "enforced power limit"),
    Metric("sm_clock", "sm_mhz", "MHz", "SM clock"),
    Metric("memory_clock", "mem_mhz", "MHz", "memory clock"),
    Metric("utilization", "util_pct", "percent", "GPU utilisation"),
    Metric("memory_utilization", "mem_util_pct", "percent", "memory controller utilisation"),
    Metric("memory_used", "mem_used_b", "bytes", "framebuffer memory used"),
    Metric("memory_total", "mem_total_b", "bytes", "framebuffer memory total"),
    Metric("fan", "fan_pct", "percent", "fan speed"),
    Metric("throttle_reasons", "reasons", "bitmask", "clock event (throttle) reasons, NVML bitmask"),
    Metric("ecc_corrected", "ecc_corr", "count", "volatile corrected ECC errors"),
    Metric("ecc_uncorrected", "ecc_uncorr", "count", "volatile uncorrected ECC errors"),
    Metric("remapped_correctable", "remap_corr", "count", "rows remapped for correctable errors"),
    Metric("remapped_uncorrectable", "remap_uncorr", "count", "rows remapped for uncorrectable errors"),
    Metric("pcie_gen", "pcie_gen", "gen", "current PCIe link generation"),
    Metric("pcie_width", "pcie_width", "lanes", "current PCIe link width"),
    Metric("pcie_replay", "pcie_replay", "count", "PCIe replay counter"),
    Metric("processes", "nproc", "count", "compute processes on the GPU"),
)
METRIC_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS} | {m.column: m for m in METRICS}
_COLS = [m.column for m in METRICS]
_INT_COLS = {"reasons", "ecc_corr", "ecc_uncorr", "remap_corr", "remap_uncorr", "pcie_gen", "pcie_width",
             "pcie_replay", "nproc", "mem_used_b", "mem_total_b"}


def sample_row(g: GpuFacts) -> tuple[Any, ...]:
    """The stored values of one GPU sample, in ``METRICS`` order."""
    mask = g.clock_event_reasons_mask
    if mask is None and g.clock_event_reasons:
        from gpuclinic.watch.reasons import mask_of

        mask = mask_of(g.clock_event_reasons)
    return (
        g.temperature_c, g.memory_temperature_c, g.slowdown_temp_c, g.power_draw_w,
        g.power_enforced_limit_w if g.power_enforced_limit_w is not None else g.power_limit_w,
        g.sm_clock_mhz, g.mem_clock_mhz, g.utilization_gpu_pct, g.utilization_memory_pct,
        g.memory_used_bytes, g.memory_total_bytes, g.fan_percent, mask,
        _first(g.ecc_volatile_corrected, g.ecc_aggregate_corrected),
        _first(g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected),
        g.remapped_rows_correctable, g.remapped_rows_uncorrectable, g.pcie_gen, g.pcie_width,
        g.pcie_replay_count, len(g.processes),
    )


def _first(*vals: int | None) -> int | None:
    return next((v for v in vals if v is not None), None)


class StoreError(Exception):
    """The store could not write (disk full, read-only, corrupt); the message is one line."""


class _BitOr:
    """SQLite aggregate: OR of throttle-reason masks over a rollup minute."""

    def __init__(self) -> None:
        self.v = 0
        self.seen = False

    def step(self, x: int | None) -> None:
        if x is not None:
            self.v |= int(x)
            self.seen = True

    def finalize(self) -> int | None:
        return self.v if self.seen else None


class WatchStore:
    """The agent's writer and the CLI's reader of samples and events."""

    def __init__(self, path: str | Path | None, *, raw_retention_s: float = 48 * 3600.0,
                 rollup_retention_s: float = 30 * 86400.0, max_buffered: int = 36000) -> None:
        try:
            self.conn = connect(path)
            self.conn.create_aggregate("bitor", 1, _BitOr)  # type: ignore[arg-type]
            self._init_schema()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open store {path}: {e}") from None
        self.path = path
        self.raw_retention_s = raw_retention_s
        self.rollup_retention_s = rollup_retention_s
        self._buf: deque[tuple[Any, ...]] = deque(maxlen=max_buffered)
        self._pending_events: dict[str, Event] = {}
        self._lock = threading.Lock()
        self.error: str | None = None  # last write error, None when healthy
        self.errors_total = 0
        self.dropped = 0
        self.bytes_written_rows = 0
        self._last_ms = 0
        self._gpu_ident: list[tuple[Any, ...]] = []
        self._gpus_written_at = 0.0
        self._gpus_seen: list[tuple[Any, ...]] = []

    # -- schema ---------------------------------------------------------------------------------------
    def _init_schema(self) -> None:
        cols = ", ".join(f"{c} {'INTEGER' if c in _INT_COLS else 'REAL'}" for c in _COLS)
        c = self.conn
        c.execute("CREATE TABLE IF NOT EXISTS watch_meta (key TEXT PRIMARY KEY, value TEXT)")
        c.execute(f"CREATE TABLE IF NOT EXISTS samples (gpu INTEGER NOT NULL, ts INTEGER NOT NULL, {cols}, "
                  "PRIMARY KEY (gpu, ts)) WITHOUT ROWID")
        c.execute(
            f"CREATE TABLE IF NOT EXISTS samples_1m (gpu INTEGER NOT NULL, ts INTEGER NOT NULL, n INTEGER, "
            f"{cols}, temp_max REAL, util_min REAL, PRIMARY KEY (gpu, ts)) WITHOUT ROWID"
        )
        c.execute(
            "CREATE TABLE IF NOT EXISTS gpus (gpu INTEGER PRIMARY KEY, uuid TEXT, name TEXT, "
            "pci_bus_id TEXT, first_seen REAL, last_seen REAL)"
        )
        c.execute(
            "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, "
            "code TEXT NOT NULL, severity TEXT NOT NULL, gpu INTEGER, uuid TEXT, title TEXT, "
            "evidence TEXT, remedy TEXT, data TEXT, opened REAL NOT NULL, resolved REAL, last_seen REAL, "
            "count INTEGER DEFAULT 1)"
        )
        c.execute("CREATE INDEX IF NOT EXISTS events_opened ON events (opened)")
        c.execute("CREATE INDEX IF NOT EXISTS events_open_key ON events (key) WHERE resolved IS NULL")
        c.execute("INSERT OR IGNORE INTO watch_meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    # -- writing --------------------------------------------------------------------------------------
    def add_samples(self, ts: float, gpus: Sequence[GpuFacts]) -> None:
        """Buffer one tick; :meth:`flush` writes it.  Lost GPUs are not sampled (no values to store)."""
        ms = int(round(ts * 1000))
        with self._lock:
            if ms <= self._last_ms < ms + 1000:  # two ticks in one millisecond: keep both rows
                ms = self._last_ms + 1
            self._last_ms = ms
            for g in gpus:
                if g.lost:
                    continue
                if len(self._buf) == self._buf.maxlen:
                    self.dropped += 1
                self._buf.append((g.index, ms, *sample_row(g)))
            ident = [(g.index, g.uuid, g.name, g.pci_bus_id) for g in gpus]
            # the gpus table changes rarely: write it when the set changes, else once a minute
            if ident != self._gpu_ident or ts - self._gpus_written_at >= 60:
                self._gpu_ident = ident
                self._gpus_written_at = ts
                self._gpus_seen = [(*i, ts) for i in ident]

    def put_event(self, ev: Event) -> None:
        """Queue an event insert/update for the next flush."""
        with self._lock:
            self._pending_events[ev.key + f"@{ev.opened}"] = ev

    def flush(self) -> int:
        """Write buffered rows in one transaction.  Raises :class:`StoreError`; nothing is lost on error."""
        with self._lock:
            rows = list(self._buf)
            events = list(self._pending_events.values())
            gpus = self._gpus_seen
        if not rows and not events:
            return 0
        ph = ", ".join("?" * (len(_COLS) + 2))
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany(
                    f"INSERT OR REPLACE INTO samples (gpu, ts, {', '.join(_COLS)}) VALUES ({ph})", rows
                )
                for idx, uuid, name, bus, ts in gpus:
                    self.conn.execute(
                        "INSERT INTO gpus (gpu, uuid, name, pci_bus_id, first_seen, last_seen) VALUES "
                        "(?,?,?,?,?,?) "
                        "ON CONFLICT(gpu) DO UPDATE SET uuid=excluded.uuid, name=excluded.name, "
                        "pci_bus_id=excluded.pci_bus_id, last_seen=excluded.last_seen",
                        (idx, uuid, name, bus, ts, ts),
                    )
                for ev in events:
                    self._write_event(ev)
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
        except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as e:
            self.errors_total += 1
            self.error = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise StoreError(self.error) from None
        with self._lock:
            if self._gpus_seen is gpus:
                self._gpus_seen = []
            for _ in range(len(rows)):
                self._buf.popleft()
            for ev in events:
                k = ev.key + f"@{ev.opened}"
                if self._pending_events.get(k) is ev:
                    del self._pending_events[k]
        self.error = None
        self.bytes_written_rows += len(rows)
        return len(rows)

    def _write_event(self, ev: Event) -> None:
        vals = (
            ev.code,
            ev.severity.label,
            ev.gpu,
            ev.uuid,
            ev.title,
            json.dumps(ev.evidence),
            ev.remedy,
            json.dumps(ev.data, default=str),
            ev.opened,
            ev.resolved,
            ev.last_seen,
            ev.count,
        )
        if ev.id is None:
            row = self.conn.execute(
                "SELECT id FROM events WHERE key=? AND opened=?", (ev.key, ev.opened)
            ).fetchone()
            if row:
                ev.id = int(row[0])
        if ev.id is None:
            cur = self.conn.execute(
                "INSERT INTO events (key, code, severity, gpu, uuid, title, evidence, remedy, data, opened, "
                "resolved, "
                "last_seen, count) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (ev.key, *vals),
            )
            ev.id = cur.lastrowid
        else:
            self.conn.execute(
                "UPDATE events SET code=?, severity=?, gpu=?, uuid=?, title=?, evidence=?, remedy=?, data=?, "
                "opened=?, "
                "resolved=?, last_seen=?, count=? WHERE id=?",
                (*vals, ev.id),
            )

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def maintain(self, now: float) -> None:
        """Roll complete minutes into ``samples_1m`` and apply retention.  Raises :class:`StoreError`."""
        now_ms = int(now * 1000)
        minute_now = now_ms - now_ms % 60000
        try:
            last = self.conn.execute("SELECT value FROM watch_meta WHERE key='rolled_until'").fetchone()
            start = int(last[0]) if last else 0
            if start == 0:
                first = self.conn.execute("SELECT MIN(ts) FROM samples").fetchone()[0]
                start = (int(first) - int(first) % 60000) if first is not None else minute_now
            if minute_now > start:
                avgs = ", ".join(
                    f"bitor({c})" if c == "reasons" else (f"MAX({c})" if c in _INT_COLS else f"AVG({c})")
                    for c in _COLS
                )
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.execute(
                    f"INSERT OR REPLACE INTO samples_1m (gpu, ts, n, {', '.join(_COLS)}, temp_max, util_min) "
                    f"SELECT gpu, ts - ts % 60000 AS m, COUNT(*), {avgs}, MAX(temp_c), MIN(util_pct) FROM "
                    "samples "
                    "WHERE ts >= ? AND ts < ? GROUP BY gpu, m",
                    (start, minute_now),
                )
                self.conn.execute(
                    "INSERT OR REPLACE INTO watch_meta VALUES ('rolled_until', ?)", (str(minute_now),)
                )
                self.conn.execute(
                    "DELETE FROM samples WHERE ts < ?", (now_ms - int(self.raw_retention_s * 1000),)
                )
                self.conn.execute(
                    "DELETE FROM samples_1m WHERE ts < ?", (now_ms - int(self.rollup_retention_s * 1000),)
                )
                self.conn.execute(
                    "DELETE FROM events WHERE resolved IS NOT NULL AND resolved < ?",
                    (now - self.rollup_retention_s,),
                )
                self.conn.execute("COMMIT")
        except (sqlite3.OperationalError, sqlite3.DatabaseError, OSError) as e:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self.errors_total += 1
            self.error = str(e).splitlines()[0]
            raise StoreError(self.error) from None

    # -- reading --------------------------------------------------------------------------------------
    def query(
        self, metric: str, *, gpu: int | None = None, since: float | None = None, until: float | None = None
    ) -> list[tuple[float, int, float | None]]:
        """(ts seconds, gpu, value) rows, raw where kept, 1-minute averages before that, oldest first."""
        return [(t, g, v) for t, g, v, _ in self.query_marked(metric, gpu=gpu, since=since, until=until)]

    def query_marked(
        self, metric: str, *, gpu: int | None = None, since: float | None = None, until: float | None = None
    ) -> list[tuple[float, int, float | None, str]]:
        """Like ``query``, each row marked "1m" (a 1-minute average) or "raw" (a sample)."""
        m = METRIC_BY_NAME[metric]
        lo = int((since or 0) * 1000)
        hi = int((until if until is not None else time.time() + 86400 * 365) * 1000)
        gpus = (
            [gpu]
            if gpu is not None
            else [
                r[0]
                for r in self.conn.execute(
                    "SELECT DISTINCT gpu FROM samples UNION SELECT DISTINCT gpu FROM samples_1m ORDER BY 1"
                )
            ]
        )
        out: list[tuple[float, int, float | None, str]] = []
        for g in gpus:
            first_raw = self.conn.execute("SELECT MIN(ts) FROM samples WHERE gpu=?", (g,)).fetchone()[0]
            if first_raw is None or lo < first_raw:
                end = min(hi, first_raw) if first_raw is not None else hi
                out.extend(
                    (ts / 1000.0, g, v, "1m")
                    for ts, v in self.conn.execute(
                        f"SELECT ts, {m.column} FROM samples_1m WHERE gpu=? AND ts>=? AND ts<? ORDER BY ts",
                        (g, lo, end),
                    )
                )
            out.extend(
                (ts / 1000.0, g, v, "raw")
                for ts, v in self.conn.execute(
                    f"SELECT ts, {m.column} FROM samples WHERE gpu=? AND ts>=? AND ts<=? ORDER BY ts",
                    (g, lo, hi),
                )
            )
        if gpu is None:
            out.sort(key=lambda r: (r[0], r[1]))
        return out

    def gpus(self) -> list[dict[str, Any]]:
        return [
            dict(zip(("gpu", "uuid", "name", "pci_bus_id", "first_seen", "last_seen"), r, strict=False))
            for r in self.conn.execute(
                "SELECT gpu, uuid, name, pci_bus_id, first_seen, last_seen FROM gpus ORDER BY gpu"
            )
        ]

    def events(
        self, *, since: float | None = None, open_only: bool = False, limit: int = 1000
    ) -> list[Event]:
        q = (
            "SELECT id, key, code, severity, gpu, uuid, title, evidence, remedy, data, opened, resolved, "
            "last_seen, "
            "count FROM events WHERE (resolved IS NULL OR resolved >= ? OR opened >= ?)"
        )
        args: list[Any] = [since or 0, since or 0]
        if open_only:
            q += " AND resolved IS NULL"
        q += " ORDER BY opened DESC, id DESC LIMIT ?"
        args.append(limit)
        out = []
        for r in self.conn.execute(q, args):
            out.append(
                Event(
                    id=r[0],
                    key=r[1],
                    code=r[2],
                    severity=Severity[r[3].upper()],
                    gpu=r[4],
                    uuid=r[5],
                    title=r[6] or "",
                    evidence=json.loads(r[7] or "[]"),
                    remedy=r[8] or "",
                    data=json.loads(r[9] or "{}"),
                    opened=r[10],
                    resolved=r[11],
                    last_seen=r[12] or r[10],
                    count=r[13] or 1,
                )
            )
        return out

    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:
            pass
