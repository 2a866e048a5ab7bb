"""The fleet from a Prometheus that scrapes the agents: a dozen instant queries, run in parallel.

Each query aggregates ``by (instance, node)`` so the answer is one series per node whatever the
fleet size; the node is the ``node`` label when the scrape config sets one, else ``instance``.
Incidents come from ``gpuclinic_incident_open`` (agents with the incident model) or, on agents
without it, from their open critical/warning events.  A target whose scrape fails is
"unreachable" with Prometheus' own error; a target without gpuclinic metrics is "unknown".
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from gpuclinic.errors import GpuclinicError
from gpuclinic.fleet.model import Fleet, FleetIncident, NodeView, verdict_name
from gpuclinic.knowledge import load_data

BY = "instance, node"


@dataclass
class PromAuth:
    basic: tuple[str, str] | None = None
    bearer: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.bearer}"} if self.bearer else {}


def _dur(seconds: float) -> str:
    return f"{int(max(1, round(seconds)))}s"


def _grown(series: str, w: str) -> str:
    """How much a counter grew over the window, per node, reading two samples per series.

    ``increase()`` reads every sample in the window: at 1,000 nodes x 8 GPUs, 24 h and a 15 s scrape
    that is ~46 M samples per counter, seconds of work.  The difference to the value one window ago
    reads two.  A counter that reset inside the window (driver reload, agent restart) counts from
    its reset (a lower bound); one that did not exist a window ago counts from its start.
    """
    return f"sum by ({BY}) (({series} - {series} offset {w} >= 0) or {series})"


def idle_fallback(job: str, window_s: float, instances: list[str]) -> str:
    """Idle GPU-hours for agents without the idle counter: utilisation sampled at 60 points in the window."""
    line = float(load_data("cluster.json")["fleet"]["idle_util_ratio"])
    step_s = max(1, round(window_s / 60))
    sel = f'job="{job}",instance=~"{"|".join(_re(i) for i in instances)}"'
    return (f"sum by ({BY}) (sum_over_time((gpuclinic_gpu_utilization_ratio{{{sel}}} < bool {line:g})"
            f"[{_dur(window_s)}:{_dur(step_s)}])) * {step_s} / 3600")


def _re(value: str) -> str:
    """A label value as an RE2 literal inside a double-quoted PromQL string."""
    regex = "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in value)
    return regex.replace("\\", "\\\\").replace('"', '\\"')


def queries(job: str, window_s: float) -> dict[str, str]:
    """PromQL for every figure, keyed by name (public so the docs and tests can show them)."""
    f = load_data("cluster.json")["fleet"]
    j = f'job="{job}"'
    w = _dur(window_s)
    age_step = _dur(max(1.0, window_s / 720))  # incident age: finer, there are few incident series
    incidents = (
        f"max by ({BY}, code, severity, family, gpu) (gpuclinic_incident_open{{{j}}} == 1)"
        f' or max by ({BY}, code, severity, gpu) '
        f'(label_replace(gpuclinic_event_open{{{j},severity=~"critical|warning"}}'
        f' == 1, "gpu", "$1", "index", "(.*)")) unless on (instance) gpuclinic_node_verdict{{{j}}}'
    )
    throttle = "|".join(f["throttle_reasons"])
    return {
        "up": f"up{{{j}}}",
        "verdict": f"max by ({BY}) (gpuclinic_node_verdict{{{j}}}) or max by ({BY}) "
                   f"(gpuclinic_health_verdict{{{j}}})",
        "incidents": incidents,
        "incident_age": f"time() - min_over_time(timestamp({incidents})[{w}:{age_step}])",
        "gpus": f"max by ({BY}) (gpuclinic_gpus{{{j}}})",
        "gpus_lost": f"sum by ({BY}) (gpuclinic_gpu_lost{{{j}}})",
        "gpus_expected": f"max by ({BY}) (gpuclinic_gpus_expected{{{j}}})",
        "ecc_corrected": _grown(
            f'gpuclinic_gpu_ecc_errors_total{{{j},type="corrected",scope="volatile"}}', w
        ),
        "remapped_rows": _grown(f"gpuclinic_gpu_remapped_rows_total{{{j}}}", w),
        "pcie_replays": _grown(f"gpuclinic_gpu_pcie_replay_errors_total{{{j}}}", w),
        "throttle_s": _grown(
            f'gpuclinic_gpu_clock_event_duration_seconds_total{{{j},reason=~"{throttle}"}}', w
        ),
        "xids_per_day": f"{_grown(f'gpuclinic_gpu_xid_errors_total{{{j}}}', w)} * 86400 / {window_s:g}",
        "idle_gpu_hours": f"{_grown(f'gpuclinic_gpu_idle_seconds_total{{{j}}}', w)} / 3600",
        "interruptions": f"sum by ({BY}) (gpuclinic_run_interruptions{{{j}}})",
        "goodput": f"max by ({BY}) (gpuclinic_run_goodput_ratio{{{j}}})",
        # the server room, from the agent's BMC poller (`watch --bmc/--redfish`)
        "bmc_up": f"max by ({BY}) (gpuclinic_room_bmc_up{{{j}}})",
        "inlet_c": f"max by ({BY}) (gpuclinic_room_inlet_temperature_celsius{{{j}}})",
        "fans_failed": f"count by ({BY}) (gpuclinic_room_fan_ok{{{j}}} == 0)",
        "psus_failed": (
            f"count by ({BY}) (gpuclinic_room_psu_ok{{{j}}} == 0 and on (instance, psu) "
            f"gpuclinic_room_psu_present{{{j}}} == 1)"
        ),
    }


class Prometheus:
    def __init__(self, url: str, auth: PromAuth | None = None, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.auth = auth or PromAuth()
        self.client = httpx.Client(
            base_url=self.url,
            timeout=timeout_s,
            headers=self.auth.headers(),
            auth=self.auth.basic,
            trust_env=False,
        )

    def close(self) -> None:
        self.client.close()

    def _get(self, path: str, params: dict[str, str]) -> Any:
        try:
            r = self.client.get(path, params=params)
        except httpx.HTTPError as e:
            raise GpuclinicError(f"cannot reach Prometheus at {self.url}: {type(e).__name__}: {e}") from None
        if r.status_code in (401, 403):
            raise GpuclinicError(f"Prometheus at {self.url} refused the credentials (HTTP {r.status_code})")
        try:
            body = r.json()
        except ValueError:
            raise GpuclinicError(
                f"Prometheus at {self.url}: HTTP {r.status_code}, not a Prometheus API answer"
            ) from None
        if body.get("status") != "success":
            raise GpuclinicError(f"Prometheus query failed: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, q: str, at: float) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", {"query": q, "time": f"{at:.3f}"})
        return list(data.get("result") or [])

    def target_errors(self) -> dict[str, str]:
        data = self._get("/api/v1/targets", {"state": "active"})
        return {
            t["labels"].get("instance", ""): t.get("lastError") or "scrape failed"
            for t in data.get("activeTargets") or []
            if t.get("health") == "down"
        }


def _key(labels: dict[str, str]) -> str:
    return labels.get("instance", "")


Rows = dict[str, list[dict[str, Any]]]


def _val(r: dict[str, Any]) -> float:
    return float(r["value"][1])


class _Nodes(dict[str, NodeView]):
    """Node views by scrape address, created on first mention."""

    def of(self, labels: dict[str, str]) -> NodeView:
        k = _key(labels)
        if k not in self:
            self[k] = NodeView(node=labels.get("node") or k, address=k)
        return self[k]


def _query_all(prom: Prometheus, qs: dict[str, str], at: float) -> tuple[Rows, dict[str, str]]:
    """All fleet queries in parallel, and the scrape errors of the targets that are down."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        futs = {name: pool.submit(prom.query, q, at) for name, q in qs.items()}
        errs = pool.submit(prom.target_errors)
        # NaN/Inf (a 0/0 somewhere upstream) is no figure at all
        res = {
            name: [r for r in f.result() if math.isfinite(float(r["value"][1]))] for name, f in futs.items()
        }
        return res, errs.result()


def _apply_state(nodes: _Nodes, res: Rows, down: dict[str, str], job: str) -> None:
    """Reachability, verdict and open incidents per node."""
    for r in res["up"]:
        n = nodes.of(r["metric"])
        if _val(r) < 1:
            n.verdict = "unreachable"
            n.error = down.get(_key(r["metric"]), "scrape failed")
    if not nodes:
        raise GpuclinicError(
            f'Prometheus has no targets with job="{job}" (see docs/fleet.md for the scrape config)'
        )
    for r in res["verdict"]:
        n = nodes.of(r["metric"])
        if n.verdict != "unreachable":
            n.verdict = verdict_name(_val(r))
    ages = {tuple(sorted(r["metric"].items())): _val(r) for r in res["incident_age"]}
    for r in res["incidents"]:
        m = r["metric"]
        n = nodes.of(m)
        if n.verdict == "unreachable":
            continue
        gpu = m.get("gpu") or None
        if any(i.code == m.get("code") and i.gpu == gpu for i in n.incidents):
            continue
        n.incidents.append(
            FleetIncident(
                code=m.get("code", "?"),
                severity=m.get("severity", "?"),
                gpu=gpu,
                family=m.get("family"),
                # absent from the age subquery: it appeared after its last step
                age_s=ages.get(tuple(sorted(m.items())), 0.0),
            )
        )


def _apply_counts(nodes: _Nodes, res: Rows) -> None:
    """GPU counts and error trends per node."""
    lost = {_key(r["metric"]): _val(r) for r in res["gpus_lost"]}
    for r in res["gpus"]:
        n = nodes.of(r["metric"])
        n.gpus_seen = int(_val(r) - lost.get(_key(r["metric"]), 0))
    for r in res["gpus_expected"]:
        nodes.of(r["metric"]).gpus_expected = int(_val(r))
    for name in ("ecc_corrected", "remapped_rows", "pcie_replays", "throttle_s", "xids_per_day"):
        for r in res[name]:
            setattr(nodes.of(r["metric"]).trends, name, _val(r))


def _apply_idle(prom: Prometheus, nodes: _Nodes, res: Rows, job: str, window_s: float, at: float,
                price: float | None) -> None:
    """Idle GPU hours (and their cost) per node, from the agent's counter or, for old agents, utilisation."""
    idle = list(res["idle_gpu_hours"])
    have = {_key(r["metric"]) for r in idle}
    legacy = sorted(k for k, n in nodes.items() if n.verdict != "unreachable" and k not in have)
    if legacy:  # agents from before the idle counter: sample their utilisation instead (costlier)
        idle += prom.query(idle_fallback(job, window_s, legacy), at)
    for r in idle:
        n = nodes.of(r["metric"])
        n.idle_gpu_hours = _val(r)
        if price is not None:
            n.idle_cost = n.idle_gpu_hours * price


def _apply_room(nodes: _Nodes, res: Rows) -> None:
    """Run interruptions and goodput, then the BMC's room summary, per node."""
    for r in res["interruptions"]:
        nodes.of(r["metric"]).interruptions = int(_val(r))
    for r in res["goodput"]:
        nodes.of(r["metric"]).goodput = _val(r)
    for r in res["bmc_up"]:
        nodes.of(r["metric"]).room = {"bmc_up": _val(r) >= 1, "inlet_c": None, "fans_failed": 0,
                                      "psus_failed": 0}
    for name in ("inlet_c", "fans_failed", "psus_failed"):
        for r in res[name]:
            n = nodes.of(r["metric"])
            if n.room is not None:
                n.room[name] = round(_val(r), 1) if name == "inlet_c" else int(_val(r))


def collect(
    prom: Prometheus, *, job: str, window_s: float, price: float | None = None, now: float | None = None
) -> Fleet:
    t0 = time.monotonic()
    at = time.time() if now is None else now
    res, down = _query_all(prom, queries(job, window_s), at)
    nodes = _Nodes()
    _apply_state(nodes, res, down, job)
    _apply_counts(nodes, res)
    _apply_idle(prom, nodes, res, job, window_s, at, price)
    _apply_room(nodes, res)
    for n in nodes.values():
        if n.verdict == "unknown" and not n.error:
            n.error = "no gpuclinic verdict metric from this target"
        if n.verdict == "unreachable":  # series may linger a scrape or two after the target died: not current
            n.gpus_seen = n.gpus_expected = None
    return Fleet(
        source=f"prometheus {prom.url}",
        window_s=window_s,
        nodes=list(nodes.values()),
        generated_at=at,
        price_per_gpu_hour=price,
        took_s=time.monotonic() - t0,
    )
