"""The health a BMC gives the server's parts (Redfish ``Status`` of systems, GPUs, processors, memory ...):
saved documents, expanded collections, the service's conditions, a rollup explained by a sensor read beside
it, and a Status in a slice of a document that is no longer JSON."""

from __future__ import annotations

import json
from pathlib import Path

from gpuclinic.checks import run_checks
from gpuclinic.facts.room import ComponentHealth, RoomFacts
from gpuclinic.facts.serial import from_jsonable, to_jsonable
from gpuclinic.model import Finding
from gpuclinic.sources.evidence_text import snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _findings(text: str) -> list[Finding]:
    return run_checks(snapshot_from_text(text))[0]


def _codes(text: str) -> dict[str, str]:
    return {f.code: f.severity.label for f in _findings(text)}


def _gpu(health: str, ident: str = "GPU_SXM_3") -> dict[str, object]:
    return {
        "@odata.type": "#Processor.v1_20_0.Processor",
        "@odata.id": f"/redfish/v1/Systems/HGX_Baseboard_0/Processors/{ident}",
        "Id": ident,
        "Name": "GPU",
        "ProcessorType": "GPU",
        "Status": {"State": "Enabled", "Health": health},
    }


def test_an_expanded_collection_of_hgx_gpus_names_the_one_rated_critical() -> None:
    doc = {
        "@odata.type": "#ProcessorCollection.ProcessorCollection",
        "Members": [_gpu("OK", "GPU_SXM_1"), _gpu("Critical", "GPU_SXM_3"), _gpu("Warning", "GPU_SXM_5")],
    }
    fs = [f for f in _findings(json.dumps(doc)) if f.code == "room.gpu_unhealthy"]
    assert sorted((f.title, f.severity.label) for f in fs) == [
        ("The BMC rates GPU_SXM_3 Critical", "critical"),
        ("The BMC rates GPU_SXM_5 Warning", "warning"),
    ]


def test_a_part_rated_critical_and_its_state() -> None:
    doc = {
        "@odata.type": "#Memory.v1_17_0.Memory",
        "@odata.id": "/redfish/v1/Systems/1/Memory/DIMM_B7",
        "Id": "DIMM_B7",
        "Name": "DIMM B7",
        "Status": {"State": "UnavailableOffline", "Health": "Critical"},
    }
    (f,) = [f for f in _findings(json.dumps(doc)) if f.code == "room.component_unhealthy"]
    assert f.severity.label == "critical"
    assert f.title == "The BMC rates Memory DIMM B7 Critical (State UnavailableOffline)"


def test_a_rollup_alone_is_reported_with_the_condition_that_explains_it() -> None:
    text = (CORPUS / "redfish_dmtf_rackmount1_system_rollup_warning_mockup.json").read_text()
    (f,) = [f for f in _findings(text) if f.code == "room.component_unhealthy"]
    assert f.severity.label == "warning"
    assert "CPU1 Temp' reading of 44 (Cel) is above the 42 upper caution threshold" in f.title
    assert any("HealthRollup warning" in e for e in f.evidence)


def test_a_rollup_whose_sensor_is_read_beside_it_is_not_said_twice() -> None:
    """A bundle of the system (HealthRollup Warning, condition naming CPU1Temp) and that sensor's document:
    the sensor check reports the sensor; the rollup adds nothing."""
    system = json.loads((CORPUS / "redfish_dmtf_rackmount1_system_rollup_warning_mockup.json").read_text())
    sensor = {
        "@odata.type": "#Sensor.v1_7_0.Sensor",
        "@odata.id": "/redfish/v1/Chassis/1U/Sensors/CPU1Temp",
        "Id": "CPU1Temp",
        "Name": "CPU #1 Temperature",
        "ReadingType": "Temperature",
        "ReadingUnits": "Cel",
        "Reading": 44,
        "Thresholds": {"UpperCaution": {"Reading": 42}, "UpperCritical": {"Reading": 45}},
        "Status": {"State": "Enabled", "Health": "Warning"},
    }
    bundle = {system["@odata.id"]: system, sensor["@odata.id"]: sensor}
    codes = _codes(json.dumps(bundle))
    assert codes.get("room.sensor_critical") == "warning" and "room.component_unhealthy" not in codes


def test_service_conditions_become_one_finding() -> None:
    text = (CORPUS / "redfish_dmtf_rackmount1_serviceconditions_two_warnings_mockup.json").read_text()
    (f,) = [f for f in _findings(text) if f.code == "room.component_unhealthy"]
    assert f.title.startswith("The BMC lists 2 open conditions: Power supply 'PSU 1' has a predicted failure")
    assert len([e for e in f.evidence if e.startswith("Warning: ")]) == 2


def test_a_status_in_a_slice_that_is_not_json_is_still_a_fault() -> None:
    text = (CORPUS / "redfish_chassis_slice_health_critical_t330_checkredfish_151.txt").read_text()
    assert _codes(text).get("room.component_unhealthy") == "critical"


def test_a_status_line_of_a_document_read_whole_is_not_counted_again() -> None:
    """The signature for a Status in text the reader could not take as a document stays silent when the
    Redfish reader read the parts' Status itself (one finding per GPU, not one more per line)."""
    fs = _findings(json.dumps(_gpu("Critical")))
    assert [f.code for f in fs if f.severity.label == "critical"] == ["room.gpu_unhealthy"]


def test_component_health_survives_a_snapshot_round_trip() -> None:
    gpu = ComponentHealth(name="GPU_SXM_3", kind="Processor", health="critical", gpu=True, conditions=["x"])
    room = RoomFacts(components=[gpu])
    back = from_jsonable(RoomFacts, json.loads(json.dumps(to_jsonable(room))))
    assert back == room
