from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.watch.agent import Agent
from gpuclinic.watch.backend import ScaledClock
from gpuclinic.watch.config import WatchConfig, config_from_dict
from gpuclinic.watch.simulate import ScenarioBackend, load_watch_scenario, scenario_from_dict
from gpuclinic.watch.store import WatchStore


def artifacts_dir() -> Path:
    p = Path(os.environ.get("GPUCLINIC_ARTIFACTS") or Path(__file__).resolve().parents[2] / "artifacts")
    p.mkdir(parents=True, exist_ok=True)
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(name="free_port")
def _free_port_fixture() -> Callable[[], int]:
    return free_port


@pytest.fixture(name="artifacts")
def _artifacts_fixture() -> Path:
    return artifacts_dir()


def make_agent(scenario: str | dict[str, Any], *, scale: float = 50.0, db: Path | None = None,
               cfg: WatchConfig | None = None, rules: dict[str, Any] | None = None, **kw: Any) -> Agent:
    sc = load_watch_scenario(scenario) if isinstance(scenario, str) else scenario_from_dict(scenario)
    cfg = cfg or config_from_dict({"rules": {**sc.rules, **(rules or {})}})
    cfg.agent.doctor_interval_s = kw.pop("doctor_interval_s", 0)
    clock = ScaledClock(scale)
    store = WatchStore(db) if db else None
    logs: list[str] = kw.pop("logs", [])
    return Agent(cfg, ScenarioBackend(sc, clock), clock=clock, store=store, log=logs.append, **kw)


@pytest.fixture
def agent_factory(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    made: list[Agent] = []

    def f(*a: Any, **kw: Any) -> Agent:
        ag = make_agent(*a, **kw)
        made.append(ag)
        return ag

    yield f
    for ag in made:
        ag.stop.set()
        if ag.store is not None:
            ag.store.close()
