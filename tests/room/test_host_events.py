"""Hardware events outside a BMC dump, and SEL formats and states the readers used to drop.

Each input is a real public text from the corpus (tests/fixtures/realworld/SOURCES.md); before these
readers, every one of them read as healthy or "not recognised".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.checks import run_checks
from gpuclinic.explain import explain_text
from gpuclinic.facts import room as R
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.bmc import formats, ipmitool, vendorlog
from gpuclinic.sources.evidence_text import snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _found(name: str) -> dict[str, str]:
    rep = explain_text((CORPUS / name).read_text(), name)
    return {f.code: f.severity.name.lower() for f in rep.findings}


@pytest.mark.parametrize(
    ("name", "code", "severity"),
    [
        ("edac_sbridge_ce_dmesg_T_edacutils_10.txt", "memory_correctable", "warning"),
        ("edac_ce_syslog_uptime_dimm_repeated_osm_ops_300.txt", "memory_correctable", "warning"),
        ("rasmc_errors_mce_umc_cecc_nixos_infra_523.txt", "memory_correctable", "warning"),
        ("idrac_exporter_event_metrics_psu_redundancy_lost_idracexp_214.txt", "redundancy_lost", "warning"),
        ("iml_fan_failure_fans_not_redundant_dl360p_gen8_ilo4unlock_29.txt", "fan_critical", "critical"),
        ("sel_csv_supermicro_fana_lower_nonrecoverable_smfancontrol_1.txt", "fan_critical", "critical"),
        ("sel_list_processor_uncorrectable_mce_fboss_openbmc_273.txt", "cpu_ierr", "warning"),
    ],
)
def test_hardware_event_texts_are_not_healthy(name: str, code: str, severity: str) -> None:
    assert _found(name).get(f"room.sel.{code}") == severity


def test_edac_lines_become_host_events_with_their_source() -> None:
    text = (CORPUS / "edac_ce_syslog_uptime_dimm_repeated_osm_ops_300.txt").read_text()
    snap = snapshot_from_text(text, "s")
    assert snap.room is not None
    edac = [e for e in snap.room.events if e.kind != "mce_logged"]  # (the machine check those decode)
    assert len(edac) == 7 and {e.kind for e in edac} == {"memory_correctable"}
    assert {e.source for e in edac} == {"host: kernel EDAC"}
    rep = explain_text(text)
    f = next(f for f in rep.findings if f.code == "room.sel.memory_correctable")
    assert f.title.startswith("Host hardware log: EDAC MC0: ")


def test_uncorrected_memory_error_wording_is_critical() -> None:
    line = (
        "1 2024-01-01 00:00:00 +0000 error: Uncorrected error, CPU 2, bank Unified Memory Controller "
        "(bank=17), mcg mcgstatus=0, mci UECC, memory_channel=0"
    )
    assert _codes_of(line)["room.sel.memory_uncorrectable"] == "critical"
    assert _codes_of("[ 10.0] EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#0_DIMM#0")[
        "room.sel.memory_uncorrectable"
    ] == "critical"


def _codes_of(text: str) -> dict[str, str]:
    return {f.code: f.severity.name.lower() for f in explain_text(text).findings}


def test_message_fields_of_no_hardware_class_are_ignored() -> None:
    """A JSON log's "Message" that names no hardware fault is no event (and no finding)."""
    text = '{"Message": "Back-off pulling image nginx", "Severity": "Warning"}\n'
    rep = explain_text(text + text.replace("nginx", "redis"), "k")
    assert not [f for f in rep.findings if f.code.startswith("room.")]
    assert rep.snapshot.room is None


def test_supermicro_csv_rows_keep_sensor_type_time_and_deassertions() -> None:
    text = (CORPUS / "sel_csv_supermicro_fana_lower_nonrecoverable_smfancontrol_1.txt").read_text()
    room = vendorlog.parse(text)
    assert len(room.events) == 16
    first, second = room.events[:2]
    assert (first.sensor, first.sensor_type, first.time) == ("FANA", "Fan", "2024-07-04T06:45:02")
    assert first.asserted and not second.asserted and first.kind == "fan_critical"


def test_latest_record_decides_whether_an_event_is_cleared() -> None:
    """Deasserted then asserted again: open; asserted then deasserted: cleared (log order, no times)."""
    def room(*states: bool) -> Snapshot:
        evs = [R.BmcEvent(id=str(i), sensor="FANA", description="Lower Critical Going Low", asserted=a,
                          kind="fan_critical", sensor_type="Fan") for i, a in enumerate(states)]
        return Snapshot(room=R.RoomFacts(events=evs, events_read=True))

    def sev(snap: Snapshot) -> str:
        fs, _ = run_checks(snap, only=["room.sel"])
        return next(f.severity.name.lower() for f in fs if f.code == "room.sel.fan_critical")

    assert sev(room(True, False, True)) == "critical"
    assert sev(room(True, False)) == "info"


def test_old_critical_event_is_history_only_when_the_reading_time_is_known() -> None:
    evs = [
        R.BmcEvent(id="1", time="2026-05-14T20:40:26", description="Uncorrectable machine check exception",
                   kind="cpu_ierr"),
        R.BmcEvent(id="2", time="2026-05-28T05:03:50", description="x", kind=None),
    ]
    pasted = Snapshot(room=R.RoomFacts(events=list(evs), events_read=True))
    live = Snapshot(taken_at="2026-05-28T06:00:00", room=R.RoomFacts(events=list(evs), events_read=True))
    sev = {}
    for name, snap in (("pasted", pasted), ("live", live)):
        fs, _ = run_checks(snap, only=["room.sel"])
        sev[name] = next(f.severity.name.lower() for f in fs if f.code == "room.sel.cpu_ierr")
    assert sev == {"pasted": "warning", "live": "info"}


def test_freeipmi_chassis_status_keys() -> None:
    text = (CORPUS / "chassis_status_quoted_healthy_ipmiexporter_144.txt").read_text().replace("> ", "")
    assert formats.detect(text) == "room:ipmitool"
    room = ipmitool.parse_chassis(text)
    assert room.chassis["Main Power Fault"] == "false" and room.chassis["Cooling/Fan Fault"] == "false"
    bad = text.replace("Cooling/fan fault                   : false", "Cooling/fan fault : true")
    assert _codes_of(bad)["room.fan_failed"] == "critical"
    assert "room.fan_failed" not in _codes_of(text)


def test_dmtf_environment_metrics_gives_draw_fans_and_a_cpu_not_inlet_temperature() -> None:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "room" / "redfish" / "public-rackmount1"
    text = (path / "Chassis" / "1U" / "EnvironmentMetrics" / "index.json").read_text()
    assert formats.detect(text) == "room:redfish"
    room = formats.parse("room:redfish", text)
    assert room.power_consumed_w == 374
    assert {(s.name, s.reading) for s in room.fans()} == {("Chassis Fan #1", 1900), ("Chassis Fan #2", 2100)}
    assert [(s.name, s.role) for s in room.temperatures()] == [("CPU1Temp", "cpu")]


@pytest.mark.parametrize(("celsius", "severity"), [(14.0, "warning"), (15.5, "info"), (20.0, None)])
def test_inlet_below_the_room_guidance(celsius: float, severity: str | None) -> None:
    """16-25 C is the room guidance: 15-16 C is a note, below ASHRAE A1's 15 C a warning."""
    s = R.RoomSensor(name="Inlet Temp", kind=R.TEMPERATURE, reading=celsius, unit="C", level="ok",
                     role="inlet", source="t")
    fs, _ = run_checks(Snapshot(room=R.RoomFacts(sensors=[s])), only=["room.inlet"])
    got = {f.code: f.severity.name.lower() for f in fs}
    assert got.get("room.inlet_cold") == severity


def test_redfish_event_payload_is_read_as_log_entries() -> None:
    """An EventService push (``#Event`` with ``Events``): the real iDRAC R470 record, wrapped in the
    Event document it was cut from."""
    t = (CORPUS / "redfish_event_payload_fragments_inlet_warning_r470_idrac_353.txt").read_text()
    block = t[t.index('"Events": ['): t.index(" ],") + 2]
    doc = '{"@odata.type": "#Event.v1_7_0.Event", "Id": "1", "Name": "Event Array", ' + block + "}"
    room = formats.parse(formats.detect(doc) or "", doc)
    assert [(e.id, e.kind, e.severity) for e in room.events] == [("2162", "temperature_warning", "Warning")]


def test_sel_list_verbose_records_are_read() -> None:
    """``ipmitool sel elist -v`` / ``sel get``: one event per ``SEL Record ID`` block, deassertions kept."""
    text = (CORPUS / "sel_elist_v_ocpsel_decoded_uncorrectable_mce_moxspec.txt").read_text()
    room = ipmitool.parse_any(text)
    assert [(e.id, e.sensor_type, e.sensor, e.time, e.kind) for e in room.events] == [
        ("00a1", "Processor", "#0x40", "2019-08-08T10:37:17", "cpu_ierr")
    ]
    deassert = text.replace("Assertion Event", "Deassertion Event")
    assert not ipmitool.parse_any(deassert).events[0].asserted


def test_super_io_with_unset_limits_raises_no_alarm() -> None:
    """Every input of a W83667HG whose limits were never set prints ALARM: its limits are dropped, the
    spinning fans stay fans, the 0 RPM ones are empty headers; a chip with sane limits still alarms."""
    text = (CORPUS / "sensors_w83667hg_unset_limits_every_alarm_gnomesensors_34.txt").read_text()
    room = formats.parse(formats.detect(text) or "", text)
    assert {f.name for f in room.fans() if not f.absent} == {"fan1", "fan2", "fan4"}
    assert all(not s.thresholds and s.level == "ok" for s in room.sensors)
    assert not [f for f in explain_text(text).findings if f.severity.name != "INFO"]
    sane = "it8728-isa-0a30\nAdapter: ISA adapter\nfan1:        0 RPM  (min =  600 RPM)  ALARM\n"
    assert _codes_of(sane).get("room.fan_failed") == "critical"


def test_check_ipmi_sensor_sensor_list_gives_temperatures_only() -> None:
    text = (CORPUS / "check_ipmi_sensor_v_hpe_temps_inlet_14c_checkipmi_16.txt").read_text()
    room = vendorlog.parse(text)
    assert not room.events_read and not room.events
    assert [(s.name, s.reading) for s in room.temperatures("inlet")] == [("01-Inlet Ambient", 14.0)]
    assert _codes_of(text)["room.inlet_cold"] == "warning"
    assert not vendorlog.parse("Fan 1 = 19.60 (Status: Nominal)\nFan 2 = 19.60 (Status: Nominal)\n").sensors


def test_an_event_the_bmc_rates_critical_is_never_dropped() -> None:
    """A Redfish LogEntry whose words no event class knows: the BMC's own Severity stands (a warning), where
    the input was called HEALTHY before.  DMTF's public-rackmount1 mockup, entry 1."""
    entry = (
        Path(__file__).resolve().parents[1]
        / "fixtures/room/redfish/public-rackmount1/Managers/BMC/LogServices/Log/Entries/1/index.json"
    )
    found = {f.code: f.severity.name.lower() for f in explain_text(entry.read_text()).findings}
    assert found.get("room.sel.bmc_critical") == "warning"
    ok = entry.read_text().replace('"Critical"', '"OK"')
    assert "room.sel.bmc_critical" not in {f.code for f in explain_text(ok).findings}


def test_chassis_intrusion_is_information() -> None:
    line = "   1 | 11/25/2024 | 21:47:47 | Physical Security #0x73 | General Chassis intrusion | Asserted"
    assert _codes_of(line).get("room.sel.chassis_intrusion") == "info"
