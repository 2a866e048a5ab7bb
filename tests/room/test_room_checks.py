"""Room checks on facts read from saved outputs: correlation with GPU facts, thresholds from the
data files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuclinic.checks import run_checks
from gpuclinic.diagnose import diagnose
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.room import PowerSupply, RoomFacts, RoomSensor
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.room import room_threshold
from gpuclinic.model import Finding
from gpuclinic.sources.bmc import ipmitool
from gpuclinic.sources.evidence import load_evidence

XID79 = (
    "[Mon Nov 30 14:03:12 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
    "GPU has fallen off the bus.\n"
)
SEL_DELL_PCIE = (
    "   7 | 11/30/2026 | 14:03:11 | Critical Interrupt PCIE Fatal Err | Bus Fatal Error | Asserted"
    " | A fatal error was detected on a component at bus 59 device 0 function 0.\n"
)


def _codes(snap: Snapshot) -> dict[str, Finding]:
    return {f.code: f for f in diagnose(snap).findings}


def test_sel_pcie_fatal_and_xid79_on_the_same_slot_is_one_fault(tmp_path: Path) -> None:
    (tmp_path / "dmesg.txt").write_text(XID79)
    (tmp_path / "sel.txt").write_text(SEL_DELL_PCIE)
    snap = load_evidence([str(tmp_path / "dmesg.txt"), str(tmp_path / "sel.txt")])
    f = _codes(snap)["room.sel.pcie_fatal"]
    assert f.severity.label == "critical"
    assert "XID 79" in f.title and "one slot fault" in f.title
    assert f.gpu is not None and f.gpu.pci_bus_id == "0000:3b:00.0"
    assert f.data["symptoms"] == ["xid.79"]
    assert any("same bus as the SEL entry" in e for e in f.evidence)
    assert "riser" in f.remedy


def test_sel_pcie_fatal_on_another_bus_is_not_joined_to_the_xid(tmp_path: Path) -> None:
    (tmp_path / "dmesg.txt").write_text(XID79)
    (tmp_path / "sel.txt").write_text(SEL_DELL_PCIE.replace("bus 59", "bus 134"))
    f = _codes(load_evidence([str(tmp_path / "dmesg.txt"), str(tmp_path / "sel.txt")]))["room.sel.pcie_fatal"]
    assert f.gpu is None and "XID 79" not in f.title


def _gpu(i: int, temp: float, util: float = 95, throttle: bool = False) -> GpuFacts:
    return GpuFacts(
        index=i,
        uuid=f"GPU-{i}",
        pci_bus_id=f"0000:{0x18 + i:02x}:00.0",
        temperature_c=temp,
        slowdown_temp_c=90,
        utilization_gpu_pct=util,
        power_draw_w=650,
        clock_event_reasons=["hw_thermal_slowdown"] if throttle else [],
    )


def _room(inlet: float, **kw: Any) -> RoomFacts:
    r = RoomFacts(
        sensors=[
            RoomSensor(
                name="Inlet Temp",
                kind="temperature",
                reading=inlet,
                unit="C",
                status="ok",
                role="inlet",
                source="test",
            )
        ],
        **kw,
    )
    return r


def test_inlet_31c_with_four_gpus_throttling_is_one_critical_finding_naming_them() -> None:
    snap = Snapshot(
        gpus=[_gpu(i, 91, throttle=True) for i in range(4)] + [_gpu(4 + i, 70) for i in range(4)],
        room=_room(31),
    )
    f = _codes(snap)["room.inlet_hot"]
    assert f.severity.label == "critical"
    assert "4 GPU(s) are cutting clocks" in f.title
    assert f.data["gpus_throttling"] == [0, 1, 2, 3] and f.data["symptoms"] == ["thermal.throttle"]


def test_inlet_ranges_from_the_data_file() -> None:
    rec = room_threshold("ashrae_recommended_max_c")
    assert rec == 27
    assert "room.inlet_hot" not in _codes(Snapshot(room=_room(24)))
    assert _codes(Snapshot(room=_room(26)))["room.inlet_hot"].severity.label == "info"
    assert _codes(Snapshot(room=_room(28)))["room.inlet_hot"].severity.label == "warning"
    assert _codes(Snapshot(room=_room(33)))["room.inlet_hot"].severity.label == "critical"
    assert _codes(Snapshot(room=_room(12)))["room.inlet_cold"].severity.label == "warning"


def test_one_gpu_much_hotter_than_its_peers() -> None:
    snap = Snapshot(gpus=[_gpu(0, 84)] + [_gpu(i, 66 + i) for i in range(1, 8)])
    f = _codes(snap)["room.gpu_hotter_than_peers"]
    assert f.gpu is not None and f.gpu.index == 0 and f.severity.label == "warning"
    idle_peer = Snapshot(gpus=[_gpu(0, 84)] + [_gpu(i, 40, util=0) for i in range(1, 8)])
    assert "room.gpu_hotter_than_peers" not in _codes(idle_peer)  # different load: no comparison


def test_fans_at_max_while_gpus_hot() -> None:
    fans = [
        RoomSensor(name=f"Fan{i}", kind="fan", reading=97, unit="%", status="ok", source="t")
        for i in range(6)
    ]
    room = _room(24)
    room.sensors += fans
    f = _codes(Snapshot(gpus=[_gpu(i, 86) for i in range(4)], room=room))["room.fans_max"]
    assert "6 of 6" in f.title
    assert "room.fans_max" not in _codes(Snapshot(gpus=[_gpu(i, 60) for i in range(4)], room=room))


def test_gpu_power_against_psu_capacity() -> None:
    psus = [
        PowerSupply(name=f"PS{i}", present=True, health="ok", capacity_w=2000, source="t") for i in range(4)
    ]
    gpus = [_gpu(i, 70) for i in range(8)]  # 8 x 650 W = 5200 W
    snap = Snapshot(gpus=gpus, room=RoomFacts(psus=psus))
    f = _codes(snap)["room.power_capacity"]
    assert f.severity.label == "warning" and "redundancy would not carry" in f.title
    psus[0].failed = True
    psus[1].failed = True
    f = _codes(Snapshot(gpus=gpus, room=RoomFacts(psus=psus)))["room.power_capacity"]
    assert f.severity.label == "critical"


def test_psu_input_voltage_and_ac_lost() -> None:
    psus = [
        PowerSupply(name="PSU1", present=True, health="ok", input_voltage=0, source="t"),
        PowerSupply(name="PSU2", present=True, health="ok", input_voltage=161, source="t"),
        PowerSupply(name="PSU3", present=True, health="ok", input_voltage=231, source="t"),
    ]
    fs, _ = run_checks(Snapshot(room=RoomFacts(psus=psus)), only=["room.psu"])
    assert {(f.data["psu"], f.severity.label) for f in fs} == {("PSU1", "critical"), ("PSU2", "warning")}
    # the report folds them into one node-wide finding, worst first, keeping the other's evidence
    (f,) = [f for f in diagnose(Snapshot(room=RoomFacts(psus=psus))).findings if f.code == "room.psu_input"]
    assert f.severity.label == "critical" and any("161 V" in e for e in f.evidence)


def test_chassis_fru_dcmi_parsers() -> None:
    chassis = (
        "System Power         : on\nPower Overload       : false\nMain Power Fault     : false\n"
        "Power Control Fault  : false\nCooling/Fan Fault    : true\nDrive Fault          : false\n"
    )
    room = ipmitool.parse_any(chassis)
    assert room.chassis["Cooling/Fan Fault"] == "true"
    f = _codes(Snapshot(room=room))["room.fan_failed"]
    assert "cooling/fan fault" in f.title.lower()
    dcmi = (
        "\n    Instantaneous power reading:                   268 Watts\n"
        "    Minimum during sampling period:                 46 Watts\n"
        "    Power reading state is:                   activated\n"
    )
    assert ipmitool.parse_any(dcmi).power_consumed_w == 268
    assert ipmitool.parse_dcmi(dcmi.replace("activated", "deactivated")).power_consumed_w is None
    fru = (
        "FRU Device Description : Builtin FRU Device (ID 0)\n Board Mfg             : Dell Inc.\n"
        " Board Product         : PowerEdge R750xa\n Product Manufacturer  : DELL\n"
    )
    assert ipmitool.parse_any(fru).fru["Board Product"] == "PowerEdge R750xa"


def test_snapshot_round_trip_keeps_room_facts() -> None:
    snap = load_evidence([str(Path(__file__).parents[1] / "fixtures/room/ipmi/hpe-dl360p-gen8-sensor.txt")])
    again = Snapshot.from_dict(snap.to_dict())
    assert again.room == snap.room


def test_half_the_gpus_hot_is_not_a_heatsink_fault() -> None:
    snap = Snapshot(gpus=[_gpu(i, 91) for i in range(4)] + [_gpu(4 + i, 70) for i in range(4)])
    assert "room.gpu_hotter_than_peers" not in _codes(snap)


def test_psu_conventions_generic_digital_and_dell_status_by_entity() -> None:
    # the two IPMI PSU conventions: a digital sensor per fault (Lenovo-style names) and Dell's "Status" per
    # entity
    lenovo_style = (
        "PSU1 IN Failure  | 8Ch | ok  | 10.1 | State Asserted\n"
        "PSU2 IN Failure  | 8Dh | ok  | 10.2 | State Deasserted\n"
        "Fan 2 Fault      | 91h | ok  | 29.2 | State Asserted\n"
    )
    room = ipmitool.parse_sdr(lenovo_style)
    psus = {p.name: p for p in room.psus}
    assert psus["PSU1 IN Failure"].input_lost and psus["PSU1 IN Failure"].health == "critical"
    assert psus["PSU2 IN Failure"].health == "ok"
    got = {f.code for f in diagnose(Snapshot(room=room)).findings}
    assert {"room.psu_input", "room.fan_failed"} <= got
    dell = (
        "Status           | 62h | ok  | 10.1 | Presence detected\n"
        "Status           | 63h | ok  | 10.2 | Presence detected, Failure detected\n"
        "Pwr Consumption  | 77h | ok  |  7.1 | 182 Watts\n"
    )
    room = ipmitool.parse_sdr(dell)
    assert {p.name: p.health for p in room.psus} == {"Status 10.1": "ok", "Status 10.2": "critical"}
    assert room.power_consumed_w == 182


def _temp(name: str, reading: float, thresholds: dict[str, float], source: str) -> RoomSensor:
    """A temperature sensor reading ``ok`` by its own status, with the thresholds its tool printed."""
    return RoomSensor(name=name, kind="temperature", reading=reading, unit="C", status="ok",
                      thresholds=thresholds, source=source)


def test_unset_and_sentinel_thresholds_are_not_alarms() -> None:
    # HPE iLO prints UpperThresholdCritical 0 for PSU temperatures; drivetemp prints crit 0; ITE chips 127 °C
    # lows
    sensors = [
        _temp("10-P/S 1", 45, {"ucr": 0, "unr": 0}, "redfish"),
        _temp("temp1", 41, {"unc": 0, "ucr": 0, "lcr": 0}, "hwmon"),
        _temp("System1", 30, {"lnc": 127, "unc": 127}, "sensors"),
        _temp("CPU1 Temp", 101, {"unc": 95, "ucr": 100}, "ipmitool sensor"),
    ]
    fs = [
        f
        for f in diagnose(Snapshot(room=RoomFacts(sensors=sensors))).findings
        if f.code == "room.sensor_critical"
    ]
    assert [f.data["sensor"] for f in fs] == ["CPU1 Temp"]


def test_hpe_ilo4_thermal_current_reading_and_units() -> None:
    # iLO 4 fans carry CurrentReading + "Units": "Percent" (shape as in influxdata/telegraf
    # plugins/inputs/redfish/testdata/hp/hp_thermal_ilo4.json)
    from gpuclinic.sources.bmc.redfish import parse_doc

    doc = {
        "@odata.type": "#Thermal.v1_1_0.Thermal",
        "Fans": [
            {
                "CurrentReading": 17,
                "FanName": "Fan 1",
                "Units": "Percent",
                "Status": {"Health": "OK", "State": "Enabled"},
            }
        ],
        "Temperatures": [
            {
                "Name": "01-Inlet Ambient",
                "PhysicalContext": "Intake",
                "CurrentReading": 19,
                "Units": "Celsius",
                "UpperThresholdCritical": 42,
                "Status": {"Health": "OK"},
            }
        ],
    }
    room = parse_doc(doc)
    assert [(f.name, f.reading, f.unit) for f in room.fans()] == [("Fan 1", 17.0, "%")]
    assert [(t.name, t.reading) for t in room.temperatures("inlet")] == [("01-Inlet Ambient", 19.0)]


def test_dell_psu_line_voltage_sensors_feed_the_input_check() -> None:
    sdr = (
        "Status           | 62h | ok  | 10.1 | Presence detected\n"
        "Status           | 63h | ok  | 10.2 | Presence detected\n"
        "Voltage 1        | 6Ch | ok  | 10.1 | 232 Volts\n"
        "Voltage 2        | 6Dh | ok  | 10.2 | 0 Volts\n"
        "Current 1        | 6Ah | ok  | 10.1 | 1.20 Amps\n"
    )
    room = ipmitool.parse_sdr(sdr)
    assert {p.name: p.input_voltage for p in room.psus} == {"Status 10.1": 232.0, "Status 10.2": 0.0}
    lost = _codes(Snapshot(room=room))["room.psu_input"]
    assert lost.severity.label == "critical" and "Status 10.2" in lost.title
    sdr2 = sdr.replace("0 Volts", "161 Volts")
    f = _codes(Snapshot(room=ipmitool.parse_sdr(sdr2)))["room.psu_input"]
    assert "161 V" in f.title and f.severity.label == "warning"


def test_ipmitool_verbose_blocks() -> None:
    # `ipmitool sensor get` / `sdr -v` blocks; the discrete one as quoted in ipmitool/ipmitool#176
    text = (
        "Locating sensor record...\n"
        "Sensor ID              : Inlet Temp (0x4)\n"
        " Entity ID             : 7.1 (System Board)\n"
        " Sensor Type (Threshold)  : Temperature (0x01)\n"
        " Sensor Reading        : 44 (+/- 1) degrees C\n"
        " Status                : Upper Critical\n"
        " Lower Non-Recoverable : na\n"
        " Upper Non-Critical    : 38.000\n"
        " Upper Critical        : 42.000\n"
        "\n"
        "Sensor ID              : Pwr Unit Redund (0x2)\n"
        " Entity ID             : 21.1 (Power Management)\n"
        " Sensor Type (Discrete): Power Unit (0x09)\n"
        " Sensor Reading        : 0h\n"
        " States Asserted       : Power Unit\n"
        "                         [Redundancy Lost]\n"
    )
    room = ipmitool.parse_any(text)
    inlet = room.temperatures("inlet")[0]
    assert (inlet.reading, inlet.level, inlet.thresholds) == (44.0, "critical", {"unc": 38.0, "ucr": 42.0})
    assert room.redundancy == {"Pwr Unit Redund": "Redundancy Lost"}
    got = {(f.code, f.severity.label) for f in diagnose(Snapshot(room=room)).findings}
    assert {("room.inlet_hot", "critical"), ("room.psu_redundancy", "warning")} <= got
