"""Prometheus exposition of the agent's latest state (prometheus-client, custom collector).

Names follow Prometheus conventions: one ``gpuclinic_`` prefix, base units (celsius, watts, bytes,
hertz, ratio 0-1), ``_total`` for counters, identity on ``gpuclinic_gpu_info`` and ``uuid`` as the
join key on every GPU series.  XIDs are counters per code with a last-seen timestamp (not a "last
value" gauge, which loses repeats and never resets).  Scrapes read memory only: sampling happens in
the agent's loop, so a hung driver can never hang a scrape; ``gpuclinic_watch_sample_age_seconds``
tells Prometheus how stale the numbers are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.watch import reasons as R

if TYPE_CHECKING:
    from gpuclinic.watch.agent import Agent
    from gpuclinic.watch.status import StatusSnapshot

_L = ["uuid", "index"]


# (name, help, value getter, scale to base units): one plain gauge per GPU each
_GAUGES: list[tuple[str, str, Callable[[GpuFacts], float | None], float]] = [
    ("gpuclinic_gpu_temperature_celsius", "GPU core temperature", lambda x: x.temperature_c, 1.0),
    (
        "gpuclinic_gpu_memory_temperature_celsius",
        "GPU memory (HBM) temperature",
        lambda x: x.memory_temperature_c,
        1.0,
    ),
    (
        "gpuclinic_gpu_slowdown_temperature_celsius",
        "Temperature at which hardware slowdown begins",
        lambda x: x.slowdown_temp_c,
        1.0,
    ),
    (
        "gpuclinic_gpu_shutdown_temperature_celsius",
        "Temperature at which the GPU shuts down",
        lambda x: x.shutdown_temp_c,
        1.0,
    ),
    ("gpuclinic_gpu_power_watts", "Power draw", lambda x: x.power_draw_w, 1.0),
    (
        "gpuclinic_gpu_power_limit_watts",
        "Enforced power limit",
        lambda x: x.power_enforced_limit_w if x.power_enforced_limit_w is not None else x.power_limit_w,
        1.0,
    ),
    (
        "gpuclinic_gpu_power_default_limit_watts",
        "Default power limit",
        lambda x: x.power_default_limit_w,
        1.0,
    ),
    ("gpuclinic_gpu_sm_clock_hertz", "SM clock", lambda x: x.sm_clock_mhz, 1e6),
    ("gpuclinic_gpu_sm_clock_max_hertz", "Maximum SM clock", lambda x: x.sm_clock_max_mhz, 1e6),
    ("gpuclinic_gpu_memory_clock_hertz", "Memory clock", lambda x: x.mem_clock_mhz, 1e6),
    (
        "gpuclinic_gpu_utilization_ratio",
        "Fraction of time a kernel was running (0-1)",
        lambda x: x.utilization_gpu_pct,
        0.01,
    ),
    (
        "gpuclinic_gpu_memory_utilization_ratio",
        "Fraction of time memory was read or written (0-1)",
        lambda x: x.utilization_memory_pct,
        0.01,
    ),
    ("gpuclinic_gpu_memory_used_bytes", "Framebuffer memory used", lambda x: x.memory_used_bytes, 1.0),
    ("gpuclinic_gpu_memory_total_bytes", "Framebuffer memory total", lambda x: x.memory_total_bytes, 1.0),
    ("gpuclinic_gpu_fan_ratio", "Fan speed as a fraction of maximum (0-1)", lambda x: x.fan_percent, 0.01),
    ("gpuclinic_gpu_processes", "Compute processes on the GPU", lambda x: len(x.processes), 1.0),
    (
        "gpuclinic_gpu_remapped_rows_pending",
        "1 when a row remap waits for a GPU reset",
        lambda x: None if x.remapped_rows_pending is None else int(x.remapped_rows_pending),
        1.0,
    ),
    (
        "gpuclinic_gpu_remapped_rows_failure",
        "1 when row remapping failed",
        lambda x: None if x.remapped_rows_failure is None else int(x.remapped_rows_failure),
        1.0,
    ),
]


_G, _C = GaugeMetricFamily, CounterMetricFamily
_Family = type[GaugeMetricFamily | CounterMetricFamily]
# The agent's own health, one unlabelled series each: (family, name, help, value from the status).
_AGENT: list[tuple[_Family, str, str, Callable[[StatusSnapshot], float]]] = [
    (_G, "gpuclinic_node_verdict",
     "Node verdict from open incidents: 0 healthy, 1 warning, 2 drain", lambda s: s.verdict_code),
    (_G, "gpuclinic_gpus", "GPUs visible in the latest sample (lost ones included)", lambda s: s.gpu_count),
    (_G, "gpuclinic_gpus_expected",
     "GPUs the node should have (most seen, or --expect-gpus)", lambda s: s.gpus_expected),
    (_G, "gpuclinic_watch_last_sample_timestamp_seconds",
     "When the last successful sample was taken (Unix time)", lambda s: s.last_ok or 0),
    (_G, "gpuclinic_watch_sample_age_seconds",
     "Seconds since the last successful sample (staleness)", lambda s: s.sample_age),
    (_G, "gpuclinic_watch_sample_duration_seconds",
     "How long the last sample took", lambda s: s.sample_duration),
    (_G, "gpuclinic_watch_sampler_stalled",
     "1 while sampling is stalled (hung driver)", lambda s: 1 if s.stalled else 0),
    (_C, "gpuclinic_watch_samples", "Successful samples", lambda s: s.samples_total),
    (_C, "gpuclinic_watch_sample_errors", "Failed or timed-out samples", lambda s: s.sample_errors_total),
    (_G, "gpuclinic_watch_store_ok",
     "0 while the store cannot write (e.g. disk full)", lambda s: 0 if s.store_error else 1),
    (_C, "gpuclinic_watch_store_errors", "Failed store writes", lambda s: s.store_errors_total),
    (_G, "gpuclinic_watch_store_buffered_samples",
     "Samples waiting in memory for the store", lambda s: s.store_buffered),
    (_C, "gpuclinic_watch_notifications_sent", "Alert messages delivered", lambda s: s.notify_sent),
    (_C, "gpuclinic_watch_notification_failures", "Alert deliveries that failed", lambda s: s.notify_failed),
    (_G, "gpuclinic_watch_notifications_spooled",
     "Alerts waiting in the spool for delivery", lambda s: s.notify_spooled),
    (_G, "gpuclinic_health_verdict", "Node verdict: 0 healthy, 1 warning, 2 drain", lambda s: s.verdict_code),
]


class _Families:
    """Metric families created on first use, so a family with no sample this scrape is not exported."""

    def __init__(self) -> None:
        self.gauges: dict[str, GaugeMetricFamily] = {}
        self.counters: dict[str, CounterMetricFamily] = {}

    def g(self, name: str, help_: str, labels: list[str] | None = None) -> GaugeMetricFamily:
        if name not in self.gauges:
            self.gauges[name] = GaugeMetricFamily(name, help_, labels=labels or _L)
        return self.gauges[name]

    def c(self, name: str, help_: str, labels: list[str]) -> CounterMetricFamily:
        if name not in self.counters:
            self.counters[name] = CounterMetricFamily(name, help_, labels=labels)
        return self.counters[name]


def _gpu_gauges(f: _Families, x: GpuFacts, labels: list[str]) -> None:
    for name, help_, get, scale in _GAUGES:
        v = get(x)
        if v is not None:
            f.g(name, help_).add_metric(labels, float(v) * scale)
    act = set(R.active(x.clock_event_reasons_mask, x.clock_event_reasons))
    if x.clock_event_reasons_mask is not None or x.clock_event_reasons:
        fam = f.g(
            "gpuclinic_gpu_clock_event_active",
            "1 while an NVML clock event (throttle) reason is active",
            [*_L, "reason"],
        )
        for _, rname, _d in R.REASONS:
            fam.add_metric([*labels, rname], 1 if rname in act else 0)
    for which, v in (("current", x.pcie_gen), ("max", x.pcie_gen_max)):
        if v is not None:
            f.g("gpuclinic_gpu_pcie_link_generation", "PCIe link generation", [*_L, "which"]).add_metric(
                [*labels, which], v
            )
    for which, v in (("current", x.pcie_width), ("max", x.pcie_width_max)):
        if v is not None:
            f.g("gpuclinic_gpu_pcie_link_width_lanes", "PCIe link width", [*_L, "which"]).add_metric(
                [*labels, which], v
            )


def _gpu_counters(f: _Families, x: GpuFacts, labels: list[str]) -> None:
    if x.pcie_replay_count is not None:
        f.c("gpuclinic_gpu_pcie_replay_errors", "PCIe replay counter", _L).add_metric(
            labels, x.pcie_replay_count
        )
    for typ, vol, agg in (
        ("corrected", x.ecc_volatile_corrected, x.ecc_aggregate_corrected),
        ("uncorrected", x.ecc_volatile_uncorrected, x.ecc_aggregate_uncorrected),
    ):
        for scope, v in (("volatile", vol), ("aggregate", agg)):
            if v is not None:
                f.c(
                    "gpuclinic_gpu_ecc_errors",
                    "ECC errors (volatile: since driver load; aggregate: lifetime)",
                    [*_L, "type", "scope"],
                ).add_metric([*labels, typ, scope], v)
    for cause, v in (
        ("correctable", x.remapped_rows_correctable),
        ("uncorrectable", x.remapped_rows_uncorrectable),
    ):
        if v is not None:
            f.c(
                "gpuclinic_gpu_remapped_rows",
                "Rows remapped, by the kind of error that caused it",
                [*_L, "cause"],
            ).add_metric([*labels, cause], v)
    for pol, ns in x.violation_ns.items():
        f.c(
            "gpuclinic_gpu_clock_event_duration_seconds",
            "Cumulative time clocks were held down, by policy",
            [*_L, "reason"],
        ).add_metric([*labels, pol], ns / 1e9)


class AgentCollector(Collector):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        st = a.status_snapshot()
        info = GaugeMetricFamily(
            "gpuclinic_gpu_info",
            "GPU identity (value is always 1)",
            labels=["uuid", "index", "name", "pci_bus_id", "driver_version"],
        )
        f = _Families()
        for x in st.gpus:
            uuid = a.uuid_of(x)
            labels = [uuid, str(x.index)]
            info.add_metric(
                [uuid, str(x.index), x.name or "", x.pci_bus_id or "", st.driver_version or ""], 1
            )
            f.g("gpuclinic_gpu_lost", "1 when NVML reports the GPU as lost").add_metric(
                labels, 1 if x.lost else 0
            )
            if x.lost:
                continue
            _gpu_gauges(f, x, labels)
            _gpu_counters(f, x, labels)
        yield info
        xc = CounterMetricFamily(
            "gpuclinic_gpu_xid_errors",
            "XID errors seen in the kernel log, by code",
            labels=["uuid", "pci_bus_id", "xid"],
        )
        xl = GaugeMetricFamily(
            "gpuclinic_gpu_xid_last_seen_timestamp_seconds",
            "When each XID code was last seen (Unix time)",
            labels=["uuid", "pci_bus_id", "xid"],
        )
        for (uuid, bus, xid), (count, last) in sorted(st.xids.items()):
            xc.add_metric([uuid, bus, str(xid)], count)
            xl.add_metric([uuid, bus, str(xid)], last)
        yield from f.gauges.values()
        yield from f.counters.values()
        yield xc
        yield xl
        oe = GaugeMetricFamily(
            "gpuclinic_event_open",
            "1 for each open gpuclinic event (agent rules and doctor)",
            labels=["code", "severity", "uuid", "index"],
        )
        for ev in st.open_events:
            oe.add_metric(
                [ev.code, ev.severity.label, ev.uuid or "", "" if ev.gpu is None else str(ev.gpu)], 1
            )
        yield oe
        oi = GaugeMetricFamily(
            "gpuclinic_incident_open",
            "1 for each open incident (a root cause and its symptoms)",
            labels=["code", "severity", "family", "gpu"],
        )
        for t in self.agent.incidents.open_incidents():
            inc = t.incident
            gi = "" if inc.gpu is None or inc.gpu.index is None else str(inc.gpu.index)
            oi.add_metric([inc.code, inc.severity.label, inc.family.value, gi], 1)
        yield oi
        for kind, name, help_, value in _AGENT:
            yield kind(name, help_, value=value(st))

def make_registry(agent: Agent) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(AgentCollector(agent))
    from gpuclinic.fleet.ledger_metrics import LedgerCollector  # run ledger figures for `gpuclinic fleet`

    reg.register(LedgerCollector(getattr(agent.store, "path", None)))
    from gpuclinic.fleet.idle import IdleCollector

    reg.register(IdleCollector(getattr(agent, "idle", None)))
    if getattr(agent, "room_poller", None) is not None:  # the BMC (sources/bmc/poller.py)
        from gpuclinic.sources.bmc.poller import RoomCollector

        reg.register(RoomCollector(agent.room_poller))
    return reg
