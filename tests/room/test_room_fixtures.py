"""Every real public BMC/hwmon output under tests/fixtures/room parses, and is judged as its numbers say.

Most are healthy machines and must give no warning; the few that are not (a hot room, a failed PSU in
the SEL, fans reading 0 RPM) are listed with exactly what they should raise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from roomdata import ROOM_FIXTURES

from gpuclinic.diagnose import diagnose
from gpuclinic.sources.evidence import load_evidence

FILES = sorted(p for d in ("ipmi", "sensors", "redfish/vendors") for p in (ROOM_FIXTURES / d).iterdir())

# file -> the room findings (code, severity) it must raise; every other file must raise none but room.status
EXPECTED: dict[str, set[tuple[str, str]]] = {
    "dell-r510-sdr-type-temperature.txt": {("room.inlet_hot", "warning")},  # ambient 29 °C > ASHRAE's 27
    "hpe-dl360p-gen8-sensor.txt": {("room.inlet_hot", "warning")},  # 01-Inlet Ambient 32 °C > ~30 °C
    # (and "General Chassis Intrusion": a record that the lid was opened, information)
    "freeipmi-sel-psu-failure.txt": {
        ("room.sel.psu_failure", "critical"),
        ("room.sel.chassis_intrusion", "info"),
    },
    "openbmc-sensor-fans-sdr-errors.txt": {("room.fan_failed", "warning")},  # fan4-7 at 0 RPM, BMC says ok
    "cisco-ucsc-c240-m5sn-1-thermal.json": {("room.inlet_hot", "info")},
    "supermicro-sensor-list-cpu2-nr.txt": {("room.sensor_critical", "critical")},
    # PSU 1 "Failure detected" and "Power Supplies | Non-Redundant: Sufficient from Redundant"
    "hp-dl360-g7-ilo2-sdr-elist-full-psu-failed.txt": {
        ("room.psu_failed", "critical"),
        ("room.psu_redundancy", "warning"),
        # "Memory | 2Bh | ok | 7.7 | Correctable ECC, Correctable ECC logging limit reached": asserted now
        ("room.sel.memory_correctable", "warning"),
    },
    "hp-dl360-g7-ilo2-sel-list-ecc.txt": {("room.sel.memory_correctable", "warning")},
    "dell-r320-sdr-list-full-fans-0rpm.txt": {
        ("room.fan_failed", "critical"),
        ("room.inlet_hot", "warning"),
    },  # 32 °C
    "quanta-ipmi-sim-sel-elist-pcie-bus-fatal.txt": {("room.sel.pcie_fatal", "critical")},
    "ibm-systemx-imm-ipmimonitoring.txt": {
        ("room.inlet_hot", "info")
    },  # Ambient 26 °C: above the 25 °C guidance
    "hpe-dl360-gen9-ilo4-sdr-elist-one-psu.txt": {("room.psu_absent", "warning")},
    "supermicro-h14shm-sel-elist-psu-failure-ac-lost.txt": {
        ("room.sel.psu_failure", "critical"),
        ("room.sel.psu_input_lost", "critical"),
    },
    # DGX-1: two of four PSUs without AC, "Non-Redundant: Insufficient Resources"
    "nvidia-dgx1-sdr-type-power-supply-ac-lost.txt": {
        ("room.psu_input", "critical"),
        ("room.psu_redundancy", "critical"),
    },  # "PS 2 Presence: Device Absent"  # the BMC says nr for CPU2  # 26 °C: above the 25 °C room guidance
}

# what a person reading each file sees as the inlet/ambient sensor (None: the output has none)
INLET: dict[str, tuple[str, float] | None] = {
    "supermicro-sdr-list.txt": None,
    "dell-idrac-sdr-elist-all.txt": ("Ambient Temp", 19.0),
    "dell-r510-sdr-type-temperature.txt": ("Ambient Temp", 29.0),
    "hpe-dl360-gen10-sdr-elist.txt": ("01-Inlet Ambient", 19.0),
    "hpe-dl360p-gen8-sensor.txt": ("01-Inlet Ambient", 32.0),
    "ami-megarac-sensor.txt": ("MB_Inlet_TEMP", 21.0),
    "hpe-vserver-1-thermal.json": ("01-Inlet Ambient", 23.0),
    "dell-vserver-System_Embedded_1-thermal.json": ("System Board Inlet Temp", 18.0),
    "cisco-ucsc-c220-m5sx-1-thermal.json": (
        "TEMP_SENS_FRONT",
        24.0,
    ),  # not RISER2_INLET_TMP (54 °C, internal)
    "cisco-ucsc-c240-m4sx-1-thermal.json": ("FP_TEMP_SENSOR", 21.0),
    "hp-dl360-g7-ilo2-sdr-elist-full-psu-failed.txt": ("Temp 1", 20.0),  # entity 64.1: Air Inlet
    "dell-r320-sdr-list-full-fans-0rpm.txt": ("Inlet Temp", 32.0),
    "ibm-systemx-imm-ipmimonitoring.txt": ("Ambient Temp", 26.0),
    "asus-esc8000a-e12-sdr-elist.txt": ("Inlet Temp", 19.0),
    "fmadio-gigabyte-board-sdr.txt": ("INLET_AIR_TEMP", 24.0),
    "hpe-dl360-gen9-ilo4-sdr-elist-one-psu.txt": (
        "27-Front Ambient",
        20.0,
    ),  # not "11-PS 1 Inlet" (29 °C, in the PSU)
}


def test_enough_real_fixtures() -> None:
    assert len(FILES) >= 30
    sources = (ROOM_FIXTURES / "SOURCES.md").read_text()
    for f in FILES:
        rel = f.relative_to(ROOM_FIXTURES).as_posix()
        assert re.search(rf"\| {re.escape(rel)} \|.*https://", sources), f"{rel} has no source line"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fixture_parses_and_is_judged(path: Path) -> None:
    snap = load_evidence([str(path)])
    room = snap.room
    assert room is not None
    assert room.sensors or room.events or room.psus or room.chassis or room.power_consumed_w is not None
    rep = diagnose(snap)
    got = {
        (f.code, f.severity.label)
        for f in rep.findings
        if f.code.startswith("room.") and f.code != "room.status"
    }
    assert got == EXPECTED.get(path.name, set())
    assert any(f.code == "room.status" for f in rep.findings)
    if path.name in INLET:
        inl = room.temperatures("inlet")
        want = INLET[path.name]
        if want is None:
            assert inl == []
        else:
            hottest = max(inl, key=lambda s: s.reading or 0)
            assert (hottest.name, hottest.reading) == want


def test_gpu_server_power_and_chassis_outputs() -> None:
    """The ASUS ESC8000A-E12's `dcmi power reading` and `chassis status`: the draw and no power fault."""
    ipmi = ROOM_FIXTURES / "ipmi"
    power = load_evidence([str(ipmi / "asus-esc8000a-e12-dcmi-power-reading.txt")]).room
    assert power is not None and power.power_consumed_w == 2064.0
    chassis = load_evidence([str(ipmi / "asus-esc8000a-e12-chassis-status.txt")]).room
    assert chassis is not None and chassis.chassis.get("Main Power Fault") == "false"
    sdr = load_evidence([str(ipmi / "asus-esc8000a-e12-sdr-elist.txt")]).room
    assert sdr is not None
    assert sorted(f.name for f in sdr.fans()) == [
        *(f"GPU_FAN{i}" for i in range(1, 6)),
        *(f"SYS_FAN{i}" for i in range(1, 7)),
    ]


def test_a_redundancy_sensor_is_not_a_power_supply() -> None:
    """HP names its redundancy sensor "Power Supplies" on a PSU entity: it is a state, not a third PSU."""
    room = load_evidence(
        [str(ROOM_FIXTURES / "ipmi" / "hp-dl360-g7-ilo2-sdr-elist-full-psu-failed.txt")]
    ).room
    assert room is not None
    assert [(p.name, p.health) for p in room.psus] == [
        ("Power Supply 1", "critical"),
        ("Power Supply 2", "ok"),
    ]
    assert room.redundancy == {"Power Supplies": "Non-Redundant: Sufficient from Redundant"}


def test_redfish_power_documents_give_psus() -> None:
    for f in FILES:
        if f.name.endswith("-power.json") and "CMC" not in f.name and "Server1" not in f.name:
            room = load_evidence([str(f)]).room
            assert room is not None and room.psus, f.name
            assert all(p.health in ("ok", None) for p in room.psus), f.name


def test_a_saved_redfish_tree_is_read_as_one_room() -> None:
    """``doctor --from`` a directory of Redfish documents: old and new models, the newer PSU view wins."""
    snap = load_evidence([str(ROOM_FIXTURES / "redfish" / "public-rackmount1")])
    assert snap.room is not None
    assert sorted(p.name for p in snap.room.psus) == ["Power Supply Bay 1", "Power Supply Bay 2"]
    got = {(f.code, f.severity.label) for f in diagnose(snap).findings if f.code.startswith("room.")}
    assert got == {
        ("room.status", "info"),
        ("room.psu_absent", "warning"),
        ("room.psu_failed", "warning"),
        ("room.sel.temperature_critical", "critical"),
        # LogEntry 1 "System May be Melting", Severity Critical: no class knows its words, the BMC's
        # rating stands
        ("room.sel.bmc_critical", "warning"),
    }
