"""Parsing scontrol output and the drain/resume decision, without a cluster."""

from __future__ import annotations

import pytest

from gpuclinic.errors import GpuclinicError
from gpuclinic.model import Verdict
from gpuclinic.slurm.health import (
    Judgement,
    Problem,
    blocking_for_job,
    job_gpu_tokens,
    judge,
    reconcile,
    run_doctor,
)
from gpuclinic.slurm.scontrol import NodeState, clean_reason, parse_node_line, this_node

# a real `scontrol -o show node` line from slurm-wlm 22.05.8 (the test cluster), reason with spaces
LINE = ("NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.00 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm "
        "Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 AllocMem=0 FreeMem=20361 "
        "Sockets=1 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=debug  BootTime=2026-12-01T18:33:30 SlurmdStartTime=2026-12-01T18:37:39 "
        "LastBusyTime=2026-12-01T18:37:40 CfgTRES=cpu=1,mem=1M,billing=1 AllocTRES= CapWatts=n/a "
        "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
        "Reason=gpuclinic: gpu.fallen_off_bus GPU 4 [root@2026-12-01T18:37:42]")


def test_parse_node_line() -> None:
    n = parse_node_line(LINE)
    assert (n.name, n.state, n.reason, n.reason_user) == (
        "vm",
        "IDLE+DRAIN",
        "gpuclinic: gpu.fallen_off_bus GPU 4",
        "root",
    )
    assert n.drained and n.ours
    idle = parse_node_line(LINE.replace("State=IDLE+DRAIN", "State=IDLE").split(" Reason=")[0])
    assert not idle.drained and idle.reason is None and not idle.ours


def test_clean_reason_is_one_short_prefixed_line() -> None:
    r = clean_reason("gpu.x\nGPU 1\t" + "y" * 300)
    assert r.startswith("gpuclinic: gpu.x GPU 1 ") and "\n" not in r and len(r) <= 120


def test_node_name_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-07")
    assert this_node(None) == "gpu-07" and this_node("x1") == "x1"
    with pytest.raises(GpuclinicError):
        this_node("a b")


def test_reason_names_the_root_cause_once_per_gpu() -> None:
    j = judge(run_doctor("fallen-off-bus"))
    assert j.verdict == Verdict.DRAIN and j.reason() == "gpuclinic: gpu.fallen_off_bus GPU 4"


def _node(state: str, reason: str | None) -> NodeState:
    return NodeState(name="n1", state=state, reason=reason)


@pytest.mark.parametrize(
    ("verdict", "state", "reason", "kind"),
    [
        (Verdict.DRAIN, "IDLE", None, "drained"),
        (Verdict.DRAIN, "IDLE+DRAIN", "gpuclinic: a GPU 1", "kept"),
        (Verdict.DRAIN, "IDLE+DRAIN", "gpuclinic: b GPU 2", "redrained"),
        (Verdict.DRAIN, "MIXED+DRAIN", "admin: maint", "left_alone"),
        (Verdict.DRAIN, "DOWN+NOT_RESPONDING", "Not responding", "left_alone"),
        (Verdict.HEALTHY, "IDLE+DRAIN", "gpuclinic: a GPU 1", "resumed"),
        (Verdict.WARNING, "IDLE+DRAIN", "gpuclinic: a GPU 1", "resumed"),
        (Verdict.HEALTHY, "IDLE+DRAIN", "admin: maint", "left_alone"),
        (Verdict.HEALTHY, "IDLE", None, "none"),
        (None, "IDLE+DRAIN", "gpuclinic: a GPU 1", "none"),
    ],
)
def test_reconcile(verdict: Verdict | None, state: str, reason: str | None, kind: str) -> None:
    from gpuclinic.model import GpuRef

    j = Judgement(
        verdict=verdict, problems=[Problem("a", GpuRef(index=1), "t")] if verdict == Verdict.DRAIN else []
    )
    assert reconcile(j, _node(state, reason), None).kind == kind


def test_job_gpus_from_the_environment() -> None:
    assert job_gpu_tokens({}) == (None, None)
    assert job_gpu_tokens({"SLURM_JOB_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}) == (
        "SLURM_JOB_GPUS",
        ["4", "5"],
    )
    assert job_gpu_tokens({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == ("CUDA_VISIBLE_DEVICES", [])
    rep = run_doctor("fallen-off-bus")
    assert [p.code for p in blocking_for_job(rep, ["4"])] == ["gpu.fallen_off_bus"]
    assert blocking_for_job(rep, ["0", "1"]) == []
    assert blocking_for_job(rep, []) == []
    assert blocking_for_job(rep, None) != []


def test_shipped_nhc_check_drains_through_nhc(tmp_path: pytest.TempPathFactory) -> None:
    """The NHC function, sourced by bash with NHC's die/log, calls the real gpuclinic (a wrapper adds
    --scenario) and reports the drain reason through die."""
    import os
    import shutil
    import subprocess
    import sys
    from importlib import resources
    from pathlib import Path

    bash = shutil.which("bash")
    assert bash
    nhc = Path(str(resources.files("gpuclinic.slurm").joinpath("deploy").joinpath("gpuclinic.nhc")))
    out = []
    for scenario in ("fallen-off-bus", "straggler"):
        bindir = Path(str(tmp_path)) / scenario
        bindir.mkdir()
        wrapper = bindir / "gpuclinic"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpuclinic "$@" --scenario {scenario}\n')
        wrapper.chmod(0o755)
        script = (
            'die() { echo "DIE $1 $2"; }; log() { echo "LOG $*"; }; '
            f'. "{nhc}"; check_gpuclinic; echo "RC $?"'
        )
        p = subprocess.run(
            [bash, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"},
        )
        out.append(p.stdout)
    assert out[0] == "DIE 1 gpuclinic: gpu.fallen_off_bus GPU 4\nRC 1\n", out
    assert out[1] == "RC 0\n", out
    # a broken install (here: an option this gpuclinic does not know) must not drain the node
    bindir = Path(str(tmp_path)) / "broken"
    bindir.mkdir()
    (bindir / "gpuclinic").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m gpuclinic "$@" --no-such-option\n'
    )
    (bindir / "gpuclinic").chmod(0o755)
    script = (
        f'die() {{ echo "DIE $1 $2"; }}; log() {{ echo "LOG $*"; }}; . "{nhc}"; check_gpuclinic; echo "RC $?"'
    )
    p = subprocess.run(
        [bash, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"},
    )
    assert "DIE" not in p.stdout and p.stdout.endswith("RC 0\n"), p.stdout
