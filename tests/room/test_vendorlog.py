"""Vendor BMC event logs pasted as text (HPE iLO IML via ilorest, Supermicro Health Event Log rows).

The texts are the real ones of the labelled corpus (tests/fixtures/realworld/corpus, SOURCES.md names them).
"""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.sources.bmc import formats, redfish, vendorlog
from gpuclinic.sources.evidence import load_evidence

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"
IML = CORPUS / "iml_ilorest_dump_mce_nmi_pcie_uncorrectable_ilorest_8.txt"
SMC = CORPUS / "supermicro_health_event_log_uncorrectable_ecc_dimm_lwa_117.txt"
ELIST = CORPUS / "sel_elist_hpe_power_unit_fault_ampm_candytop.txt"


def test_iml_lines_are_events_judged_by_their_message_not_the_ok_severity() -> None:
    room = vendorlog.parse(IML.read_text())
    assert [e.kind for e in room.events] == ["cpu_ierr", None, "pcie_fatal"]
    assert {e.severity for e in room.events} == {"OK"}
    assert room.events[2].sensor_type == "IML class 8 code 2"
    assert room.sources == ["HPE iLO IML"]


def test_supermicro_row_assertion_and_deassertion() -> None:
    text = SMC.read_text()
    room = vendorlog.parse(text + text.replace("- Assertion", "- Deassertion"))
    assert [(e.kind, e.asserted) for e in room.events] == [
        ("memory_uncorrectable", True),
        ("memory_uncorrectable", False),
    ]


def test_detected_as_its_own_format_and_not_over_ipmitool() -> None:
    assert formats.detect(IML.read_text()) == "room:vendor_event_log"
    assert formats.detect(SMC.read_text()) == "room:vendor_event_log"
    assert formats.detect(ELIST.read_text()) == "room:ipmitool"
    assert not vendorlog.claims("Class 5 / Code 3 in prose\nthe assertion held")


def test_doctor_from_the_saved_log_drains_on_the_pcie_fatal_entry() -> None:
    report = diagnose(load_evidence([str(IML)]))
    codes = {f.code: f.severity.name for f in report.findings}
    assert codes["room.sel.pcie_fatal"] == "CRITICAL"
    assert codes["room.sel.cpu_ierr"] == "CRITICAL"


def test_omsa_syslog_events_name_their_sensor_and_close_on_return_to_normal() -> None:
    room = vendorlog.parse((CORPUS / "omsa_syslog_psu_failure_ac_lost_redundancy_ossecdocs.txt").read_text())
    psu = [e for e in room.events if e.kind == "psu_failure"]
    assert len(psu) == 3 and {e.sensor for e in psu} == {"PS 2 Status"}
    assert [e.kind for e in room.events].count("redundancy_lost") == 2
    normal = [e for e in room.events if "returned to a normal value" in e.description]
    assert len(normal) == 1 and not normal[0].asserted
    assert room.sources == ["Dell OpenManage Server Administrator"]


def test_check_ipmi_sensor_summary_is_one_event_per_record() -> None:
    text = (CORPUS / "check_ipmi_sensor_sel_summary_ps2_failure_checkipmi_26.txt").read_text()
    room = vendorlog.parse(text)
    assert len(room.events) == 11
    assert [e.kind for e in room.events].count("psu_failure") == 4
    assert room.events[0].sensor == "Power Supply PS2 Status" and room.events[0].severity == "Critical"
    assert formats.detect(text) == "room:vendor_event_log"


def test_redfish_members_pasted_together_are_read_as_their_list() -> None:
    """Two iDRAC SEL LogEntry members copied out of the collection (``{...},{...},``) parse; a text broken
    inside the second member gives all before the break and says the rest was not read (not an empty, healthy
    room, and not an error that drops the first)."""
    text = (CORPUS / "redfish_idrac_sel_members_psu_redundancy_lost_checkredfish_4.txt").read_text()
    room = redfish.parse_text(text)
    assert [e.kind for e in room.events if e.asserted] == ["redundancy_lost"]
    assert len(room.events) == 2 and room.partial == []
    broken = redfish.parse_text(text.replace('"EntryType":"SEL","Id":"26"', '"Entry\nType":"SEL","Id":"26"'))
    assert [e.id for e in broken.events] == ["27", "/redfish/v1/Managers/iDRAC.Embedded.1/Logs/Sel/26"]
    assert [e.kind for e in broken.events if e.asserted] == ["redundancy_lost"]  # read up to the break
    assert len(broken.partial) == 1 and "cut off or broken at character" in broken.partial[0]
