"""BMC dumps cut off part-way: read up to the cut, said to be partial, and their faults still judged.

A Redfish LogEntry pasted without its closing brace used to read as "NO KNOWN CAUSE FOUND" (exit 0)
although its message is a lost PSU redundancy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuclinic.explain import explain_text
from gpuclinic.sources.bmc import formats, lmsensors, redfish, salvage
from gpuclinic.sources.evidence_text import snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"
IDRAC = CORPUS / "redfish_idrac_sel_members_psu_redundancy_lost_checkredfish_4.txt"

CUT_ENTRY = (
    '{"@odata.id": "/redfish/v1/Systems/1/LogServices/Sel/Entries/5", "Message": "Power supply '
    'redundancy is lost", "Severity": "Critical", "Created": "2024-01-01T00:00:00Z"'
)


def _codes(text: str) -> dict[str, str]:
    rep = explain_text(text, "paste.json")
    return {f.code: f.severity.name.lower() for f in rep.findings}


def test_cut_log_entry_without_type_finds_the_fault_and_says_partial() -> None:
    assert formats.detect(CUT_ENTRY) == "room:redfish"  # typed by its URI: no "@odata.type" in the paste
    rep = explain_text(CUT_ENTRY, "paste.json")
    codes = {f.code: f for f in rep.findings}
    assert codes["room.sel.redundancy_lost"].severity.name == "WARNING"
    part = codes["evidence.partial"]
    assert part.severity.name == "INFO" and "never closed" in part.evidence[0]
    assert rep.exit_code == 1 and "explain.no_match" not in codes


def test_doctor_from_reads_the_cut_entry(tmp_path: Path) -> None:
    snap = snapshot_from_text(CUT_ENTRY, "paste.json")
    assert snap.room is not None and [e.kind for e in snap.room.events] == ["redundancy_lost"]
    assert [s.code for s in snap.signals] == ["evidence.partial"]
    assert any("paste.json: Redfish JSON is cut off" in n for n in snap.notes)


@pytest.mark.parametrize("keep", [0.55, 0.7, 0.85, 0.97])
def test_real_idrac_members_cut_anywhere_after_the_fault_keep_it(keep: float) -> None:
    """The real iDRAC paste, cut at points after member 26's EntryCode: the lost redundancy stays found."""
    text = IDRAC.read_text().strip()
    at = text.index('"EntryCode":"Redundancy Lost"') + len('"EntryCode":"Redundancy Lost"')
    cut = text[: at + int((len(text) - at) * keep)]
    room = redfish.parse_text(cut)
    assert "redundancy_lost" in [e.kind for e in room.events if e.asserted]
    assert len(room.partial) == 1
    assert _codes(cut)["room.sel.redundancy_lost"] == "warning"


def test_whole_document_is_not_partial() -> None:
    room = redfish.parse_text(IDRAC.read_text())
    assert room.partial == [] and len(room.events) == 2
    assert "evidence.partial" not in _codes(IDRAC.read_text())


def test_cut_before_any_complete_member_is_unreadable_not_healthy() -> None:
    with pytest.raises(ValueError):
        salvage.loads_partial('{"@odata.id": "/redfish/v1/Systems/1/LogServices/Sel/Entr', lead="[")


def test_entry_cut_inside_its_message_is_partial_and_no_event() -> None:
    room = redfish.parse_text(CUT_ENTRY[: CUT_ENTRY.index("redundancy is")])
    assert room.events == [] and room.events_read and len(room.partial) == 1


def test_loads_partial_keeps_complete_members_and_escaped_quotes() -> None:
    data, why = salvage.loads_partial('{"a": [1, 2, {"m": "x \\" }, y"}, {"m": "cut')
    assert data == {"a": [1, 2, {"m": 'x " }, y'}]}
    assert why is not None and "the last" in why
    assert salvage.loads_partial('{"a": 1}') == ({"a": 1}, None)


def test_sensors_json_cut_off_reads_the_chips_before_the_cut() -> None:
    whole = {
        "coretemp-isa-0000": {
            "Adapter": "ISA adapter",
            "Package id 0": {"temp1_input": 41.0, "temp1_max": 80.0, "temp1_crit": 100.0},
        },
        "nvme-pci-0100": {"Adapter": "PCI adapter", "Composite": {"temp1_input": 38.85}},
    }
    text = json.dumps(whole, indent=2)
    cut = text[: text.index('"Composite"') + 5]
    room = lmsensors.parse_json(cut)
    assert [s.name for s in room.sensors][:1] == ["Package id 0"]
    assert len(room.partial) == 1 and room.partial[0].startswith("sensors -j JSON is cut off")


def test_table_or_csv_dump_cut_inside_its_last_row_is_partial() -> None:
    """The Supermicro CSV event log as the issue's excerpt ends (inside row 17): the rows are judged, the
    cut row is named; the whole file has no such note."""
    whole = (CORPUS / "sel_csv_supermicro_fana_lower_nonrecoverable_smfancontrol_1.txt").read_text()
    assert salvage.cut_last_row(whole) is None
    cut = whole + "17,2024/07/04 07\n"
    why = salvage.cut_last_row(cut)
    assert why is not None and "2 of the 5 fields" in why
    codes = _codes(cut)
    assert codes["room.sel.fan_critical"] == "critical" and codes["evidence.partial"] == "info"
    sel = (CORPUS / "freeipmi_sel_postinit_psu2_failure_checkipmi_26.txt").read_text()
    assert salvage.cut_last_row(sel) is None
    row7 = "7    | Aug-22-2017 | 15:10:15 | System Chassis Chassis Intru\n"  # the excerpt ends so
    assert "evidence.partial" in _codes(sel + row7)


def test_redfish_printed_by_python_is_read() -> None:
    """``pprint(response.dict)`` of the real iDRAC entry: single quotes, read through ast.literal_eval;
    cut inside its message it is unreadable, and explain says so instead of a bare "no known cause"."""
    import pprint

    docs = json.loads("[" + IDRAC.read_text().strip().rstrip(",") + "]")
    rep = pprint.pformat(docs[1], width=60)
    assert formats.detect(rep) == "room:redfish"
    assert _codes(rep)["room.sel.redundancy_lost"] == "warning"
    cut = rep[: rep.index("redundancy is")]
    report = explain_text(cut, "paste.txt")
    part = [f for f in report.findings if f.code == "evidence.partial"]
    assert part and "could not be read" in part[0].evidence[0]
    assert report.explain_summary()["cause_found"] is False and report.exit_code == 0


DCMI_OFF = (
    "    Instantaneous power reading:                   0 Watts\n"
    "    Minimum during sampling period:                0 Watts\n"
    "    Maximum during sampling period:                0 Watts\n"
    "    Average power reading over sample period:      0 Watts\n"
    "    IPMI timestamp:                           Thu Jan  1 00:00:00 1970\n"
    "    Sampling period:                          00000000 Seconds.\n"
    "    Power reading state is:                   deactivated\n"
)


def test_dcmi_power_reading_deactivated_is_read_and_said() -> None:
    """`ipmitool dcmi power reading` from a BMC that does not measure power: its zeros are no reading.
    It was 'not recognised' (doctor exit 64) and 'no known cause' (explain) with nothing said."""
    snap = snapshot_from_text(DCMI_OFF, "dcmi.txt")
    assert snap.room is not None and snap.room.power_consumed_w is None
    assert "evidence.partial" in _codes(DCMI_OFF)
    why = [s for s in snap.signals if s.code == "evidence.partial"]
    assert why and "power reading state is deactivated" in (why[0].line or "")
    on = DCMI_OFF.replace(" 0 Watts", " 512 Watts").replace("deactivated", "activated")
    live = snapshot_from_text(on, "dcmi.txt")
    assert live.room is not None and live.room.power_consumed_w == 512.0
    assert "evidence.partial" not in _codes(on)
