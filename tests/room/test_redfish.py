"""Redfish over HTTPS on loopback, serving the DMTF public-rackmount1 mockup (tests/fixtures/room/redfish)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redfish_server import make_cert, serving
from roomdata import ROOM_FIXTURES

from gpuclinic.diagnose import diagnose
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.bmc import read_room
from gpuclinic.sources.bmc.live import BmcOptions
from realtools import require

MOCKUP = ROOM_FIXTURES / "redfish" / "public-rackmount1"
USER, PASSWORD = "root", "Rf-pw-never-shown-91z"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    d = tmp_path / "mockup"
    shutil.copytree(MOCKUP, d)
    return d


@pytest.fixture
def tls(tmp_path: Path) -> tuple[Path, Path]:
    pair: tuple[Path, Path] = make_cert(require("openssl")["openssl"], tmp_path)
    return pair


@pytest.fixture
def service(tree: Path, tls: tuple[Path, Path]) -> Iterator[tuple[str, list[str]]]:
    with serving(tree, USER, PASSWORD, *tls) as s:
        yield s


def _edit(tree: Path, rel: str, **changes: Any) -> None:
    f = tree / rel / "index.json"
    doc = json.loads(f.read_text())
    doc.update(changes)
    f.write_text(json.dumps(doc))


def _read(url: str, ca: Path, password: str = PASSWORD) -> Snapshot:
    snap = Snapshot(taken_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    room = read_room(
        BmcOptions(
            redfish=url,
            redfish_user=USER,
            redfish_password=password,
            redfish_verify=ssl.create_default_context(cafile=str(ca)),
            in_band=False,
            hwmon=False,
            timeout_s=5,
        ),
        snap,
    )
    if room.sensors or room.psus or room.events_read:
        snap.room = room
    return snap


def test_mockup_as_published(service: tuple[str, list[str]], tls: tuple[Path, Path]) -> None:
    url, log = service
    snap = _read(url, tls[0])
    room = snap.room
    assert room is not None and room.bmc == url
    # ThermalSubsystem (the new model) is read first: its ThermalMetrics has the intake summary
    assert {s.name: s.reading for s in room.temperatures("inlet")} == {
        "Intake temperature": 24.8,
        "Ambient temperature": 22.5,
        "Intake": 24.8,
    }
    assert {f.name: (f.reading, f.unit) for f in room.fans()} == {
        "Fan Bay 1": (2200.0, "RPM"),
        "Fan Bay 2": (2400.0, "RPM"),
        "Fan for CPU 1": (45.0, "%"),
        "Fan for CPU 2": (1490.0, "RPM"),
    }
    psus = {p.name: p for p in room.psus}
    assert (
        psus["Power Supply Bay 1"].health == "warning" and psus["Power Supply Bay 1"].input_voltage == 230.2
    )
    assert psus["Power Supply Bay 2"].present is False
    assert room.events_read and len(room.events) == 3  # BMC log (1) + system SEL (2)
    assert all(line.split()[0] == "GET" for line in log if line[:1].isalpha())
    rep = diagnose(snap)
    codes = {(f.code, f.severity.label) for f in rep.findings}
    # what the mockup itself says: PSU 1 degraded, bay 2 empty, the 2012 SEL entries are history
    assert ("room.psu_failed", "warning") in codes and ("room.psu_absent", "warning") in codes
    assert ("room.sel.temperature_critical", "info") in codes
    assert not any(c.startswith(("room.inlet", "room.fan")) for c, _ in codes)


def test_fault_edited_in(tree: Path, service: tuple[str, list[str]], tls: tuple[Path, Path]) -> None:
    url, _ = service
    _edit(
        tree,
        "Chassis/1U/ThermalSubsystem/Fans/Bay1",
        Status={"State": "Enabled", "Health": "Critical"},
        SpeedPercent={"Reading": 0, "SpeedRPM": 0},
    )
    tm = json.loads((tree / "Chassis/1U/ThermalSubsystem/ThermalMetrics/index.json").read_text())
    tm["TemperatureSummaryCelsius"]["Intake"]["Reading"] = 33.5
    tm["TemperatureReadingsCelsius"][0]["Reading"] = 33.5
    (tree / "Chassis/1U/ThermalSubsystem/ThermalMetrics/index.json").write_text(json.dumps(tm))
    _edit(
        tree,
        "Chassis/1U/PowerSubsystem/PowerSupplies/Bay1",
        LineInputStatus="LossOfInput",
        Status={"State": "Enabled", "Health": "Critical"},
    )
    rep = diagnose(_read(url, tls[0]))
    got = {(f.code, f.severity.label): f for f in rep.findings}
    assert ("room.fan_failed", "critical") in got and "Fan Bay 1" in got[
        ("room.fan_failed", "critical")
    ].title
    assert ("room.inlet_hot", "critical") in got  # 33.5 °C: above ASHRAE A1's allowable 32 °C
    assert ("room.psu_input", "critical") in got
    assert rep.exit_code == 2


def test_gpu_the_bmc_rates_critical(
    tree: Path, service: tuple[str, list[str]], tls: tuple[Path, Path]
) -> None:
    """The walk reads each system's processors: an HGX baseboard's BMC reports a failing GPU as a Processor of
    type GPU with Health Critical (the mockup's CPU1 edited into one); the published mockup's processors (CPU1
    OK, CPU2 absent, FPGA1 OK) give no such finding."""
    url, log = service
    rep = diagnose(_read(url, tls[0]))
    assert not [f for f in rep.findings if f.code in ("room.gpu_unhealthy", "room.component_unhealthy")]
    assert any("/Processors/FPGA1 " in line for line in log)
    _edit(
        tree,
        "Systems/437XR1138R2/Processors/CPU1",
        ProcessorType="GPU",
        Id="GPU_SXM_1",
        Status={
            "State": "Enabled",
            "Health": "Critical",
            "Conditions": [{"Severity": "Critical", "Message": "GPU SXM 1 over-temperature shutdown"}],
        },
    )
    got = {f.code: f for f in diagnose(_read(url, tls[0])).findings}
    f = got["room.gpu_unhealthy"]
    assert f.severity.label == "critical" and f.title == "The BMC rates GPU_SXM_1 Critical"
    assert "Critical: GPU SXM 1 over-temperature shutdown" in f.evidence


def test_wrong_password_and_bad_certificate_are_could_not_check_lines(
    service: tuple[str, list[str]], tls: tuple[Path, Path]
) -> None:
    url, _ = service
    snap = _read(url, tls[0], password="wrong-" + PASSWORD)
    assert snap.room is None
    assert any("401" in s.why for s in snap.skipped) and not any(PASSWORD in s.why for s in snap.skipped)
    snap = Snapshot()
    room = read_room(
        BmcOptions(
            redfish=url, redfish_user=USER, redfish_password=PASSWORD, in_band=False, hwmon=False, timeout_s=5
        ),
        snap,
    )  # default verification: the self-signed certificate is refused
    assert not room.sensors and any(
        "Redfish" in s.what and "--redfish-insecure" in s.why for s in snap.skipped
    )


def test_doctor_cli_redfish_never_shows_the_password(
    service: tuple[str, list[str]], tls: tuple[Path, Path]
) -> None:
    url, _ = service
    args = [
        sys.executable,
        "-m",
        "gpuclinic",
        "doctor",
        "--quick",
        "--redfish",
        url,
        "--bmc-user",
        USER,
        "--redfish-ca",
        str(tls[0]),
    ]
    env = {**os.environ, "REDFISH_PASSWORD": PASSWORD, "IPMI_PASSWORD": ""}
    for extra in ([], ["--json"], ["--markdown"]):
        r = subprocess.run(args + extra, capture_output=True, text=True, timeout=120, env=env, check=False)
        assert PASSWORD not in r.stdout + r.stderr
        assert r.returncode == 1, r.stdout + r.stderr  # warnings from the mockup's own PSU state
        if extra == ["--json"]:
            rep = json.loads(r.stdout)
            assert rep["facts"]["room"]["bmc"] == url
            assert any(f["code"] == "room.status" for f in rep["findings"])


@pytest.mark.parametrize(
    ("tree_name", "inlet", "psus"),
    [
        ("idrac-r650", ("System Board Inlet Temp", 18.0), 2),  # Dell iDRAC 5.10: Chassis/System.Embedded.1
        ("ilo-hpe", ("01-Inlet Ambient", 23.0), 2),  # HPE iLO: Chassis/1, OEM-heavy Thermal
    ],
)
def test_real_vendor_trees_over_https(
    tree_name: str, inlet: tuple[str, float], psus: int, tmp_path: Path, tls: tuple[Path, Path]
) -> None:
    with serving(ROOM_FIXTURES / "redfish" / tree_name, USER, PASSWORD, *tls) as (url, log):
        snap = _read(url, tls[0])
    room = snap.room
    assert room is not None
    hottest = max(room.temperatures("inlet"), key=lambda s: s.reading or 0)
    assert (hottest.name, hottest.reading) == inlet
    assert len(room.psus) == psus and all(p.health == "ok" for p in room.psus)
    assert room.fans() and all(f.reading for f in room.fans() if not f.absent)
    rep = diagnose(snap)
    assert not [f for f in rep.findings if f.code.startswith("room.") and f.severity.label != "info"]


def test_log_collections_of_links_only_are_followed(
    tree: Path, service: tuple[str, list[str]], tls: tuple[Path, Path]
) -> None:
    """Some BMCs list log entries as links only: the reader fetches the newest ones one by one."""
    url, log = service
    f = tree / "Systems/437XR1138R2/LogServices/Log1/Entries/index.json"
    doc = json.loads(f.read_text())
    doc["Members"] = [{"@odata.id": m["@odata.id"]} for m in doc["Members"]]
    f.write_text(json.dumps(doc))
    room = _read(url, tls[0]).room
    assert room is not None
    assert sorted(e.id for e in room.events if e.source == "redfish Log1") == ["1", "2"]
    assert any("/LogServices/Log1/Entries/2" in line for line in log)


def _sensors_only(tree: Path) -> None:
    """The variant: a BMC that publishes temperatures and fans only as Sensor resources (no Thermal, no
    ThermalSubsystem); the chassis's other links and every Sensor document stay as DMTF published them."""
    f = tree / "Chassis/1U/index.json"
    doc = json.loads(f.read_text())
    for key in ("Thermal", "Thermal@Redfish.Deprecated", "ThermalSubsystem"):
        doc.pop(key, None)
    f.write_text(json.dumps(doc))
    shutil.rmtree(tree / "Chassis/1U/Thermal")
    shutil.rmtree(tree / "Chassis/1U/ThermalSubsystem")


def test_sensors_collection_is_walked_when_it_is_all_there_is(
    tree: Path, service: tuple[str, list[str]], tls: tuple[Path, Path]
) -> None:
    url, log = service
    _sensors_only(tree)
    room = _read(url, tls[0]).room
    assert room is not None
    assert any("/Chassis/1U/Sensors/IntakeTemp" in line for line in log)
    inlet = {s.name: s.reading for s in room.temperatures("inlet")}
    assert inlet.get("Front Panel Intake Temperature") == 24.8, inlet
    fans = {f.name: (f.reading, f.unit) for f in room.fans()}
    assert fans["CPU #1 Fan Speed"] == (80.0, "%") and len(fans) == 4, fans
    codes = {f.code for f in diagnose(_read(url, tls[0])).findings}
    assert not any(c.startswith(("room.inlet", "room.fan")) for c in codes)
    # a fault edited into the Sensor documents: a stopped fan and hot intake air
    _edit(tree, "Chassis/1U/Sensors/CPUFan1", Reading=0, Status={"State": "Enabled", "Health": "Critical"})
    _edit(tree, "Chassis/1U/Sensors/IntakeTemp", Reading=33.5)
    got = {(f.code, f.severity.label): f for f in diagnose(_read(url, tls[0])).findings}
    assert ("room.fan_failed", "critical") in got and "CPU #1 Fan" in got[
        ("room.fan_failed", "critical")
    ].title
    assert ("room.inlet_hot", "critical") in got  # 33.5 °C: above ASHRAE A1's allowable 32 °C


def test_sensors_are_not_read_twice_when_thermal_has_them(
    service: tuple[str, list[str]], tls: tuple[Path, Path]
) -> None:
    """The published mockup has ThermalSubsystem temperatures and fans: its Sensors collection is
    not walked."""
    url, log = service
    room = _read(url, tls[0]).room
    assert room is not None and room.fans()
    assert any("/Chassis/1U/ThermalSubsystem" in line for line in log)
    assert not any("/Chassis/1U/Sensors" in line for line in log)
