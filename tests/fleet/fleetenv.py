"""Real agents (`gpuclinic watch --scenario`) and a real Prometheus scraping them, for fleet tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ports import free_port
from watchproc import watch_argv


class Agent:
    def __init__(self, node: str, scenario: str, tmp: Path, *, db: Path | None = None,
                 extra: list[str] | None = None) -> None:
        self.node, self.scenario = node, scenario
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        store = ["--db", str(db)] if db else ["--no-store"]
        self.proc = subprocess.Popen(
            watch_argv(
                "--hold-fault",
                *store,
                "--listen",
                self.addr,
                "--quiet",
                "--duration",
                "36000s",
                *(extra or []),
                scenario=scenario,
            ),
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / f"agent-{node}.log", "wb"),
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


class PrometheusServer:
    def __init__(
        self,
        binary: str,
        tmp: Path,
        agents: list[Agent],
        *,
        extra_args: list[str] | None = None,
        tsdb: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tmp / "prometheus.yml"
        targets = "\n".join(
            f"      - targets: ['{a.addr}']\n        labels: {{node: {a.node}}}" for a in agents
        )
        scrape = (
            f"""scrape_configs:
  - job_name: gpuclinic
    static_configs:
{targets}
"""
            if agents
            else "scrape_configs: []\n"
        )
        cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n" + scrape)
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tsdb or tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *(extra_args or []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "prometheus.log", "wb"),
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("prometheus not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def fleet_json(*args: str) -> tuple[int, dict[str, Any], str]:
    p = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "fleet", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    try:
        return p.returncode, json.loads(p.stdout), p.stderr
    except ValueError:
        return p.returncode, {}, p.stderr


def wait_fleet(
    args: list[str], pred: Callable[[dict[str, Any]], bool], timeout: float = 60.0
) -> tuple[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    last: tuple[int, dict[str, Any], str] = (0, {}, "")
    while time.monotonic() < deadline:
        last = fleet_json(*args)
        if last[1] and pred(last[1]):
            return last[0], last[1]
        time.sleep(1.0)
    raise AssertionError(
        f"fleet never matched; last rc={last[0]} stderr={last[2]!r} json={json.dumps(last[1])[:3000]}"
    )


def by_node(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in d["nodes"]}


def backfill(
    promtool: str,
    nodes: int,
    tsdb: Path,
    tmp: Path,
    *,
    end: int,
    duration_s: int = 3600,
    step_s: int = 60,
    legacy_every: int = 0,
) -> tuple[list[Any], float]:
    """Synthetic fleet history -> OpenMetrics file -> TSDB blocks (promtool). Returns truth and seconds."""
    from gpuclinic.fleet.synth import write_openmetrics

    om = tmp / "fleet.om"
    with open(om, "w") as fh:
        truth = write_openmetrics(
            fh, nodes=nodes, end=end, duration_s=duration_s, step_s=step_s, legacy_every=legacy_every
        )
    t0 = time.monotonic()
    tsdb.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if p.returncode != 0:
        raise RuntimeError(f"promtool failed: {p.stderr[-2000:]}")
    took = time.monotonic() - t0
    om.unlink()
    return truth, took
