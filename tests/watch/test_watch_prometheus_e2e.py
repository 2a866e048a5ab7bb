"""End to end with a real Prometheus: the agent on a scenario, Prometheus scraping it with the shipped
rules, the XID and lost-GPU alerts firing (queried from Prometheus' own /api/v1/alerts)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import httpx
import pytest

from realtools import require

RULES = Path(str(resources.files("gpuclinic.watch").joinpath("deploy").joinpath("gpuclinic-rules.yml")))


@pytest.mark.timeout(90)
def test_real_prometheus_fires_shipped_rules(tmp_path: Path, free_port: Callable[[], int]) -> None:
    PROM = require("prometheus")["prometheus"]
    aport, pport = free_port(), free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpuclinic", "watch", "--scenario", "demo", "--time-scale", "10", "--no-store",
         "--listen", f"127.0.0.1:{aport}", "--quiet", "--duration", "1200s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{RULES}"]
scrape_configs:
  - job_name: gpuclinic
    static_configs:
      - targets: ["127.0.0.1:{aport}"]
""")
    prom = subprocess.Popen(
        [PROM, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    firing: dict[str, dict[str, str]] = {}
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=f"http://127.0.0.1:{pport}", timeout=2, trust_env=False) as c:
            while time.monotonic() < deadline:
                try:
                    alerts = c.get("/api/v1/alerts").json()["data"]["alerts"]
                except (httpx.HTTPError, ValueError, KeyError):
                    alerts = []
                firing = {a["labels"]["alertname"]: a["labels"] for a in alerts if a["state"] == "firing"}
                if "GpuclinicGpuFallenOffBus" in firing or \
                        prom.poll() is not None or agent.poll() is not None:
                    break
                time.sleep(0.5)
            targets = c.get("/api/v1/targets").json()["data"]["activeTargets"]
        assert prom.poll() is None, "prometheus exited early"
        assert agent.poll() is None, agent.stderr.read().decode() if agent.stderr else ""
        assert targets and targets[0]["health"] == "up", targets
        assert "GpuclinicGpuFallenOffBus" in firing, firing
        fob = firing["GpuclinicGpuFallenOffBus"]
        assert fob["gpu"] == "2" and fob["severity"] == "critical" and fob["family"] == "gpu_fault"
        # one alert per incident: the Xid 79 line and the lost GPU are its symptoms, not alerts of their own
        assert not {"GpuclinicXidAny", "GpuclinicGpuMissing"} & set(firing), firing
    finally:
        for p in (prom, agent):
            p.terminate()
        for p in (prom, agent):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
