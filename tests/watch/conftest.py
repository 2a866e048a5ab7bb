from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.watch.agent import Agent
from gpuclinic.watch.backend import ScaledClock
from gpuclinic.watch.config import WatchConfig, config_from_dict
from gpuclinic.watch.simulate import ScenarioBackend, load_watch_scenario, scenario_from_dict
from gpuclinic.watch.store import WatchStore
from ports import free_port


def artifacts_dir() -> Path:
    p = Path(os.environ.get("GPUCLINIC_ARTIFACTS") or Path(__file__).resolve().parents[2] / "artifacts")
    p.mkdir(parents=True, exist_ok=True)
    return p


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


class Receiver:
    """A local webhook endpoint that records every POST (time, path+query, JSON body)."""

    def __init__(self, port: int = 0) -> None:
        import json
        import threading
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[tuple[float, str, Any]] = []
        self.status = 200
        self.reply: bytes = b'{"errcode": 0, "ok": true}'
        self.got = threading.Event()
        rec = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                return

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                try:
                    obj: Any = json.loads(body)
                except ValueError:
                    obj = body.decode("utf-8", "replace")
                rec.requests.append((time.time(), self.path, obj))
                rec.got.set()
                out = rec.reply if rec.status < 400 else (b"error for " + self.path.encode())
                self.send_response(rec.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def bodies(self) -> list[Any]:
        return [b for _, _, b in self.requests]

    def wait_for(self, pred: Callable[[Any], bool], timeout: float = 5.0) -> tuple[float, str, Any] | None:
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for r in list(self.requests):
                if pred(r[2]):
                    return r
            time.sleep(0.01)
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="session")
def receiver_cls() -> type[Receiver]:
    return Receiver
