"""The store: samples round-trip, rollups, retention, events, and a full disk losing nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, cast

import pytest

from gpuclinic.facts.gpu import GpuFacts, GpuProcess
from gpuclinic.model import Severity
from gpuclinic.watch.events import Event
from gpuclinic.watch.store import METRICS, StoreError, WatchStore

T0 = 1_780_000_020.0  # on a minute boundary


def gpu(i: int, temp: float, **kw: Any) -> GpuFacts:
    return GpuFacts(
        index=i,
        uuid=f"GPU-{i}",
        temperature_c=temp,
        utilization_gpu_pct=50.0,
        power_draw_w=300.0,
        clock_event_reasons=["hw_thermal_slowdown"] if temp > 85 else [],
        processes=[GpuProcess(pid=1)],
        **kw,
    )


def test_samples_round_trip_and_query_by_gpu_and_time(tmp_path: Path) -> None:
    st = WatchStore(tmp_path / "w.db")
    for k in range(120):
        st.add_samples(T0 + k, [gpu(0, 60 + k % 30), gpu(1, 40.0)])
    assert st.flush() == 240
    assert [(g["gpu"], g["uuid"]) for g in st.gpus()] == [(0, "GPU-0"), (1, "GPU-1")]
    rows = st.query("temperature", gpu=0, since=T0 + 10, until=T0 + 19)
    assert [r[2] for r in rows] == [60.0 + k for k in range(10, 20)]
    assert all(r[1] == 0 for r in rows)
    both = st.query("temperature", since=T0, until=T0 + 1)
    assert [(r[1], r[2]) for r in both] == [(0, 60.0), (1, 40.0), (0, 61.0), (1, 40.0)]
    reasons = st.query("throttle_reasons", gpu=0, since=T0 + 26, until=T0 + 26)
    assert reasons[0][2] == 0x40
    assert st.query("processes", gpu=1, since=T0, until=T0)[0][2] == 1


def test_lost_gpus_store_no_sample(tmp_path: Path) -> None:
    st = WatchStore(tmp_path / "w.db")
    st.add_samples(T0, [gpu(0, 50), GpuFacts(index=1, lost=True)])
    assert st.flush() == 1


def test_rollup_then_retention_keeps_minute_averages(tmp_path: Path) -> None:
    st = WatchStore(tmp_path / "w.db", raw_retention_s=120, rollup_retention_s=3600)
    start = T0
    for k in range(300):  # five minutes
        st.add_samples(start + k, [gpu(0, 50 + (k // 60) * 10)])
    st.flush()
    st.maintain(start + 300)
    # raw older than 120 s is gone; the first minutes come back as 1-minute averages
    rows = st.query("temperature", gpu=0, since=start)
    minutes = [r for r in rows if r[0] < start + 180]
    assert [r[2] for r in minutes] == [50.0, 60.0, 70.0]
    assert [r[0] for r in minutes] == [start, start + 60, start + 120]
    raw = [r for r in rows if r[0] >= start + 180]
    assert len(raw) == 120 and raw[0][2] == 80.0
    # reasons OR over the minute; retention of rollups
    st.maintain(start + 300 + 7200)
    assert st.query("temperature", gpu=0, since=start, until=start + 299) == []


def test_events_round_trip_update_and_since(tmp_path: Path) -> None:
    st = WatchStore(tmp_path / "w.db")
    ev = Event(
        key="rules:watch.idle:GPU-3",
        code="watch.idle",
        severity=Severity.WARNING,
        title="idle",
        opened=T0,
        gpu=3,
        evidence=["no process"],
        remedy="release it",
        last_seen=T0,
    )
    st.put_event(ev)
    st.flush()
    assert ev.id is not None
    ev.resolved = T0 + 100
    st.put_event(ev)
    st.flush()
    got = st.events()
    assert len(got) == 1 and got[0].resolved == T0 + 100 and got[0].evidence == ["no process"]
    assert got[0].remedy == "release it" and got[0].severity == Severity.WARNING
    assert st.events(since=T0 + 200) == []
    assert st.events(open_only=True) == []


class _FullDisk:
    """Wraps a connection: INSERTs fail like SQLite on a full disk until ``full`` is cleared."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.full = True

    def execute(self, sql: str, *a: Any) -> object:
        if self.full and sql.startswith(("INSERT", "UPDATE")):
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.execute(sql, *a)

    def executemany(self, sql: str, rows: object) -> object:
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.executemany(sql, rows)  # type: ignore[arg-type]

    def __getattr__(self, k: str) -> object:
        return getattr(self.conn, k)


def test_disk_full_keeps_rows_in_memory_and_writes_them_later(tmp_path: Path) -> None:
    st = WatchStore(tmp_path / "w.db")
    fake = _FullDisk(st.conn)
    st.conn = fake  # type: ignore[assignment]
    for k in range(5):
        st.add_samples(T0 + k, [gpu(0, 50.0)])
        with pytest.raises(StoreError, match="disk is full"):
            st.flush()
    assert st.buffered == 5 and st.error == "database or disk is full" and st.errors_total == 5
    fake.full = False
    assert st.flush() == 5
    assert cast("str | None", st.error) is None and st.buffered == 0  # flush() reset what mypy narrowed
    assert len(st.query("temperature", gpu=0, since=T0)) == 5
    assert st.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_every_metric_is_queryable(tmp_path: Path) -> None:
    st = WatchStore(tmp_path / "w.db")
    st.add_samples(T0, [gpu(0, 50.0)])
    st.flush()
    for m in METRICS:
        assert len(st.query(m.name, gpu=0, since=T0 - 1)) == 1
