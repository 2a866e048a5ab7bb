"""Incidents join the BMC and the GPU: one root cause, the GPU symptoms under it, the room runbook."""

from __future__ import annotations

from pathlib import Path

from test_room_checks import SEL_DELL_PCIE, XID79, _gpu, _room

from gpuclinic.diagnose import Report, diagnose
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge import runbooks
from gpuclinic.model import Incident
from gpuclinic.sources.evidence import load_evidence


def _bad(rep: Report) -> list[Incident]:
    return [i for i in rep.incidents if i.severity.label in ("warning", "critical")]


def test_inlet_31c_and_four_gpus_in_thermal_slowdown_is_one_incident() -> None:
    snap = Snapshot(gpus=[_gpu(i, 91, throttle=True) for i in range(4)] + [_gpu(4 + i, 70) for i in range(4)],
                    room=_room(31))
    rep = diagnose(snap)
    (inc,) = _bad(rep)
    assert inc.code == "room.inlet_hot" and inc.severity.label == "critical"
    assert "thermal.throttle" in inc.symptoms
    throttled = [f for f in rep.findings if f.code == "thermal.throttle"]
    assert len(throttled) == 4 and all(f.incident == inc.id for f in throttled)
    assert runbooks.get("room.inlet_hot") is not None


def test_xid79_and_sel_pcie_fatal_on_that_slot_is_one_incident_with_slot_and_riser_steps(
    tmp_path: Path,
) -> None:
    (tmp_path / "dmesg.txt").write_text(XID79)
    (tmp_path / "sel.txt").write_text(SEL_DELL_PCIE)
    rep = diagnose(load_evidence([str(tmp_path / "dmesg.txt"), str(tmp_path / "sel.txt")]))
    roots = {i.code: i for i in _bad(rep)}
    inc = roots["room.sel.pcie_fatal"]
    assert "xid.79" in inc.symptoms or "gpu.fallen_off_bus" in inc.symptoms
    assert "xid.79" not in roots and "gpu.fallen_off_bus" not in roots
    rb = runbooks.get("room.sel.pcie_fatal")
    assert rb is not None and any("riser" in s.do for s in rb.steps)
