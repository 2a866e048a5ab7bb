"""The agent exports the run ledger for the fleet view, promtool-clean; an agent without a ledger exports
none."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gpuclinic.fleet.ledger_metrics import LedgerCollector
from gpuclinic.store import connect
from gpuclinic.supervise.ledger import Ledger
from realtools import require

from .fleetenv import Agent


def _ledger(db: Path, lost_after_s: float = 1800) -> None:
    led = Ledger(connect(db))
    now = time.time()
    rid = led.start_run(started_at=now - 3600, host="h", command=["train.py"], cwd="/", gpus=[], log_path="-")
    led.attempt_started(rid, 1, now - 3600)
    for cls in ("gpu_hardware", "planned"):
        led.add_interruption(
            rid,
            attempt=1,
            attempt_started_at=now - 3600,
            at=now - lost_after_s,
            cls=cls,
            summary=cls,
            evidence=[],
            gpu=None,
            exit_code=1,
            signal=None,
            action="restart",
            last_checkpoint_at=now - lost_after_s - 600,
            checkpoint=None,
        )
    led.finish_run(rid, ended_at=now, status="completed", exit_code=0)
    led.conn.close()


def _scrape(path: Path | None) -> str:
    reg = CollectorRegistry()
    reg.register(LedgerCollector(path))
    return generate_latest(reg).decode()


def test_collector(tmp_path: Path) -> None:
    assert _scrape(None) == "" and _scrape(tmp_path / "missing.db") == ""
    empty = tmp_path / "watch-only.db"
    connect(empty).execute("CREATE TABLE samples (x)")
    assert _scrape(empty) == ""
    assert not {"runs"} & {
        r[0] for r in connect(empty).execute("SELECT name FROM sqlite_master")
    }  # not created
    db = tmp_path / "g.db"
    _ledger(db)
    text = _scrape(db)
    assert 'gpuclinic_run_interruptions{class="gpu_hardware",planned="false"} 1.0' in text
    assert 'gpuclinic_run_interruptions{class="planned",planned="true"} 1.0' in text
    assert "gpuclinic_run_wall_seconds 3600.0" in text


@pytest.mark.timeout(60)
def test_agent_metrics_are_promtool_clean(tmp_path: Path) -> None:
    promtool = require("promtool")["promtool"]
    db = tmp_path / "agent.db"
    _ledger(db)
    a = Agent("n", "healthy", tmp_path, db=db)
    try:
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            "gpuclinic_run_goodput_ratio" in text and "gpuclinic_gpus 8.0" in text
        ):  # after the first sample
            try:
                text = httpx.get(f"http://{a.addr}/metrics", timeout=2, trust_env=False).text
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    finally:
        a.stop()
    assert "gpuclinic_run_goodput_ratio" in text and "gpuclinic_gpus 8.0" in text
    ledger_part = "\n".join(ln for ln in text.splitlines() if "gpuclinic_run_" in ln) + "\n"
    p = subprocess.run(
        [promtool, "check", "metrics"],
        input=ledger_part,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 0 and p.stdout.strip() == "" and p.stderr.strip() == "", p.stdout + p.stderr
