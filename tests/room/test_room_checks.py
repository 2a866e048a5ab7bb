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


def _room_codes(text: str) -> dict[str, Finding]:
    snap = Snapshot(room=ipmitool.parse_any(text))
    return {f.code: f for f in run_checks(snap)[0]}


def test_discrete_sensor_asserting_a_fault_now_is_read_like_its_sel_record() -> None:
    # HPE iLO: the sdr status stays "ok" while the Memory sensor asserts its correctable-ECC states
    text = (
        "Memory           | 2Bh | ok  |  7.7 | Correctable ECC, Correctable ECC logging limit reached, "
        "Presence Detected\n"
        "CPU0 IERR        | 12h | ok  |  3.1 | State Deasserted\n"
        "MEM CPU1 FAIL    | 1Eh | ok  |  7.1 | State Deasserted\n"
        "Fan Block 1      | 09h | ok  |  7.1 | 21.56 percent, Transition to Running\n"
    )
    found = _room_codes(text)
    f = found["room.sel.memory_correctable"]
    assert f.severity.label == "warning"
    assert f.title.startswith("BMC sensor state:") and "asserted now" in f.title
    assert f.evidence == ["Memory asserts Correctable ECC, Correctable ECC logging limit reached — "
                          "ipmitool sdr elist (sensor state now)"]
    # a fault sensor that is deasserted is no event
    assert "room.sel.cpu_ierr" not in found and "room.sel.memory_uncorrectable" not in found
    asserted = _room_codes(text.replace("CPU0 IERR        | 12h | ok  |  3.1 | State Deasserted",
                                        "CPU0 IERR        | 12h | cr  |  3.1 | State Asserted"))
    assert asserted["room.sel.cpu_ierr"].severity.label == "critical"


def test_fan_at_its_upper_threshold_is_a_fast_fan_not_a_failed_one() -> None:
    row = ("BPN-FAN2         | 13300.000  | RPM        | nc    | 500.000   | 400.000   | 300.000   "
           "| 13300.000 | 13400.000 | 13500.000 \n")
    assert "room.fan_failed" not in _room_codes(row)
    slow = row.replace("13300.000  | RPM        | nc", "250.000    | RPM        | nc")
    assert _room_codes(slow)["room.fan_failed"].severity.label == "critical"  # below lcr 400


# FreeIPMI ipmimonitoring with --comma-separated-output, as recorded in NUT's nut-libfreeipmi.c
IPMIMONITORING_CSV = (
    "Record ID, Sensor Name, Sensor Number, Sensor Type, Sensor State, Sensor Reading, Sensor Units, "
    "Sensor Event/Reading Type Code, Sensor Event Bitmask, Sensor Event String\n"
    "52, Presence, 84, Entity Presence, Nominal, N/A, N/A, 6Fh, 1h, 'Entity Present'\n"
    "57, Status, 100, Power Supply, Critical, N/A, N/A, 6Fh, 9h, 'Presence detected' "
    "'Power Supply input lost (AC/DC)'\n"
    "118, Voltage, 150, Voltage, Nominal, 236.00, V, 1h, C0h, 'OK'\n"
)


def test_freeipmi_comma_separated_output_is_read_by_its_header(tmp_path: Path) -> None:
    from gpuclinic.sources.bmc import formats

    assert formats.detect(IPMIMONITORING_CSV) == "room:freeipmi_sensors"
    f = _room_codes_from(formats.parse("room:freeipmi_sensors", IPMIMONITORING_CSV))["room.psu_input"]
    assert f.severity.label == "critical" and "Power Supply input lost (AC/DC)" in f.evidence[0]
    (tmp_path / "psu.txt").write_text(IPMIMONITORING_CSV)
    assert "room.psu_input" in _codes(load_evidence([str(tmp_path / "psu.txt")]))
    # ipmi-sensors --comma-separated-output --no-header-output: the default six columns
    rows = ("70,PWR_PSU0,Power Supply,0.00,W,'At or Below (<=) Lower Critical Threshold'\n"
            "93,STATUS_PSU0,Power Supply,N/A,N/A,'Presence detected' 'Power Supply Failure detected'\n")
    assert formats.detect(rows) == "room:freeipmi_sensors"
    assert "room.psu_failed" in _room_codes_from(formats.parse("room:freeipmi_sensors", rows))
    # the default pipe table pasted without its header row (canonical/hardware-observer-operator#449)
    pipe = ("280 | PSU 1            | Power Supply    | N/A        | N/A   | 'Presence detected'\n"
            "281 | PSU 1 Failure    | Power Supply    | N/A        | N/A   | 'transition to OK'\n"
            "285 | PSU 1 AC In Pwr  | Current         | N/A        | W     | N/A\n")
    assert formats.detect(pipe) == "room:freeipmi_sensors"
    assert [p.health for p in formats.parse("room:freeipmi_sensors", pipe).psus] == ["ok", "ok"]


def _room_codes_from(room: RoomFacts) -> dict[str, Finding]:
    return {f.code: f for f in run_checks(Snapshot(room=room))[0]}


def test_freeipmi_0x_ipmimonitoring_and_ipmi_sensors_formats() -> None:
    # netkiller's Linux handbook, a Dell with iDRAC6: the same PSU in both old FreeIPMI layouts
    from gpuclinic.sources.bmc import formats

    monitoring = (
        "Record_ID | Sensor Name | Sensor Group | Monitoring Status| Sensor Units | Sensor Reading\n"
        "7 | Ambient Temp | Temperature | Nominal | C | 27.000000\n"
        "38 | FAN MOD 1A RPM | Fan | Nominal | RPM | 5040.000000\n"
        "58 | Status | Power Supply | Critical | N/A | 'Presence detected' "
        "'Power Supply input lost (AC/DC)'\n"
    )
    old = (
        "7: Ambient Temp (Temperature): 27.00 C (3.00/47.00): [OK]\n"
        "38: FAN MOD 1A RPM (Fan): 5040.00 RPM (1920.00/NA): [OK]\n"
        "57: Status (Power Supply): [Presence detected]\n"
        "58: Status (Power Supply): [Presence detected][Power Supply input lost (AC/DC)]\n"
        "79: ECC Corr Err (Memory): [Unknown]\n"
    )
    for text, kind in ((monitoring, "room:freeipmi_sensors"), (old, "room:freeipmi_sensors_old")):
        assert formats.detect(text) == kind
        room = formats.parse(kind, text)
        fan = next(s for s in room.sensors if s.name == "FAN MOD 1A RPM")
        assert fan.reading == 5040 and fan.unit == "RPM" and fan.level == "ok"
        found = _room_codes_from(room)
        assert found["room.psu_input"].severity.label == "critical"
        assert "room.fan_failed" not in found and "room.sensor_critical" not in found
    sensors = formats.parse("room:freeipmi_sensors_old", old).sensors
    amb = next(s for s in sensors if s.name == "Ambient Temp")
    assert amb.reading == 27 and amb.thresholds == {"lcr": 3.0, "ucr": 47.0}


def test_hpe_presence_rows_are_device_presence_not_psu_status() -> None:
    # HPE DL360 Gen9 'ipmitool sensor': 0x0280 = Device Present, 0x0180 = Device Absent (generic type 08h);
    # read as PSU status offsets they said "Failure detected" for the one installed PSU
    rows = (
        "Power Supply 1   | 225        | Watts      | ok    | na        | na        | na        | na        "
        "| na        | na        \n"
        "PS 1 Presence    | 0x2        | discrete   | 0x0280| na        | na        | na        | na        "
        "| na        | na        \n"
        "PS 2 Presence    | 0x1        | discrete   | 0x0180| na        | na        | na        | na        "
        "| na        | na        \n"
    )
    found = _room_codes(rows)
    assert "room.psu_failed" not in found
    assert found["room.psu_absent"].title == "Power supply PS 2 Presence is absent"
    room = ipmitool.parse_any(rows)
    assert [(p.name, p.health, p.present) for p in room.psus] == [
        ("PS 1 Presence", "ok", None), ("PS 2 Presence", None, False)]


def test_one_thermal_or_power_member_pasted_alone_is_read() -> None:
    from gpuclinic.sources.bmc import formats

    # Comcast/fishymetrics#176: one Temperatures member, typed only by the fragment of its @odata.id
    temp = ('{"MemberId": "11", "Status": {"State": "Enabled", "Health": "OK"}, "Name": "PSU1_TEMP",\n'
            ' "@odata.id": "/redfish/v1/Chassis/1/Thermal#/Temperatures/11",\n'
            ' "PhysicalContext": "PowerSupply", "ReadingCelsius": 29, "UpperThresholdCritical": 55}')
    assert formats.detect(temp) == "room:redfish"
    (s,) = formats.parse("room:redfish", temp).sensors
    assert (s.name, s.reading, s.thresholds) == ("PSU1_TEMP", 29, {"ucr": 55})
    # an iDRAC fan member as check_redfish -v prints it: typed "#Thermal.v1_4_0.Fan"
    fan = ('{"@odata.id": "/redfish/v1/Chassis/System.Embedded.1/Sensors/Fans/0x17%7C%7CFan.Embedded.3A",\n'
           ' "@odata.type": "#Thermal.v1_4_0.Fan", "FanName": "System Board Fan3A",\n'
           ' "LowerThresholdCritical": 720, "Name": "System Board Fan3A", "Reading": 0,\n'
           ' "ReadingUnits": "RPM", "Status": {"Health": "Critical", "State": "Enabled"}}')
    found = _room_codes_from(formats.parse("room:redfish", fan))
    assert found["room.fan_failed"].severity.label == "critical"


def test_sel_info_of_a_full_log_is_a_sel_full_event() -> None:
    full = ("SEL Information\nVersion          : 1.5 (v1.5, v2 compliant)\nEntries          : 64\n"
            "Free Space       : 0 bytes \nPercent Used     : 100%\nOverflow         : false\n")
    f = _room_codes(full)["room.sel.sel_full"]
    assert f.severity.label == "warning" and "Percent Used 100%" in f.title
    ok = full.replace("0 bytes", "63576 bytes").replace("100%", "2%")
    assert "room.sel.sel_full" not in _room_codes(ok)
