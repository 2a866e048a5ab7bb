"""`gpuclinic run` groups an interruption's findings into incidents the doctor's way (incidents.py): one
root cause with its symptoms and one runbook, printed, written as a gpuclinic.report/2 and kept in the
ledger."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from supervise_helpers import RunResult, child_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml"))
from fake_pynvml import FakeNvml

from gpuclinic.diagnose import REPORT_SCHEMA, diagnose
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Severity
from gpuclinic.sources.scenarios import load_scenario
from gpuclinic.supervise.classify import AttemptEvidence, classify
from gpuclinic.supervise.gpus import NvmlSource, resolve
from gpuclinic.supervise.gpuwatch import GpuWatcher
from gpuclinic.supervise.incidents import attempt_report


def test_a_gpu_falling_off_the_bus_mid_run_is_the_doctors_incident(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    r = gpuclinic_run(["--scenario", "fallen-off-bus", "--max-restarts", "0"], ["--fail", "exit3"],
                      env={"XDG_STATE_HOME": str(state)})
    assert r.rc == 3, r.err
    (path,) = state.glob("gpuclinic/runs/*/attempt-1.json")
    rep = json.loads(path.read_text())
    assert rep["schema"] == REPORT_SCHEMA and rep["command"] == "run" and rep["verdict"] == "drain"
    (inc,) = rep["incidents"]  # one root cause: the Xid 79, the lost GPU and the interruption fold under it
    assert inc["code"] == "gpu.fallen_off_bus" and inc["gpu"]["index"] == 4
    assert {"xid.79", "gpu.missing", "run.interruption.gpu_hardware"} <= set(inc["symptoms"])
    assert all(f["incident"] == inc["id"] for f in rep["findings"])
    # the same incident doctor reports for this node: id, severity, runbook and first step
    (doc,) = [i for i in diagnose(load_scenario("fallen-off-bus")).incidents if i.code == inc["code"]]
    d = doc.to_dict()
    assert {k: inc[k] for k in ("id", "severity", "family", "gpu", "runbook", "first_step")} == {
        k: d[k] for k in ("id", "severity", "family", "gpu", "runbook", "first_step")
    }
    # printed the doctor's way, and kept with the interruption in the ledger
    assert "incident critical gpu.fallen_off_bus GPU 4:" in r.err
    assert f"first step: {inc['first_step']}" in r.err
    (row,) = r.interruptions()
    assert json.loads(row["incidents"]) == rep["incidents"]
    out = subprocess.run([sys.executable, "-m", "gpuclinic", "report", "interruptions", "--db", str(r.db),
                          "--json"], capture_output=True, text=True, env=child_env(), timeout=60)
    (recent,) = json.loads(out.stdout)["recent"]
    assert recent["incidents"] == rep["incidents"]


def test_an_application_error_is_its_own_incident(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    r = gpuclinic_run(["--max-restarts", "0"], ["--fail", "exception"], env={"XDG_STATE_HOME": str(state)})
    assert r.rc != 0
    (path,) = state.glob("gpuclinic/runs/*/attempt-1.json")
    (inc,) = json.loads(path.read_text())["incidents"]
    assert inc["code"] == "run.interruption.application_error" and inc["severity"] == "warning"
    assert inc["runbook"] == "run.interruption.*" and inc["symptoms"] == []


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    f = FakeNvml(4).install(monkeypatch)
    yield f
    f.release.set()
    assert not f.mutating_calls, f.mutating_calls


def test_a_gpu_lost_mid_run_through_nvml_groups_with_its_kernel_line(fake: FakeNvml) -> None:
    """pynvml faked at its call boundary: GPU 2 answers, then says GPU_IS_LOST while the job runs."""
    src = NvmlSource()
    job = resolve(["1", "2"], src.identities())
    w = GpuWatcher(src, 10.0, lambda f: None)
    w.job = job  # begin() without the sampling thread: the test samples by hand
    w.sample_once()
    fake.gpu(2).lose_after = len(fake.gpu(2).calls)
    w.sample_once()
    assert [f.fatal for f in w.faults] == [True]
    bus = job[1].pci_bus_id
    assert bus is not None
    line = f"NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    xid = KernelEvent(kind="xid", xid=79, pci_bus_id=bus, line=line)
    ev = AttemptEvidence(returncode=-6, kernel_events=[xid], gpu_faults=list(w.faults),
                         job_gpus=[g.ref() for g in job])
    cls = classify(ev)
    assert cls.cls == "gpu_hardware"
    rep = attempt_report(ev, cls, w.recent(), at=0.0)
    (inc,) = rep.incidents
    assert inc.code == "gpu.fallen_off_bus" and inc.gpu is not None and inc.gpu.index == 2
    assert inc.severity == Severity.CRITICAL
    assert set(inc.symptoms) == {"xid.79", "gpu.missing", "run.interruption.gpu_hardware"}
    # doctor on the same facts names the same root cause, severity and first step
    snap = Snapshot(gpus=w.recent()[-1][1], nvml_available=True, kernel_events=[xid], kernel_log_read=True)
    (doc,) = diagnose(snap).incidents
    assert (doc.id, doc.severity, doc.runbook, doc.first_step) == (inc.id, inc.severity, inc.runbook,
                                                                   inc.first_step)
    src.close()


def test_a_fault_seen_earlier_in_the_attempt_is_not_lost() -> None:
    """The GPU detectors observe the attempt's samples as a window: a pending row remap that one sample
    showed still roots the incident when the newest sample no longer shows it."""
    snap = load_scenario("healthy-8xh100-load")
    bad = copy.deepcopy(snap.gpus)
    bad[3].remapped_rows_pending = True
    job = resolve(None, snap.gpus)
    ev = AttemptEvidence(returncode=1, output_tail="RuntimeError: CUDA error: uncorrectable ECC error "
                         "encountered\n", job_gpus=[g.ref() for g in job])
    cls = classify(ev)
    rep = attempt_report(ev, cls, [(1.0, snap.gpus), (2.0, bad), (3.0, snap.gpus)], at=3.0)
    assert cls.cls == "gpu_hardware" and cls.gpu is None  # known from the job's output only
    (inc,) = [i for i in rep.incidents if i.code == "memory.row_remap_pending"]
    assert inc.gpu is not None and inc.gpu.index == 3 and "run.interruption.gpu_hardware" in inc.symptoms
    remap = next(f for f in rep.findings if f.code == "memory.row_remap_pending")
    assert remap.data["window"]["in_newest"] is False
    # the same code and severity as doctor on the sample that showed it
    snap.gpus = bad
    (doc,) = [f for f in diagnose(snap).findings if f.code == "memory.row_remap_pending"]
    assert doc.severity == remap.severity
