"""scripts/device-check runs end to end on CPU with --scenario and leaves every output in $OUT."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import background

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device-check"
ARGV = [str(SCRIPT), "--scenario", "pcie-x8-under-load"]


def start_device_check() -> None:
    """Called by conftest.py when the session starts (tests/background.py): the script's ~13 s of
    doctor, watch, capture and accept steps run while other tests wait on their servers."""
    out = background.workdir("device-check") / "dc"  # removed with the session
    env = dict(os.environ, OUT=str(out), NO_COLOR="1", XDG_STATE_HOME=str(out.parent / "state"),
               XDG_CONFIG_HOME=str(out.parent / "config"))  # as conftest's _isolated_state does for tests
    env.pop("GPUCLINIC_DB", None)
    background.start("device-check", ARGV, SCRIPT.parents[1], env=env)


@pytest.fixture
def device_check_run(tmp_path: Path) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    """The script's run: the one started with the session, else one run here."""
    r = background.result("device-check", timeout=280)
    if r is not None:
        yield r, background.workdir("device-check") / "dc"
        return
    out = tmp_path / "dc"
    yield subprocess.run(
        ARGV, capture_output=True, text=True, env=dict(os.environ, OUT=str(out)), timeout=280
    ), out


@pytest.mark.timeout(300)
def test_device_check_with_a_scenario(
    device_check_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    p, out = device_check_run
    assert p.returncode == 0, p.stdout + p.stderr
    summary = (out / "summary.txt").read_text()
    for step in ("doctor ", "watch ", "doctor-from ", "accept "):
        assert step in summary
    steps = {ln.split()[0]: ln for ln in summary.splitlines() if "rc=" in ln}
    assert "rc=1" in steps["doctor"] and "rc=1" in steps["doctor-from"]  # pcie.link_degraded: warning
    assert "rc=2" in steps["accept"]  # the x8 link fails host<->device bandwidth
    doctor = json.loads((out / "doctor.json").read_text())
    again = json.loads((out / "doctor-from.json").read_text())
    assert [f["code"] for f in again["findings"]] == [f["code"] for f in doctor["findings"]]
    acc = json.loads((out / "accept.json").read_text())
    bad = [i for i in acc["items"] if i["id"] == "gpu.pcie.h2d" and i["gpu"] == "6"]
    assert bad and bad[0]["status"] == "fail"
    assert (out / "accept.html").stat().st_size > 10_000
    assert "FAIL     gpu.pcie.h2d" in (out / "accept.txt").read_text()
    assert (out / "gpuclinic.db").exists()  # the run's history stays with its outputs
    total = int(summary.strip().splitlines()[-1].split()[1].rstrip("s"))
    assert total < 8 * 60


def test_device_check_rejects_unknown_arguments(tmp_path: Path) -> None:
    p = subprocess.run(
        [str(SCRIPT), "--bogus"], capture_output=True, text=True, env=dict(os.environ, OUT=str(tmp_path))
    )
    assert p.returncode == 64 and "unknown argument --bogus" in p.stderr
