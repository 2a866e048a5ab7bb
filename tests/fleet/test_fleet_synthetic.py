"""Every fleet figure against known truth: a synthetic fleet's history backfilled into a real Prometheus
with `promtool tsdb create-blocks-from openmetrics`, then read by `gpuclinic fleet --prometheus`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from realtools import require

from .fleetenv import PrometheusServer, backfill, by_node, fleet_json


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tools = require("prometheus", "promtool")
    tmp = tmp_path_factory.mktemp("fleet-synth")
    # every third node is an agent without the idle counter: both ways of counting idle time run
    backfill(tools["promtool"], 100, tmp / "tsdb", tmp, end=int(time.time()) - 20, legacy_every=3)
    prom = PrometheusServer(tools["prometheus"], tmp, [], tsdb=tmp / "tsdb")
    try:
        prom.wait_ready(60)
        rc, d, err = fleet_json("--prometheus", prom.url, "--window", "1h", "--price-per-gpu-hour", "3")
        assert d, err
        yield {"rc": rc, "d": d, "nodes": by_node(d)}
    finally:
        prom.stop()


def test_order_and_verdicts(synthetic: dict[str, Any]) -> None:
    d = synthetic["d"]
    assert synthetic["rc"] == 2 and len(d["nodes"]) == 100
    assert [n["node"] for n in d["nodes"][:2]] == ["n0000", "n0096"]  # drain, then the node that went away
    warn = [n["node"] for n in d["nodes"][2:6]]
    assert sorted(warn) == ["n0024", "n0049", "n0074", "n0099"] and all(
        synthetic["nodes"][w]["verdict"] == "warning" for w in warn)
    assert d["summary"]["by_verdict"] == {
        "healthy": 94,
        "warning": 4,
        "drain": 1,
        "unreachable": 1,
        "unknown": 0,
    }


def test_drain_node(synthetic: dict[str, Any]) -> None:
    n = synthetic["nodes"]["n0000"]
    assert [(i["code"], i["gpu"], i["severity"]) for i in n["incidents"]] == [
        ("gpu.fallen_off_bus", 4, "critical")
    ]
    assert 1700 <= n["incidents"][0]["age_s"] <= 1900  # opened 30 minutes before the end of the data
    assert (n["gpus_seen"], n["gpus_expected"]) == (7, 8)


def test_unreachable_node_is_not_healthy(synthetic: dict[str, Any]) -> None:
    n = synthetic["nodes"]["n0096"]
    assert n["verdict"] == "unreachable" and n["incidents"] == [] and n["gpus_seen"] is None


def test_trends(synthetic: dict[str, Any]) -> None:
    t = synthetic["nodes"]["n0024"]["trends"]
    assert t["ecc_corrected"] == pytest.approx(240, rel=0.1)  # 4/min on GPU 2 for an hour
    assert t["throttle_s"] == pytest.approx(180, rel=0.1)
    assert t["remapped_rows"] == pytest.approx(1, rel=0.15)
    assert t["xids_per_day"] == pytest.approx(24, rel=0.15)  # one XID in the hour
    assert synthetic["nodes"]["n0024"]["degrading"] == [
        "ecc_corrected",
        "remapped_rows",
        "throttle_s",
        "xids_per_day",
    ]
    calm = synthetic["nodes"]["n0001"]
    assert calm["degrading"] == [] and calm["trends"]["ecc_corrected"] == 0


def test_idle_gpu_hours_and_cost(synthetic: dict[str, Any]) -> None:
    for name in ("n0009", "n0029"):  # with the agent's idle counter / sampled utilisation (older agent)
        idle = synthetic["nodes"][name]
        assert idle["idle_gpu_hours"] == pytest.approx(2.0, abs=0.1), name  # 2 idle GPUs for the hour
        assert idle["idle_cost"] == pytest.approx(6.0, abs=0.3), name
    assert synthetic["nodes"]["n0002"]["idle_gpu_hours"] == 0  # a busy older agent
    assert synthetic["nodes"]["n0001"]["idle_gpu_hours"] == 0
    s = synthetic["d"]["summary"]
    assert s["idle_gpu_hours"] == pytest.approx(10 * 2.0, abs=0.6)  # n0009, n0019, ... n0099
    assert s["idle_cost"] == pytest.approx(s["idle_gpu_hours"] * 3, abs=0.01)


def test_room_figures_from_the_bmc(synthetic: dict[str, Any]) -> None:
    n = synthetic["nodes"]
    assert n["n0000"]["room"] == {"bmc_up": True, "inlet_c": 35.5, "fans_failed": 0, "psus_failed": 0}
    assert n["n0025"]["room"]["fans_failed"] == 1 and n["n0050"]["room"]["psus_failed"] == 1
    assert n["n0075"]["room"] == {"bmc_up": False, "inlet_c": None, "fans_failed": 0, "psus_failed": 0}
    assert n["n0001"]["room"] is None  # no BMC polled on that node
    # room faults rank a node above its otherwise equal healthy peers
    healthy = [x["node"] for x in synthetic["d"]["nodes"] if x["verdict"] == "healthy"]
    assert set(healthy[:3]) == {"n0025", "n0050", "n0075"}, healthy[:5]
