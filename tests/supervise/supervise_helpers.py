from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

TRAINER = str(Path(__file__).with_name("fake_trainer.py"))
SRC = str(Path(__file__).resolve().parents[2] / "src")


@dataclass
class RunResult:
    rc: int
    out: str
    err: str
    db: Path
    ckpt: Path

    def interruptions(self) -> list[dict[str, Any]]:
        conn = sqlite3.connect(self.db)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in conn.execute("SELECT * FROM interruptions ORDER BY id")]
        finally:
            conn.close()

    def runs(self) -> list[dict[str, Any]]:
        conn = sqlite3.connect(self.db)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY id")]
        finally:
            conn.close()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("GPUCLINIC_NO_NVML", "1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if extra:
        env.update(extra)
    return env


def run_cmd(tmp_path: Path, run_args: list[str], trainer_args: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "gpuclinic", "run", "--skip-preflight", "--db", str(tmp_path / "ledger.db"),
        "--backoff", "0", "--stop-timeout", "2s", "--sample-interval", "0.1s", *run_args,
        "--", sys.executable, TRAINER, "--ckpt", str(tmp_path / "ckpt"), *trainer_args,
    ]



def assert_all_gone(pidfile: Path, timeout: float = 5.0) -> None:
    """Every process the job started (incl. one that escaped with setsid) and its group are gone."""
    info = json.loads(pidfile.read_text())
    pids = [info["self"], *info["kids"]]
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if _alive(p)]
        group = [p.pid for p in psutil.process_iter() if _in_group(p.pid, info["pgid"])]
        if not alive and not group:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"orphans left: pids {alive}, group members {group}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (OSError, psutil.Error):
        return False


def gpu_facts_file(path: Path) -> Path:
    facts = [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0c5a4f3e-1111-2222-3333-444455556666",
         "pci_bus_id": "00000000:3B:00.0", "utilization_gpu_pct": 97.0},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-9d7e2b10-aaaa-bbbb-cccc-ddddeeeeffff",
         "pci_bus_id": "00000000:86:00.0", "utilization_gpu_pct": 96.0},
    ]
    path.write_text(json.dumps(facts))
    return path
