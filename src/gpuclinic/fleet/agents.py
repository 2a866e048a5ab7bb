"""The fleet from the agents themselves: each ``gpuclinic watch`` answers /metrics and its JSON API.

No Prometheus needed, at the price of history: verdict, open incidents with their age, GPUs and the
ledger figures are current values; trends and idle GPU-hours over a window need Prometheus.  Agents
are asked in parallel with a short timeout; one that does not answer is "unreachable".
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.fleet.model import Fleet, FleetIncident, NodeView, verdict_name


def parse_agents(items: list[str]) -> list[str]:
    """``HOST:PORT`` or ``http(s)://HOST:PORT`` entries -> base URLs (comments and blanks skipped)."""
    out: list[str] = []
    for raw in items:
        a = raw.split("#", 1)[0].strip()
        if not a:
            continue
        url = a if a.startswith(("http://", "https://")) else f"http://{a}"
        try:
            u = httpx.URL(url)
            ok = bool(u.host) and u.port is not None
        except (httpx.InvalidURL, ValueError):
            ok = False
        if not ok:
            raise InputError(f"agent {a!r}: expected HOST:PORT (e.g. gpu-07:9847)", exit_code=EXIT_USAGE)
        out.append(url.rstrip("/"))
    if not out:
        raise InputError("no agents given", exit_code=EXIT_USAGE)
    return out


def _metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def room_from_metrics(m: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any] | None:
    """BMC figures from an agent's /metrics (None when it polls no BMC); same shape as the Prometheus path."""
    up = m.get("gpuclinic_room_bmc_up")
    if not up:
        return None
    present = {lb.get("psu"): v for lb, v in m.get("gpuclinic_room_psu_present", [])}
    inlet = m.get("gpuclinic_room_inlet_temperature_celsius")
    return {"bmc_up": up[0][1] >= 1, "inlet_c": round(inlet[0][1], 1) if inlet else None,
            "fans_failed": sum(1 for _, v in m.get("gpuclinic_room_fan_ok", []) if v == 0),
            "psus_failed": sum(1 for lb, v in m.get("gpuclinic_room_psu_ok", [])
                               if v == 0 and present.get(lb.get("psu"), 1) == 1)}


def _one(client: httpx.Client, base: str, now: float) -> NodeView:
    host = httpx.URL(base).host
    n = NodeView(node=host if host not in ("127.0.0.1", "localhost", "::1") else base.split("//", 1)[1],
                 address=base.split("//", 1)[1])
    try:
        r = client.get(f"{base}/metrics")
        if r.status_code in (401, 403):
            n.verdict, n.error = "unreachable", f"HTTP {r.status_code}: token refused"
            return n
        r.raise_for_status()
        m = _metrics(r.text)
        st = client.get(f"{base}/api/state")
        state: dict[str, Any] = st.json() if st.status_code == 200 else {}
        inc = client.get(f"{base}/api/incidents")
        incidents: dict[str, Any] | None = inc.json() if inc.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as e:
        n.verdict, n.error = "unreachable", f"{type(e).__name__}: {e}"[:200]
        return n
    if state.get("host"):
        n.node = str(state["host"])
    if isinstance(state.get("now"), (int, float)):
        now = float(state["now"])  # event times are on the agent's clock (scaled when simulated)

    def first(*names: str) -> float | None:
        for name in names:
            if m.get(name):
                return m[name][0][1]
        return None

    n.verdict = verdict_name(first("gpuclinic_node_verdict", "gpuclinic_health_verdict"))
    gpus, lost = first("gpuclinic_gpus"), sum(v for _, v in m.get("gpuclinic_gpu_lost", []))
    n.gpus_seen = None if gpus is None else int(gpus - lost)
    exp = first("gpuclinic_gpus_expected")
    n.gpus_expected = None if exp is None else int(exp)
    if m.get("gpuclinic_run_interruptions"):
        n.interruptions = int(sum(v for _, v in m["gpuclinic_run_interruptions"]))
    n.goodput = first("gpuclinic_run_goodput_ratio")
    n.room = room_from_metrics(m)
    if incidents is not None:
        for i in incidents.get("incidents") or []:
            g = i.get("gpu")
            gpu = str(g.get("index")) if isinstance(g, dict) and g.get("index") is not None else None
            opened = i.get("opened") or i.get("first_seen")
            n.incidents.append(
                FleetIncident(
                    code=str(i.get("code")),
                    severity=str(i.get("severity")),
                    gpu=gpu,
                    family=i.get("family"),
                    age_s=now - float(opened) if isinstance(opened, (int, float)) else None,
                )
            )
    else:
        for ev in state.get("open_events") or []:
            if ev.get("severity") not in ("critical", "warning"):
                continue
            gpu = None if ev.get("gpu") is None else str(ev["gpu"])
            if any(i.code == ev.get("code") and i.gpu == gpu for i in n.incidents):
                continue
            opened = ev.get("opened")
            n.incidents.append(
                FleetIncident(
                    code=str(ev.get("code")),
                    severity=str(ev["severity"]),
                    gpu=gpu,
                    age_s=now - float(opened) if isinstance(opened, (int, float)) else None,
                )
            )
    return n


def collect(
    agents: list[str], *, token: str | None = None, timeout_s: float = 5.0, now: float | None = None
) -> Fleet:
    t0 = time.monotonic()
    at = time.time() if now is None else now
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with (
        httpx.Client(timeout=timeout_s, headers=headers, trust_env=False) as client,
        ThreadPoolExecutor(max_workers=min(32, len(agents))) as pool,
    ):
        nodes = list(pool.map(lambda a: _one(client, a, at), agents))
    names = [n.node for n in nodes]
    for n in nodes:  # several agents on one host (or hosts with one name): tell them apart
        if names.count(n.node) > 1 and n.address and n.address != n.node:
            n.node = f"{n.node}@{n.address}"
    return Fleet(
        source=f"{len(agents)} agents",
        window_s=0.0,
        nodes=nodes,
        generated_at=at,
        took_s=time.monotonic() - t0,
    )
