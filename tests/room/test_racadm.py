"""Dell ``racadm getsensorinfo`` as pasted: whole (one table per ``Sensor Type``) or through grep."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.checks import run_checks
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.bmc import formats, racadm

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"

# racadm's layout (iDRAC 8/9), with a failed fan, a hot CPU, an empty PSU bay and lost PSU redundancy
WHOLE = """Sensor Type : POWER
<Sensor Name>                   <Status>                 <Type>
PS1 Status                      Present                  AC
PS2 Status                      Absent                   AC

Sensor Type : TEMPERATURE
<Sensor Name>            <Status>    <Reading> <lc> <uc>  <lnc>[R/W]  <unc>[R/W]
[Key = iDRAC.Embedded.1#SystemBoardInletTemp]
System Board Inlet Temp       Ok      21C      -7C  47C      3C [Y]      42C [Y]

[Key = iDRAC.Embedded.1#CPU1Temp]
CPU1 Temp                     Critical      96C      3C   95C      8C [N]      90C [N]

Sensor Type : FAN
<Sensor Name>                   <Status>    <Reading>   <lc>        <uc>        <PWM %>
System Board Fan1A              Ok          5880RPM     600RPM      NA          23%
System Board Fan2A              Critical    0RPM        600RPM      NA          28%

Sensor Type : PROCESSOR
<Sensor Name>                   <Status>    <State>             <lc>        <uc>
CPU1 Status                     Ok          Presence_Detected   NA          NA

Sensor Type : REDUNDANCY
<Sensor Name>                   <Status>                 <Type>
System Board Fan Redundancy     Full Redundant           Fan
System Board PS Redundancy      Redundancy Lost          PSU
"""


def _codes(text: str) -> dict[str, str]:
    assert formats.detect(text) == "room:racadm_sensorinfo"
    snap = Snapshot(room=formats.parse("room:racadm_sensorinfo", text))
    return {f.code: f.severity.label for f in run_checks(snap)[0]}


def test_whole_output_sensors_thresholds_and_faults() -> None:
    room = racadm.parse(WHOLE)
    inlet = next(s for s in room.sensors if s.name == "System Board Inlet Temp")
    assert (inlet.reading, inlet.unit, inlet.role) == (21, "C", "inlet")
    assert inlet.thresholds == {"lcr": -7, "ucr": 47, "lnc": 3, "unc": 42}
    fan = next(s for s in room.sensors if s.name == "System Board Fan1A")
    assert (fan.reading, fan.unit, fan.thresholds) == (5880, "RPM", {"lcr": 600})
    assert room.redundancy["System Board PS Redundancy"] == "Redundancy Lost"
    assert _codes(WHOLE) == {
        "room.fan_failed": "critical", "room.sensor_critical": "critical", "room.psu_absent": "warning",
        "room.psu_redundancy": "warning", "room.status": "info",
    }


def test_grepped_ps_rows_of_a_healthy_server() -> None:
    text = (CORPUS / "racadm_getsensorinfo_grep_ps_full_redundant_bmm.txt").read_text()
    room = racadm.parse(text)
    assert [(p.name, p.health) for p in room.psus] == [("PS1 Status", "ok"), ("PS2 Status", "ok")]
    assert room.redundancy == {"System Board PS Redundancy": "Full Redundant"}
    assert _codes(text) == {"room.status": "info"}
