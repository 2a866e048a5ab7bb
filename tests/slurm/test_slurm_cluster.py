"""The Slurm cycle against a real single-node slurmctld + slurmd + munged (tests/slurm/slurmcluster.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from realtools import require

from .slurmcluster import SlurmCluster

pytestmark = pytest.mark.timeout(180)


def gpuclinic(
    c: SlurmCluster, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**c.env, **(env or {})},
        check=False,
    )


def test_healthcheck_drains_then_resumes_its_own_drain(cluster: SlurmCluster) -> None:
    p = gpuclinic(cluster, "slurm", "healthcheck", "--scenario", "fallen-off-bus")
    assert p.returncode == 2, p.stderr
    assert "DRAIN" in cluster.state()
    reason = cluster.reason() or ""
    assert reason.startswith("gpuclinic: gpu.fallen_off_bus GPU 4 ["), reason  # "[root@time]" follows
    assert "drained" in p.stderr

    # still bad: stays drained, reason unchanged, no second update
    p = gpuclinic(cluster, "slurm", "healthcheck", "--scenario", "fallen-off-bus")
    assert p.returncode == 2 and "stays drained" in p.stderr, p.stderr

    # a different cause replaces gpuclinic's own reason
    p = gpuclinic(cluster, "slurm", "healthcheck", "--scenario", "overheating")
    assert p.returncode == 2, p.stderr
    assert (cluster.reason() or "").startswith("gpuclinic: thermal.slowdown GPU 3 ["), cluster.reason()

    p = gpuclinic(cluster, "slurm", "healthcheck", "--scenario", "healthy-8xh100-load")
    assert p.returncode == 0, p.stderr
    assert "resumed" in p.stderr
    cluster.wait(lambda: cluster.state() == "IDLE", "resume", 20)
    assert cluster.reason() is None


def test_admin_drain_is_never_touched(cluster: SlurmCluster) -> None:
    cluster.scontrol("update", f"NodeName={cluster.node}", "State=DRAIN", "Reason=admin: maint")
    for scenario, rc in (("healthy-8xh100-load", 0), ("fallen-off-bus", 2), ("healthy-8xh100-load", 0)):
        p = gpuclinic(cluster, "slurm", "healthcheck", "--scenario", scenario)
        assert p.returncode == rc, p.stderr
        assert "not touched" in p.stderr, p.stderr
        assert "DRAIN" in cluster.state()
        assert (cluster.reason() or "").startswith("admin: maint ["), cluster.reason()


def test_warning_does_not_drain(cluster: SlurmCluster) -> None:
    p = gpuclinic(cluster, "slurm", "healthcheck", "--scenario", "straggler")
    assert p.returncode == 1, p.stderr
    assert cluster.state() == "IDLE" and cluster.reason() is None


def test_slurm_unreachable_is_exit_3_and_one_line(cluster: SlurmCluster, tmp_path: object) -> None:
    p = gpuclinic(cluster, "slurm", "healthcheck", "--scenario", "fallen-off-bus", "--node", "no-such-node")
    assert p.returncode == 3
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert cluster.state() == "IDLE"


def _job_state(c: SlurmCluster, job: str) -> str:
    out = c.scontrol("-o", "show", "job", job)
    return out.split(" JobState=", 1)[1].split()[0]


def _submit_touch(cluster: SlurmCluster, marker: Path) -> str:
    """Submit a job that creates ``marker`` (so a test sees whether it ran); its job id."""
    out = subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", f"touch {marker}"],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=20,
        check=True,
    ).stdout
    return out.strip().split(";")[0]

def test_prolog_refuses_a_job_on_a_bad_gpu(cluster: SlurmCluster) -> None:
    """The real prolog (slurm.conf Prolog=) runs `gpuclinic slurm prolog`: the job never runs, the node
    is drained with gpuclinic's reason, and the job goes back to the queue."""
    require("sbatch", "scancel")
    cluster.prolog_scenario.write_text("fallen-off-bus")
    marker = cluster.root / "job-ran"
    job = _submit_touch(cluster, marker)
    cluster.wait(lambda: "DRAIN" in cluster.state(), "the prolog to drain the node", 40)
    cluster.wait(lambda: _job_state(cluster, job) == "PENDING", "the job to be requeued", 30)
    assert (cluster.reason() or "").startswith("gpuclinic: gpu.fallen_off_bus GPU 4"), cluster.reason()
    time.sleep(1)
    assert not marker.exists()
    log = (cluster.root / "prolog.log").read_text()
    assert "prolog: gpuclinic: gpu.fallen_off_bus GPU 4" in log, log
    subprocess.run(["scancel", job], env=cluster.env, timeout=20, check=False)


def test_prolog_lets_a_job_on_good_gpus_run(cluster: SlurmCluster) -> None:
    require("sbatch")
    cluster.prolog_scenario.write_text("healthy-8xh100-load")
    marker = cluster.root / "job-ran-ok"
    job = _submit_touch(cluster, marker)
    cluster.wait(lambda: marker.exists(), "the job to run", 40)
    cluster.wait(lambda: _job_state(cluster, job) == "COMPLETED", "the job to complete", 30)
    assert cluster.state() == "IDLE"
    log = (cluster.root / "prolog.log").read_text()
    assert "prolog: job GPUs ok" in log and "epilog: job GPUs ok" in (cluster.root / "epilog.log").read_text()


def test_slurmd_runs_the_health_check_program(cluster: SlurmCluster) -> None:
    """slurm.conf HealthCheckProgram + HealthCheckInterval, as in docs/slurm.md: slurmd itself runs the
    check, which drains the node, and resumes it once the GPU is fine again."""
    cluster.health_scenario.write_text("fallen-off-bus")
    cluster.wait(lambda: "DRAIN" in cluster.state(), "slurmd's health check to drain the node", 40)
    assert (cluster.reason() or "").startswith("gpuclinic: gpu.fallen_off_bus GPU 4"), cluster.reason()
    cluster.health_scenario.write_text("healthy-8xh100-load")
    cluster.wait(lambda: cluster.state() == "IDLE", "slurmd's health check to resume the node", 40)
    log = (cluster.root / "healthcheck.log").read_text()
    assert "drained" in log and "resumed" in log, log


def test_prolog_and_epilog_look_at_the_jobs_gpus_only(cluster: SlurmCluster) -> None:
    # GPU 4 fell off the bus; a job on GPUs 0,1 may start, and its epilog leaves the node alone
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"}
    for kind in ("prolog", "epilog"):
        p = gpuclinic(cluster, "slurm", kind, "--scenario", "fallen-off-bus", env=env)
        assert p.returncode == 0 and f"{kind}: job GPUs ok (SLURM_JOB_GPUS=0,1" in p.stderr, p.stderr
    assert cluster.state() == "IDLE"
    # a job that used GPU 4: the epilog drains the node with gpuclinic's reason and exits 0
    p = gpuclinic(
        cluster, "slurm", "epilog", "--scenario", "fallen-off-bus", env={**env, "SLURM_JOB_GPUS": "3,4"}
    )
    assert p.returncode == 0 and "drained" in p.stderr, p.stderr
    assert "DRAIN" in cluster.state() and (cluster.reason() or "").startswith(
        "gpuclinic: gpu.fallen_off_bus GPU 4"
    )
    # --no-drain: the problem is reported by the exit status and Slurm does the draining
    cluster.reset_node()
    p = gpuclinic(
        cluster,
        "slurm",
        "epilog",
        "--no-drain",
        "--scenario",
        "fallen-off-bus",
        env={**env, "SLURM_JOB_GPUS": "4"},
    )
    assert p.returncode == 1 and cluster.state() == "IDLE", p.stderr
