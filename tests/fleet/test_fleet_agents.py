"""`gpuclinic fleet --agents`: the agents' own APIs, no Prometheus; a dead agent is unreachable."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ports import free_port

from .fleetenv import Agent, by_node, wait_fleet


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[dict[str, Agent]]:
    made = {"fob": Agent("fob", "fallen-off-bus", tmp_path), "ok": Agent("ok", "healthy", tmp_path)}
    yield made
    for a in made.values():
        a.stop()


@pytest.mark.timeout(90)
def test_agents_mode(agents: dict[str, Agent], tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    listing = tmp_path / "agents.txt"
    listing.write_text(f"# fleet\n{agents['ok'].addr}\n\n{dead}\n")
    args = ["--agents", agents["fob"].addr, "--agents-file", str(listing), "--timeout", "2"]
    # incident ages are on the agent's clock (10x simulated time here): they must grow
    rc, d = wait_fleet(
        args,
        lambda d: any(
            n["verdict"] == "drain" and any((i["age_s"] or 0) > 20 for i in n["incidents"])
            for n in d["nodes"]
        ),
        timeout=60,
    )
    assert rc == 2 and len(d["nodes"]) == 3
    first, second, third = d["nodes"]
    assert first["verdict"] == "drain" and first["address"] == agents["fob"].addr
    assert any(i["code"] == "gpu.fallen_off_bus" and i["gpu"] == 4 for i in first["incidents"])
    assert (first["gpus_seen"], first["gpus_expected"]) == (7, 8)
    assert (
        second["verdict"] == "unreachable" and second["address"] == dead and "ConnectError" in second["error"]
    )
    assert third["verdict"] == "healthy" and third["incidents"] == []
    assert by_node(d)[third["node"]]["idle_gpu_hours"] is None  # needs history: only through Prometheus


def test_markdown_and_table(agents: dict[str, Agent]) -> None:
    import time

    time.sleep(2)
    for fmt, marker in (("--markdown", "| node | verdict |"), (None, "gpuclinic fleet")):
        cmd = [
            sys.executable,
            "-m",
            "gpuclinic",
            "fleet",
            "--agents",
            f"{agents['ok'].addr},{agents['fob'].addr}",
        ]
        p = subprocess.run(
            cmd + ([fmt] if fmt else []),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
        )
        assert marker in p.stdout, p.stdout + p.stderr
        assert "2 nodes:" in p.stdout


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        ([], "give either --prometheus URL or --agents"),
        (["--agents", "nohost"], "expected HOST:PORT"),
        (["--prometheus", "127.0.0.1:9090"], "expected an http(s) URL"),
        (["--prometheus", "http://127.0.0.1:1", "--window", "10s"], "--window: at least 1m"),
        (["--prometheus", "http://127.0.0.1:1", "--window", "soon"], "bad --window 'soon'"),
        (["--prometheus", "http://127.0.0.1:1", "--bearer-token-file", "/nonexistent/token"], "cannot read"),
    ],
)
def test_bad_input_is_one_line_exit_64(args: list[str], msg: str) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "fleet", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 64 and msg in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_room_from_an_agents_metrics() -> None:
    """The BMC figures as the agent's RoomCollector writes them (sources/bmc/poller.py)."""
    from prometheus_client import generate_latest
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector, CollectorRegistry

    from gpuclinic.fleet.agents import _metrics, room_from_metrics

    class Room(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield GaugeMetricFamily("gpuclinic_room_bmc_up", "", value=1)
            yield GaugeMetricFamily("gpuclinic_room_inlet_temperature_celsius", "", value=31.25)
            fan = GaugeMetricFamily("gpuclinic_room_fan_ok", "", labels=["fan", "id"])
            fan.add_metric(["FAN1", "1"], 1)
            fan.add_metric(["FAN2", "2"], 0)
            yield fan
            ok = GaugeMetricFamily("gpuclinic_room_psu_ok", "", labels=["psu"])
            present = GaugeMetricFamily("gpuclinic_room_psu_present", "", labels=["psu"])
            for name, o, p in (
                ("PSU1", 1, 1),
                ("PSU2", 0, 1),
                ("PSU3", 0, 0),
            ):  # PSU3: empty bay, not a fault
                ok.add_metric([name], o)
                present.add_metric([name], p)
            yield ok
            yield present

    reg = CollectorRegistry()
    reg.register(Room())
    room = room_from_metrics(_metrics(generate_latest(reg).decode()))
    assert room == {"bmc_up": True, "inlet_c": 31.2, "fans_failed": 1, "psus_failed": 1}
    assert room_from_metrics(_metrics("gpuclinic_gpus 8\n")) is None
