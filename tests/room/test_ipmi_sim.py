"""Against a real BMC: OpenIPMI's ipmi_sim on loopback, read with ``ipmitool -I lanplus``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from simbmc import USER, SimBmc, running

from gpuclinic.collect import CollectOptions, collect_live
from gpuclinic.diagnose import diagnose
from gpuclinic.sources.bmc.live import BmcOptions
from realtools import require

PASSWORD = "Pw-4-ipmi-sim-7Qx"  # would be easy to spot in any output


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimBmc]:
    tools = require("ipmi_sim", "ipmitool")
    with running(tmp_path / "sim", PASSWORD, tools["ipmi_sim"], tools["ipmitool"]) as s:
        yield s


def _opts(sim: SimBmc, **kw: object) -> BmcOptions:
    o = BmcOptions(host="127.0.0.1", port=sim.port, user=USER, password=PASSWORD, in_band=False, hwmon=False,
                   timeout_s=10)
    for k, v in kw.items():
        setattr(o, k, v)
    return o


def _read(sim: SimBmc, **kw: object):  # type: ignore[no-untyped-def]
    snap = collect_live(CollectOptions(sources=["bmc"], bmc=_opts(sim, **kw)))
    return snap, diagnose(snap)


def test_healthy_bmc_shows_inlet_fans_and_psus(sim: SimBmc) -> None:
    snap, rep = _read(sim)  # no cipher given: ipmitool's default is refused, suite 3 is used
    room = snap.room
    assert room is not None and room.bmc == f"127.0.0.1:{sim.port}"
    inlet = room.temperatures("inlet")
    assert [s.reading for s in inlet] == [24.0]
    assert inlet[0].thresholds == {"unc": 40.0, "ucr": 42.0, "unr": 45.0}
    assert {f.name: f.reading for f in room.fans()} == {"FAN1": 9000.0, "FAN2": 9000.0}
    assert {p.name: p.health for p in room.psus} == {"PS1 Status": "ok", "PS2 Status": "ok"}
    assert room.events_read and room.events == []
    codes = {f.code: f for f in rep.findings}
    assert "room.status" in codes
    assert "inlet 24 °C" in codes["room.status"].title and "fans 2 OK" in codes["room.status"].title
    assert "PSUs 2 OK of 2" in codes["room.status"].title
    assert not [f for f in rep.findings if f.code.startswith("room.") and f.code != "room.status"]


def test_fault_injected_shows_within_one_poll(sim: SimBmc) -> None:
    _, rep = _read(sim, cipher=3)
    assert not [f.code for f in rep.findings if f.code.startswith("room.") and f.code != "room.status"]
    sim.set_value("fan1", 0)  # FAN1 stops
    sim.psu_fail()  # PS1: failure detected + its SEL record
    time.sleep(1.2)  # the simulator polls the fan file every 0.5 s
    snap, rep = _read(sim, cipher=3)
    got = {(f.code, f.severity.label) for f in rep.findings}
    assert ("room.fan_failed", "critical") in got
    assert ("room.psu_failed", "critical") in got
    assert ("room.sel.psu_failure", "critical") in got
    assert ("room.sel.fan_critical", "critical") in got  # the BMC logged FAN1 crossing its thresholds itself
    fan = next(f for f in rep.findings if f.code == "room.fan_failed")
    assert "FAN1" in fan.title and "FAN2" not in fan.title
    assert rep.verdict is not None and rep.verdict.value == "drain"


def test_wrong_password_is_a_could_not_check_line(sim: SimBmc) -> None:
    snap = collect_live(CollectOptions(sources=["bmc"], bmc=_opts(sim, password="not-" + PASSWORD, cipher=3)))
    assert snap.room is None
    why = [s.why for s in snap.skipped if s.what.startswith("the BMC over IPMI")]
    assert why and "not-" + PASSWORD not in why[0]
    rep = diagnose(snap)
    assert rep.exit_code in (0, 3)  # nothing wrong was found; the BMC simply could not be read


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )


@pytest.mark.parametrize("how", ["env", "flag", "file"])
def test_doctor_cli_never_shows_the_password(sim: SimBmc, tmp_path: Path, how: str) -> None:
    args = ["doctor", "--quick", "--bmc", f"127.0.0.1:{sim.port}", "--bmc-user", USER, "--bmc-cipher", "3"]
    env = {"IPMI_PASSWORD": ""}
    if how == "env":
        env["IPMI_PASSWORD"] = PASSWORD
    elif how == "flag":
        args += ["--bmc-password", PASSWORD]
    else:
        pw = tmp_path / "pw"
        pw.write_text(PASSWORD + "\n")
        args += ["--bmc-password-file", str(pw)]
    sim.set_value("fan2", 0)
    time.sleep(1.0)
    plain = _cli(*args, env=env)
    js = _cli(*args, "--json", env=env)
    md = _cli(*args, "--markdown", env=env)
    for r in (plain, js, md):
        assert PASSWORD not in r.stdout + r.stderr
    assert "FAN2" in plain.stdout and "room.fan_failed" in plain.stdout
    assert "Server room: inlet 24 °C" in plain.stdout
    rep = json.loads(js.stdout)
    assert rep["exit_code"] == 2
    assert any(i["code"] == "room.fan_failed" for i in rep["incidents"])
    assert rep["facts"]["room"]["bmc"] == f"127.0.0.1:{sim.port}"
    # the capture of this run (the report's facts) carries no secret either
    assert PASSWORD not in json.dumps(rep)


@pytest.mark.parametrize("how", ["flag", "file"])
def test_capture_takes_the_bmc_and_never_holds_the_password(sim: SimBmc, tmp_path: Path, how: str) -> None:
    """``capture --bmc`` saves the room as doctor reads it; no file in the bundle holds the password."""
    import tarfile

    out = tmp_path / "cap.tar.gz"
    args = [
        "capture",
        "--quick",
        "-o",
        str(out),
        "--bmc",
        f"127.0.0.1:{sim.port}",
        "--bmc-user",
        USER,
        "--bmc-cipher",
        "3",
    ]
    if how == "flag":
        args += ["--bmc-password", PASSWORD]
    else:
        pw = tmp_path / "pw"
        pw.write_text(PASSWORD + "\n")
        args += ["--bmc-password-file", str(pw)]
    sim.set_value("fan2", 0)
    time.sleep(1.0)
    r = _cli(*args, env={"IPMI_PASSWORD": ""})
    assert r.returncode == 0, r.stderr
    assert PASSWORD not in r.stdout + r.stderr
    with tarfile.open(out) as tf:
        members = [m for m in tf.getmembers() if m.isfile()]
        blobs = {m.name: tf.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    assert any(n.endswith("snapshot.json") for n in blobs)
    for name, blob in blobs.items():
        assert PASSWORD.encode() not in blob, name
    snap = next(json.loads(b) for n, b in blobs.items() if n.endswith("snapshot.json"))
    assert snap["room"]["bmc"] == f"127.0.0.1:{sim.port}"
    # read back elsewhere: the fan the simulator stopped is still a failed fan
    back = _cli("doctor", "--from", str(out), "--json", env={})
    rep = json.loads(back.stdout)
    assert any(f["code"] == "room.fan_failed" for f in rep["findings"]), back.stderr
