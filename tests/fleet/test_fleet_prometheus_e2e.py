"""Acceptance: a real Prometheus scraping four `gpuclinic watch --scenario` agents, read by
`gpuclinic fleet`."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import httpx
import pytest

from gpuclinic.fleet.prom import queries
from gpuclinic.sources.scenarios import expected
from gpuclinic.store import connect
from gpuclinic.supervise.ledger import Ledger
from realtools import require

from .fleetenv import Agent, PrometheusServer, by_node, fleet_json, wait_fleet

DEPLOY = Path(str(resources.files("gpuclinic.fleet").joinpath("deploy")))
# the straggler node's incident is the root cause the shared scenario catalog names (its lowered power limit)
STRAGGLER = (expected("straggler")["root"],)
SCENARIOS = {
    "gpu-fob": "fallen-off-bus",
    "gpu-hot": "overheating",
    "gpu-slow": "straggler",
    "gpu-ok": "healthy",
}


def _ledger(db: Path) -> None:
    """One supervised run on the fallen-off-bus node: 1 h, one GPU interruption losing 10 min."""
    led = Ledger(connect(db))
    now = time.time()
    rid = led.start_run(
        started_at=now - 3600, host="gpu-fob", command=["train.py"], cwd="/", gpus=[], log_path="-"
    )
    led.attempt_started(rid, 1, now - 3600)
    led.add_interruption(
        rid,
        attempt=1,
        attempt_started_at=now - 3600,
        at=now - 1800,
        cls="gpu_hardware",
        summary="GPU 4 fell off the bus",
        evidence=[],
        gpu={"index": 4},
        exit_code=1,
        signal=None,
        action="restart",
        last_checkpoint_at=now - 2400,
        checkpoint=None,
    )
    led.finish_run(rid, ended_at=now, status="completed", exit_code=0)
    led.conn.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[PrometheusServer, dict[str, Agent]]]:
    prom_bin = require("prometheus")["prometheus"]
    _ledger(tmp_path / "fob.db")
    agents = {
        n: Agent(n, s, tmp_path, db=tmp_path / "fob.db" if n == "gpu-fob" else None)
        for n, s in SCENARIOS.items()
    }
    prom = PrometheusServer(prom_bin, tmp_path, list(agents.values()))
    try:
        prom.wait_ready()
        yield prom, agents
    finally:
        for a in agents.values():
            a.stop()
        prom.stop()


@pytest.mark.timeout(150)
def test_fleet_over_prometheus(cluster: tuple[PrometheusServer, dict[str, Agent]]) -> None:
    prom, agents = cluster
    args = ["--prometheus", prom.url, "--window", "10m", "--price-per-gpu-hour", "2.5"]

    def settled(d: dict) -> bool:  # type: ignore[type-arg]
        n = by_node(d)
        return (
            len(n) == 4
            and n["gpu-fob"]["verdict"] == "drain"
            and n["gpu-hot"]["verdict"] != "healthy"
            and any(i["code"] in STRAGGLER for i in n["gpu-slow"]["incidents"])
            and n["gpu-fob"]["goodput"] is not None
            and n["gpu-ok"]["idle_gpu_hours"] is not None
        )

    rc, d = wait_fleet(args, settled, timeout=90)
    assert d["schema"] == "gpuclinic.fleet/1" and rc == 2

    # every metric the fleet queries, the dashboard and the fleet rules name is one a real agent exports
    exported = set()
    for a in agents.values():
        text = httpx.get(f"http://{a.addr}/metrics", timeout=5, trust_env=False).text
        exported |= {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
        exported |= {ln.split("{")[0].split()[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    used = set(re.findall(r"gpuclinic_[a-z_]+", json.dumps(queries("gpuclinic", 600))))
    used |= set(re.findall(r"gpuclinic_[a-z_]+", (DEPLOY / "grafana-fleet-dashboard.json").read_text()))
    used |= set(re.findall(r"gpuclinic_[a-z_]+", (DEPLOY / "gpuclinic-fleet-rules.yml").read_text()))
    # families a simulated GPU does not fill (NVML violation counters) still have to be declared by the agent
    import gpuclinic.sources.bmc.poller as bmc
    import gpuclinic.watch.metrics as wm

    declared = {
        n
        for f in (wm.__file__, bmc.__file__)
        for n in re.findall(r'"(gpuclinic_[a-z_]+)"', Path(f).read_text())
    }
    exported |= declared | {n + "_total" for n in declared}
    assert used - exported == set(), sorted(used - exported)
    first = d["nodes"][0]
    assert first["node"] == "gpu-fob" and first["verdict"] == "drain"
    # one incident: the root cause, its symptoms (XID 79, gpu.missing) folded in by the agent
    assert [(i["code"], i["gpu"], i["severity"], i["family"]) for i in first["incidents"]] == [
        ("gpu.fallen_off_bus", 4, "critical", "gpu_fault")
    ]
    assert all(i["age_s"] is not None and 0 <= i["age_s"] <= 600 for i in first["incidents"])
    assert (first["gpus_seen"], first["gpus_expected"]) == (7, 8)
    assert first["interruptions"] == 1 and first["goodput"] == pytest.approx(5 / 6, abs=0.01)
    n = by_node(d)
    assert n["gpu-ok"]["verdict"] == "healthy" and n["gpu-ok"]["incidents"] == []
    assert (n["gpu-ok"]["gpus_seen"], n["gpu-ok"]["gpus_expected"]) == (8, 8)
    assert n["gpu-ok"]["idle_gpu_hours"] == 0  # busy the whole time
    assert any(i["code"] == "thermal.slowdown" and i["gpu"] == 3 for i in n["gpu-hot"]["incidents"])
    assert [x["node"] for x in d["nodes"]][-1] == "gpu-ok"  # healthy last
    # the overheating node is a warning or (with the shared code catalog) a drain; the lost GPU ranks it
    # second
    assert d["summary"]["drain"][0] == "gpu-fob" and set(d["summary"]["drain"]) <= {"gpu-fob", "gpu-hot"}
    assert d["summary"]["gpus_seen"] == 7 + 8 + 8 + 8  # the straggler fault state is an 8-GPU node

    # kill one agent: it must show as unreachable, never healthy, and rank right after the drain node
    agents["gpu-ok"].stop()
    rc, d = wait_fleet(args, lambda d: by_node(d)["gpu-ok"]["verdict"] == "unreachable", timeout=30)
    dead = by_node(d)["gpu-ok"]
    assert dead["error"] and dead["incidents"] == [] and dead["gpus_seen"] is None
    order = [x["node"] for x in d["nodes"]]
    drains = [x["node"] for x in d["nodes"] if x["verdict"] == "drain"]
    assert order[0] == "gpu-fob" and order[len(drains)] == "gpu-ok", order  # right after the drain nodes
    assert d["summary"]["unreachable"] == ["gpu-ok"]

    # the shipped Grafana fleet dashboard: every query runs on this Prometheus, the node table and the
    # verdict timeline show all four nodes, the dead one as 3 (unreachable)
    dash = json.loads((DEPLOY / "grafana-fleet-dashboard.json").read_text())
    results = {}
    with httpx.Client(base_url=prom.url, timeout=10, trust_env=False) as c:
        for panel in dash["panels"]:
            for t in panel.get("targets", []):
                expr = t["expr"].replace("$node", ".*").replace("$__range", "10m")
                body = c.get("/api/v1/query", params={"query": expr}).json()
                assert body["status"] == "success", (panel["title"], expr, body)
                results[(panel["title"], t["refId"])] = body["data"]["result"]
    verdicts = {r["metric"]["node"]: float(r["value"][1]) for r in results[("Nodes (worst first)", "A")]}
    want = {
        n["node"]: {"healthy": 0, "warning": 1, "drain": 2, "unreachable": 3}[n["verdict"]]
        for n in d["nodes"]
    }
    assert verdicts == want and want["gpu-ok"] == 3 and want["gpu-fob"] == 2, (verdicts, want)
    crit = {x["node"] for x in d["nodes"] if any(i["severity"] == "critical" for i in x["incidents"])}
    assert (
        "gpu-fob" in crit
        and {r["metric"]["node"] for r in results[("Open incidents over time", "A")]} == crit
    )
    assert [float(r["value"][1]) for r in results[("Nodes to drain", "A")]] == [len(drains)]


@pytest.mark.timeout(60)
def test_prometheus_down_is_exit_3_one_line(tmp_path: Path) -> None:
    from ports import free_port

    rc, d, err = fleet_json("--prometheus", f"http://127.0.0.1:{free_port()}")
    assert (
        rc == 3
        and d == {}
        and err.startswith("gpuclinic: error: cannot reach Prometheus")
        and err.count("\n") == 1
    )
