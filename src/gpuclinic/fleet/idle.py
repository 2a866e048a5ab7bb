"""Idle GPU time as a counter on the agent, so a fleet query reads two samples per GPU, not a subquery.

The agent samples every second; this meter adds the time between two samples to a GPU's idle total
when the earlier sample was idle (utilisation below the fleet's idle line, knowledge/data/cluster.json).
Gaps longer than ``MAX_GAP_S`` (a stalled driver, a suspended agent) are not counted: unknown time is
not idle time.  Exported as ``gpuclinic_gpu_idle_seconds_total{uuid,index}``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.knowledge import load_data

MAX_GAP_S = 30.0


class IdleMeter:
    def __init__(self) -> None:
        self.line_pct = 100.0 * float(load_data("cluster.json")["fleet"]["idle_util_ratio"])
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, bool]] = {}  # uuid -> (time, was idle)
        self.idle_s: dict[str, float] = {}
        self.index: dict[str, int] = {}

    def observe(self, now: float, gpus: Iterable[GpuFacts]) -> None:
        with self._lock:
            for g in gpus:
                key = g.uuid or f"#{g.index}"
                if g.lost or g.utilization_gpu_pct is None:
                    self._last.pop(key, None)
                    continue
                prev = self._last.get(key)
                if prev is not None and prev[1] and 0 < now - prev[0] <= MAX_GAP_S:
                    self.idle_s[key] = self.idle_s.get(key, 0.0) + (now - prev[0])
                self.idle_s.setdefault(key, 0.0)
                self.index[key] = g.index
                self._last[key] = (now, g.utilization_gpu_pct < self.line_pct)

    def snapshot(self) -> list[tuple[str, int, float]]:
        with self._lock:
            return [(k, self.index.get(k, -1), v) for k, v in sorted(self.idle_s.items())]


class IdleCollector(Collector):
    def __init__(self, meter: IdleMeter | None) -> None:
        self.meter = meter

    def collect(self) -> Iterator[Metric]:
        if self.meter is None:
            return
        fam = CounterMetricFamily(
            "gpuclinic_gpu_idle_seconds",
            "Time the GPU spent below the idle line (5 % utilisation)",
            labels=["uuid", "index"],
        )
        for uuid, index, v in self.meter.snapshot():
            fam.add_metric([uuid, str(index)], v)
        yield fam
