"""``gpuclinic history`` reads the BMC poller's ``room_samples``: inlet, fans and PSUs per sensor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from roomdata import ROOM_FIXTURES

from gpuclinic.errors import EXIT_USAGE
from gpuclinic.sources.bmc import poller
from gpuclinic.sources.evidence import load_evidence
from gpuclinic.watch.store import WatchStore


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        check=False,
    )


def _store(tmp_path: Path) -> str:
    db = tmp_path / "watch.db"
    WatchStore(db).close()  # a real agent store, as `watch` leaves it
    room = load_evidence([str(ROOM_FIXTURES / "ipmi" / "dell-r320-sdr-list-full-fans-0rpm.txt")]).room
    assert room is not None
    now = time.time()
    for ago in (120.0, 60.0):  # two polls a minute apart
        assert poller.record(str(db), room, now - ago) > 0
    return str(db)


def test_history_of_one_fan_and_of_the_inlet(tmp_path: Path) -> None:
    db = _store(tmp_path)
    r = _run("history", "fan_rpm", "--sensor", "fan3b", "--db", db, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["unit"] == "RPM"
    assert [(p["sensor"], p["value"]) for p in doc["points"]] == [("Fan3B", 0.0), ("Fan3B", 0.0)]
    t = _run("history", "inlet_c", "--db", db)
    assert t.returncode == 0, t.stderr
    rows = [ln for ln in t.stdout.splitlines() if "Inlet Temp" in ln]
    assert len(rows) == 2 and all(ln.rstrip().endswith("32") for ln in rows)
    c = _run("history", "fan_rpm", "--db", db, "--format", "csv", "--since", "90s")
    assert c.stdout.splitlines()[0] == "time,sensor,fan_rpm_RPM"
    assert len(c.stdout.splitlines()) == 1 + 10  # ten fans, the newer poll only


def test_room_metrics_are_listed_and_misuse_is_a_usage_error(tmp_path: Path) -> None:
    db = _store(tmp_path)
    lst = _run("history", "--list")
    assert all(m in lst.stdout for m in ("inlet_c", "fan_rpm", "psu_ok"))
    bad = _run("history", "fan_rpm", "--gpu", "0", "--db", db)
    assert bad.returncode == EXIT_USAGE and "--sensor" in bad.stderr
    bad2 = _run("history", "temperature", "--sensor", "FAN1", "--db", db)
    assert bad2.returncode == EXIT_USAGE


def test_a_store_without_room_samples_says_so(tmp_path: Path) -> None:
    db = tmp_path / "watch.db"
    WatchStore(db).close()
    r = _run("history", "inlet_c", "--db", str(db))
    assert r.returncode == 0 and "no inlet_c samples" in r.stdout
    import sqlite3

    with sqlite3.connect(db) as conn:  # reading did not add the table to the agent's store
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "room_samples" not in names
