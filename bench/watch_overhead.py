"""Overhead of `gpuclinic watch`: CPU and RSS of the agent with 8 simulated GPUs at 1 Hz, store size per
GPU-day, and the time to query 24 h of one metric.

    python bench/watch_overhead.py --duration 300

Targets (issue 5): <= 0.5 % of one core, <= 60 MB RSS.  The agent runs as it would in production
(store on, dashboard/metrics server on, doctor every 5 min, Prometheus-like scrape of /metrics every
15 s); only the GPU reads are simulated (scenario steady8), so NVML's own cost is not included.
For the store, the same 24 h of data is also written in a "long" layout (one row per metric value,
ts/gpu/metric/value, the usual SQLite time-series shape) and measured in the same run as the baseline.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from gpuclinic.facts.gpu import GpuFacts, GpuProcess
from gpuclinic.watch.store import METRICS, WatchStore, sample_row


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_overhead(duration: float, warmup: float, tmp: Path) -> dict[str, float]:
    port = _free_port()
    db = tmp / "agent.db"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "watch",
            "--scenario",
            "steady8",
            "--interval",
            "1",
            "--db",
            str(db),
            "--listen",
            f"127.0.0.1:{port}",
            "--quiet",
            "--doctor-interval",
            "5m",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    p = psutil.Process(proc.pid)
    time.sleep(warmup)
    c0 = p.cpu_times()
    t0 = time.monotonic()
    rss_max = 0
    next_scrape = 0.0
    scrapes = 0
    with httpx.Client(trust_env=False, timeout=5) as client:
        while time.monotonic() - t0 < duration:
            if proc.poll() is not None:
                raise SystemExit(f"agent exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            rss_max = max(rss_max, p.memory_info().rss)
            if time.monotonic() >= next_scrape:
                client.get(f"http://127.0.0.1:{port}/metrics").raise_for_status()
                scrapes += 1
                next_scrape = time.monotonic() + 15
            time.sleep(1.0)
    c1 = p.cpu_times()
    wall = time.monotonic() - t0
    rss_end = p.memory_info().rss
    proc.terminate()
    proc.wait(timeout=15)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = c.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        pages = c.execute("PRAGMA page_count").fetchone()[0] * c.execute("PRAGMA page_size").fetchone()[0]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_pct_of_core": 100 * cpu / wall,
        "rss_max_mb": rss_max / 2**20,
        "rss_end_mb": rss_end / 2**20,
        "scrapes": scrapes,
        "rows": rows,
        "db_bytes": pages,
    }


def _gpu(i: int, k: int) -> GpuFacts:
    r = random.Random(k * 8 + i)
    return GpuFacts(
        index=i,
        uuid=f"GPU-{i}",
        temperature_c=60 + r.random() * 20,
        memory_temperature_c=70.0,
        slowdown_temp_c=87.0,
        power_draw_w=550 + r.random() * 100,
        power_limit_w=700.0,
        power_enforced_limit_w=700.0,
        sm_clock_mhz=1980.0 - (r.random() < 0.01) * 400,
        mem_clock_mhz=2619.0,
        utilization_gpu_pct=float(r.randint(90, 100)),
        utilization_memory_pct=50.0,
        memory_used_bytes=71 * 2**30,
        memory_total_bytes=80 * 2**30,
        fan_percent=None,
        clock_event_reasons_mask=0,
        ecc_volatile_corrected=0,
        ecc_volatile_uncorrected=0,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        pcie_gen=5,
        pcie_width=16,
        pcie_replay_count=0,
        processes=[GpuProcess(pid=1000)],
    )


def store_bench(tmp: Path, gpus: int, hours: float) -> dict[str, float]:
    now = time.time()
    start = now - hours * 3600
    db = tmp / "day.db"
    st = WatchStore(db, raw_retention_s=10 * 86400)
    long_db = sqlite3.connect(tmp / "long.db", isolation_level=None)
    long_db.execute("PRAGMA journal_mode=WAL")
    long_db.execute("CREATE TABLE m (ts INTEGER, gpu INTEGER, metric INTEGER, value REAL)")
    long_db.execute("CREATE INDEX m_idx ON m (metric, gpu, ts)")
    n = int(hours * 3600)
    t_ins = time.perf_counter()
    long_s = 0.0
    for k in range(n):
        gs = [_gpu(i, k) for i in range(gpus)]
        st.add_samples(start + k, gs)
        if k % 600 == 599 or k == n - 1:
            st.flush()
        t = time.perf_counter()
        ms = int((start + k) * 1000)
        rows = [(ms, g.index, j, v) for g in gs for j, v in enumerate(sample_row(g)) if v is not None]
        if k % 600 == 0:
            long_db.execute("BEGIN")
        long_db.executemany("INSERT INTO m VALUES (?,?,?,?)", rows)
        if k % 600 == 599 or k == n - 1:
            long_db.execute("COMMIT")
        long_s += time.perf_counter() - t
    insert_s = time.perf_counter() - t_ins - long_s
    st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    long_db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = os.path.getsize(db)
    long_size = os.path.getsize(tmp / "long.db")
    samples = n * gpus
    # query 24 h (the whole window) of one metric for one GPU, warm cache, best of 5
    q = []
    for _ in range(5):
        t = time.perf_counter()
        pts = st.query("temperature", gpu=3, since=start - 1)
        q.append(time.perf_counter() - t)
    assert len(pts) == n, (len(pts), n)
    ql = []
    col = [m.name for m in METRICS].index("temperature")
    for _ in range(5):
        t = time.perf_counter()
        got = long_db.execute(
            "SELECT ts, value FROM m WHERE metric=? AND gpu=? AND ts>=? ORDER BY ts",
            (col, 3, int((start - 1) * 1000)),
        ).fetchall()
        ql.append(time.perf_counter() - t)
    assert len(got) == n
    # the CLI end to end (process start + query + CSV out)
    t = time.perf_counter()
    since_iso = datetime.datetime.fromtimestamp(start - 1, datetime.timezone.utc).isoformat()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "history",
            "temperature",
            "--gpu",
            "3",
            "--since",
            since_iso,
            "--format",
            "csv",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    cli_s = time.perf_counter() - t
    assert r.returncode == 0 and r.stdout.count("\n") == n + 1, r.stderr
    st.close()
    long_db.close()
    return {
        "samples": samples,
        "bytes_per_sample": size / samples,
        "long_bytes_per_sample": long_size / samples,
        "gpu_day_mb": size / samples * 86400 / 2**20,
        "long_gpu_day_mb": long_size / samples * 86400 / 2**20,
        "insert_rows_per_s": samples / insert_s,
        "query_s": min(q),
        "long_query_s": min(ql),
        "cli_s": cli_s,
        "points": n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--duration", type=float, default=300.0, help="agent measurement window, seconds (>= 300)"
    )
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--hours", type=float, default=24.0, help="synthetic history for the query benchmark")
    ap.add_argument("--skip-agent", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuclinic-bench-") as d:
        tmp = Path(d)
        print(f"python {sys.version.split()[0]}, {psutil.cpu_count()} CPUs, sqlite {sqlite3.sqlite_version}")
        if not a.skip_agent:
            r = agent_overhead(a.duration, a.warmup, tmp)
            print(f"agent, 8 simulated GPUs @ 1 Hz, {r['wall_s']:.0f} s, {r['scrapes']} /metrics scrapes:")
            print(
                f"  CPU  {r['cpu_pct_of_core']:.3f} % of one core ({r['cpu_s']:.2f} s CPU)   "
                "target <= 0.5 %  "
                f"-> {r['cpu_pct_of_core'] / 0.5:.2f}x of target"
            )
            print(
                f"  RSS  max {r['rss_max_mb']:.1f} MB, end {r['rss_end_mb']:.1f} MB   target <= 60 MB  "
                f"-> {r['rss_max_mb'] / 60:.2f}x of target"
            )
            if r["rows"]:
                print(
                    f"  store {r['rows']} rows, {r['db_bytes'] / r['rows']:.1f} bytes/GPU-sample "
                    "incl. schema -> "
                    f"{r['db_bytes'] / r['rows'] * 86400 / 2**20:.1f} MB per GPU-day"
                )
        s = store_bench(tmp, 8, a.hours)
        print(
            f"store, synthetic {a.hours:g} h x 8 GPUs @ 1 Hz ({s['samples']} GPU-samples, "
            f"{s['insert_rows_per_s']:.0f} rows/s inserted in 10-min batches):"
        )
        print(
            f"  size  {s['bytes_per_sample']:.1f} B/GPU-sample = {s['gpu_day_mb']:.1f} MB per GPU-day (raw; "
            f"1-min rollups add {s['gpu_day_mb'] / 60:.2f} MB)   long layout: {s['long_gpu_day_mb']:.1f} MB "
            f"-> {s['long_gpu_day_mb'] / s['gpu_day_mb']:.1f}x larger"
        )
        print(
            f"  query {a.hours:g} h of one metric, one GPU ({s['points']} points): "
            f"{s['query_s'] * 1000:.0f} ms   "
            f"long layout: {s['long_query_s'] * 1000:.0f} ms -> {s['long_query_s'] / s['query_s']:.2f}x"
        )
        print(f"  `gpuclinic history ... --format csv` end to end: {s['cli_s']:.2f} s")


if __name__ == "__main__":
    main()
