"""watch plays every fault scenario as a timeline and alerts once per incident, and once when it resolves."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.runbooks import runbook_command
from gpuclinic.model import GpuRef
from gpuclinic.sources.scenarios import timeline
from ports import free_port
from watchproc import watch_argv

SCENARIOS = load_data("scenarios.json")["scenarios"]
SINGLE_FAULT = sorted(n for n, s in SCENARIOS.items() if s["expect"].get("root"))


PLAYED = [*SINGLE_FAULT, "healthy-8xh100-load"]


@pytest.fixture(scope="module")
def played(receiver_cls: Any) -> dict[str, tuple[subprocess.CompletedProcess[str], list[Any]] | Exception]:
    """Every scenario played by its own ``watch`` process to its own webhook receiver, four at a time:
    a run is ~3 s of waiting on its timeline and ~0.4 s of CPU, so twelve in a row were ~40 s idle."""

    def play(name: str) -> tuple[str, tuple[subprocess.CompletedProcess[str], list[Any]] | Exception]:
        receiver = receiver_cls()
        try:
            r = subprocess.run(
                watch_argv(
                    "--duration",
                    "50s",
                    "--no-store",
                    "--doctor-interval",
                    "0",
                    "--webhook",
                    receiver.url,
                    "--listen",  # its own port: four agents at once cannot all have the default
                    f"127.0.0.1:{free_port()}",
                    scenario=name,
                    time_scale=20,
                ),
                capture_output=True,
                text=True,
                timeout=50,
            )
            return name, (r, receiver.bodies())
        except subprocess.TimeoutExpired as e:  # reported by that scenario's test
            return name, e
        finally:
            receiver.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(play, PLAYED))


@pytest.mark.timeout(120)  # the first one waits for all of them (about 15 s)
@pytest.mark.parametrize("name", PLAYED)
def test_one_alert_per_incident_and_one_resolved(name: str, played: dict[str, Any]) -> None:
    got = played[name]
    if isinstance(got, Exception):
        raise got
    r, all_bodies = got
    assert r.returncode in (0, 1, 2), r.stderr
    bodies = [b for b in all_bodies if isinstance(b, dict)]
    firing = [b for b in bodies if b["status"] == "firing"]
    resolved = [b for b in bodies if b["status"] == "resolved"]
    if name == "healthy-8xh100-load":
        assert bodies == []
        return
    assert len(firing) == 1, [(b["code"], b["severity"]) for b in firing]
    assert firing[0]["severity"] in ("warning", "critical")
    # the one remedy text (knowledge/runbooks.remedy): the incident's first step, then the one pointer
    gpu = GpuRef(index=firing[0]["gpu"]) if firing[0]["gpu"] is not None else None
    assert firing[0]["remedy"].endswith(f"All steps: `{runbook_command(firing[0]['code'], gpu)}`."), firing[0]
    recovers = timeline(name)["recover_at"] is not None
    assert len(resolved) == (1 if recovers else 0), [(b["code"], b["status"]) for b in bodies]
    if recovers:
        assert resolved[0]["key"] == firing[0]["key"] and resolved[0]["code"] == firing[0]["code"]


def test_every_name_works_in_every_command() -> None:
    lists = {
        c: subprocess.run(
            [sys.executable, "-m", "gpuclinic", c, "--list-scenarios"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        for c in ("doctor", "watch", "run")
    }
    assert lists["doctor"] == lists["watch"] == lists["run"]
    names = [ln.split()[0] for ln in lists["doctor"].splitlines()]
    assert {"fallen-off-bus", "demo", "memory-errors", "straggler-4x"} <= set(names)
    for n in ("demo", "memory-errors"):  # a watch timeline: doctor reads its faulted state
        d = subprocess.run(
            [sys.executable, "-m", "gpuclinic", "doctor", "--scenario", n],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert d.returncode == 2, d.stderr
    errs = {
        c: subprocess.run(
            [sys.executable, "-m", "gpuclinic", *args], capture_output=True, text=True, timeout=30
        )
        for c, args in {
            "doctor": ["doctor", "--scenario", "nosuch"],
            "watch": ["watch", "--scenario", "nosuch", "--duration", "1s", "--no-store"],
            "run": ["run", "--skip-preflight", "--scenario", "nosuch", "--", "true"],
        }.items()
    }
    assert len({e.stderr for e in errs.values()}) == 1 and all(e.returncode == 64 for e in errs.values())


def test_api_incidents_and_metrics_export_one_incident(agent_factory: Any) -> None:
    from prometheus_client import generate_latest

    from gpuclinic.watch.metrics import make_registry
    from gpuclinic.watch.server import incidents_json

    a = agent_factory("fallen-off-bus", scale=60)
    a.run(duration_s=20)
    d = incidents_json(a)
    assert d["verdict"] == "drain"
    (inc,) = [i for i in d["incidents"] if i["severity"] != "info"]
    assert inc["code"] == "gpu.fallen_off_bus" and inc["gpu"]["index"] == 4
    assert {"xid.79", "gpu.missing"} <= set(inc["symptoms"]) and inc["runbook"] == "gpu.fallen_off_bus"
    text = generate_latest(make_registry(a)).decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("gpuclinic_incident_open{")]
    assert lines == [
        'gpuclinic_incident_open{code="gpu.fallen_off_bus",family="gpu_fault",gpu="4",'
        'severity="critical"} 1.0'
    ]
    assert "gpuclinic_node_verdict 2.0" in text
