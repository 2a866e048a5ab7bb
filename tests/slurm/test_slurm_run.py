"""`gpuclinic run` inside a real Slurm batch job: a GPU fault a restart here cannot fix drains the node and
requeues the job (real slurmctld/slurmd, see tests/slurm/slurmcluster.py)."""

from __future__ import annotations

import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.model import GpuRef
from gpuclinic.slurm.job import SlurmSupervisor, slurm_job_from_env
from gpuclinic.supervise.classify import Classification
from gpuclinic.supervise.jobspec import RunOptions
from realtools import require

from .slurmcluster import SlurmCluster

TRAINER = Path(__file__).resolve().parents[1] / "supervise" / "fake_trainer.py"


def _rows(db: Path) -> list[tuple[str, str]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return [(r[0], r[1]) for r in conn.execute("SELECT class, action FROM interruptions ORDER BY id")]
    except sqlite3.Error:
        return []
    finally:
        conn.close()


@pytest.mark.timeout(180)
def test_gpu_fault_in_a_slurm_job_drains_and_requeues(cluster: SlurmCluster, tmp_path: Path) -> None:
    require("sbatch", "scancel")
    db = tmp_path / "ledger.db"
    inner = [sys.executable, "-m", "gpuclinic", "run", "--skip-preflight", "--scenario", "fallen-off-bus",
             "--db", str(db), "--backoff", "0", "--stop-timeout", "2s", "--sample-interval", "0.1s",
             "--", sys.executable, str(TRAINER), "--ckpt", str(tmp_path / "ckpt"), "--fail", "exit3",
             "--fail-attempts", "9"]
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--requeue",
            "-o",
            str(tmp_path / "job-%j.out"),
            "--wrap",
            shlex.join(inner),
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
        env={**cluster.env, "GPUCLINIC_NO_NVML": "1"},
    ).stdout
    job = out.strip().split(";")[0]
    try:
        cluster.wait(
            lambda: "Restarts=1" in cluster.scontrol("-o", "show", "job", job), "the job to be requeued", 60
        )
        assert (cluster.reason() or "").startswith(f"gpuclinic: run: gpu_hardware GPU 4 (job {job})"), (
            cluster.reason()
        )
        assert "DRAIN" in cluster.state()
        assert _rows(db) == [("gpu_hardware", "requeue")]
        log = next(tmp_path.glob("job-*.out")).read_text()
        assert f"Slurm job {job}" in log and f"requeueing Slurm job {job}" in log, log
    finally:
        subprocess.run(["scancel", job], env=cluster.env, timeout=20, check=False)


def test_outside_slurm_and_local_decisions() -> None:
    assert slurm_job_from_env({}) is None
    job = slurm_job_from_env(
        {
            "SLURM_JOB_ID": "42",
            "SLURMD_NODENAME": "n1",
            "SLURM_JOB_GPUS": "2,3",
            "CUDA_VISIBLE_DEVICES": "0,1",
        }
    )
    assert job is not None and job.gpus == ["2", "3"] and job.gpu_var == "SLURM_JOB_GPUS"
    sup = SlurmSupervisor(RunOptions(cmd=["true"], exclude_bad_gpu=False), job=job)
    hw = Classification(cls="gpu_hardware", summary="x", gpu=GpuRef(index=2))
    assert sup._decide(hw, 0, [])[0] == "requeue"
    # an application error is not the node's fault: the normal decision stands
    assert sup._decide(Classification(cls="application_error", summary="y"), 0, [])[0] == "give_up"
