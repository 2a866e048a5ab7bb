"""CLI errors for the BMC flags (one line, exit 64), and hwmon read from a sysfs-shaped tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.errors import EXIT_USAGE
from gpuclinic.sources.bmc.lmsensors import read_hwmon


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["doctor", "--bmc", "10.0.0.5", "--bmc-password-file", "/nonexistent/pw"],
        ["doctor", "--bmc", "10.0.0.5:notaport"],
        ["doctor", "--redfish", "ftp://10.0.0.5"],
        ["doctor", "--redfish", "https://10.0.0.5", "--redfish-ca", "/nonexistent/ca.pem"],
        ["doctor", "--from", "/etc/hostname", "--bmc", "10.0.0.5"],
        ["doctor", "--bmc-cipher", "99"],
        ["doctor", "--bmc-timeout", "0"],
        ["doctor", "--no-such-flag"],
    ],
)
def test_bad_bmc_flags_are_one_line_usage_errors(args: list[str]) -> None:
    r = _run(*args)
    # click's own range and option errors exit 64 like ours: click's 2 would read as "drain"
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 3


def test_unreachable_bmc_is_a_could_not_check_line_not_an_error(tmp_path: Path) -> None:
    # nothing listens on this loopback port: ipmitool times out, the rest of the doctor run stands
    r = _run(
        "doctor",
        "--quick",
        "--json",
        "--bmc",
        "127.0.0.1:9",
        "--bmc-user",
        "u",
        "--bmc-timeout",
        "3",
        env={"IPMI_PASSWORD": "unreachable-secret-77"},
    )
    assert r.returncode in (0, 1, 2, 3), r.stderr
    assert "unreachable-secret-77" not in r.stdout + r.stderr
    import json

    rep = json.loads(r.stdout)
    whats = [s["what"] for s in rep["skipped"]]
    assert any(w.startswith("the BMC over IPMI") for w in whats)


def _hwmon(root: Path) -> None:
    a = root / "hwmon0"
    a.mkdir(parents=True)
    (a / "name").write_text("nct6775\n")
    (a / "temp1_input").write_text("31000\n")
    (a / "temp1_label").write_text("SYSTIN\n")
    (a / "fan1_input").write_text("0\n")
    (a / "fan1_min").write_text("300\n")
    (a / "fan1_alarm").write_text("1\n")
    (a / "fan2_input").write_text("1450\n")
    (a / "in0_input").write_text("912\n")
    (a / "fan3_input").write_text("0\n")  # an empty header: no minimum set
    (a / "fan3_alarm").write_text("1\n")
    b = root / "hwmon1"
    b.mkdir()
    (b / "name").write_text("coretemp\n")
    (b / "temp1_input").write_text("52000\n")
    (b / "temp1_label").write_text("Package id 0\n")
    (b / "temp1_crit").write_text("100000\n")


def test_hwmon_tree(tmp_path: Path) -> None:
    _hwmon(tmp_path)
    room = read_hwmon(str(tmp_path))
    by = {s.name: s for s in room.sensors}
    assert by["SYSTIN"].reading == 31.0 and by["SYSTIN"].unit == "C"
    assert (
        by["fan1"].reading == 0 and by["fan1"].level == "critical" and by["fan1"].thresholds == {"lcr": 300.0}
    )
    assert by["fan2"].reading == 1450 and by["fan2"].level == "ok"
    assert by["in0"].reading == pytest.approx(0.912)
    assert by["fan3"].absent and not by["fan1"].absent
    from gpuclinic.checks import run_checks
    from gpuclinic.facts.snapshot import Snapshot

    fs, _ = run_checks(Snapshot(room=room), only=["room.fans"])
    assert [f.data["fan"] for f in fs] == ["fan1"]  # the stopped fan with a minimum, not the empty header
    assert by["Package id 0"].role == "cpu" and by["Package id 0"].thresholds == {"ucr": 100.0}
    assert read_hwmon(str(tmp_path / "missing")).sensors == []


def test_a_given_bmc_password_is_masked_in_every_bundle_file_however_short() -> None:
    """A password from a flag or file has no secret-sounding variable name, and may be short ("calvin")."""
    from gpuclinic.facts.snapshot import Snapshot
    from gpuclinic.sources.capture import Bundle, RawOutput, render_files

    b = Bundle(
        snapshot=Snapshot(),
        raw=[RawOutput("raw/x.txt", None, "login calvin ok\n")],
        failed=[{"what": "bmc", "why": "refused calvin"}],
    )
    plain = render_files(b, False, env={})
    assert any(b"calvin" in v for v in plain.values())  # the test can fail: the word is there unmasked
    files = render_files(b, False, env={}, secrets_given={"bmc-password": "calvin", "redfish-password": ""})
    assert all(b"calvin" not in v for v in files.values())
    assert b"[secret:bmc-password]" in files["raw/x.txt"]


def test_password_in_the_redfish_url_is_never_printed() -> None:
    """`--redfish https://user:pw@bmc` is a natural thing to type; the password must not reach the report."""
    r = _run("doctor", "--quick", "--json", "--redfish", "https://admin:s3cret-Pw9@127.0.0.1:9",
             "--bmc-timeout", "1")
    assert r.returncode in (0, 1, 2), r.stderr
    assert "s3cret-Pw9" not in r.stdout + r.stderr
    assert "127.0.0.1:9" in r.stdout  # the BMC is still named in the "could not check" line
