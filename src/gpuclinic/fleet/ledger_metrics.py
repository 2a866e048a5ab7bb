"""The run ledger on the agent's /metrics, so a fleet view can show interruptions and goodput per node.

``gpuclinic run`` writes runs and interruptions into the same SQLite store the agent uses; this
collector reads the ledger's report over the last ``ledger_window`` (7 days) at most every 30 s and
exports it as gauges.  It never creates tables: an agent whose store has no ledger exports nothing.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuclinic.knowledge import load_data

_CACHE_S = 30.0


class LedgerCollector(Collector):
    def __init__(self, db_path: str | Path | None) -> None:
        self.db_path = db_path
        self._lock = threading.Lock()
        self._at = 0.0
        self._rep: dict[str, Any] | None = None

    def _report(self) -> dict[str, Any] | None:
        from gpuclinic.supervise import ledger
        from gpuclinic.watch.config import parse_duration

        if self.db_path is None or not Path(self.db_path).exists():
            return None
        window = parse_duration(load_data("cluster.json")["fleet"]["ledger_window"], what="ledger_window")
        now = time.time()
        try:
            conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=2.0)
            try:
                have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if not {"runs", "interruptions"} <= have:
                    return None
                return ledger.interruption_report(conn, since=now - window, now=now, recent=0)
            finally:
                conn.close()
        except sqlite3.Error:
            return None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._at > _CACHE_S:
                self._rep = self._report()
                self._at = time.monotonic()
            rep = self._rep
        if rep is None:
            return
        w = load_data("cluster.json")["fleet"]["ledger_window"]
        fam = GaugeMetricFamily(
            "gpuclinic_run_interruptions",
            f"Job interruptions in the last {w}, by root cause",
            labels=["class", "planned"],
        )
        for c in rep["causes"]:
            fam.add_metric([c["cls"], "true" if c["planned"] else "false"], c["count"])
        yield fam
        yield GaugeMetricFamily(
            "gpuclinic_run_wall_seconds", f"Wall time of supervised runs in the last {w}", value=rep["wall_s"]
        )
        yield GaugeMetricFamily(
            "gpuclinic_run_lost_seconds", f"Time lost to interruptions in the last {w}", value=rep["lost_s"]
        )
        if rep["goodput_pct"] is not None:
            yield GaugeMetricFamily(
                "gpuclinic_run_goodput_ratio",
                f"(wall - lost) / wall over the last {w}",
                value=rep["goodput_pct"] / 100.0,
            )
