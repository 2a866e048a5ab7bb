"""Bad input to the Slurm and Kubernetes commands: one error line, no traceback, never a drain."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(("args", "rc", "msg"), [
    (["slurm", "healthcheck", "--scenario", "fallen-off-bus", "--node", "a b"], 64, "not a Slurm node name"),
    (["slurm", "healthcheck", "--scenario", "nosuch", "--report-only"], 64, "unknown scenario 'nosuch'"),
    (["slurm", "healthcheck", "--scenario", "fallen-off-bus", "--scontrol", "/nonexistent/scontrol",
      "--node", "n1"], 3, "cannot run /nonexistent/scontrol"),
    (["k8s", "condition", "--scenario", "healthy-8xh100-load", "--every", "soon", "--dry-run", "client"], 64,
     "--every"),
    (["k8s", "evidence", "--scenario", "healthy-8xh100-load", "--device-plugin-config", "{bad}"], 64,
     "device-plugin config: expected a mapping"),
    (["k8s", "evidence", "--scenario", "healthy-8xh100-load", "--node-json", "{bad}"], 64,
     "not a Node object"),
])
def test_bad_input(args: list[str], rc: int, msg: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("just a string\n")
    args = [a.replace("{bad}", str(bad)) for a in args]
    p = subprocess.run([sys.executable, "-m", "gpuclinic", *args], capture_output=True, text=True, timeout=60,
                       check=False)
    assert p.returncode == rc, (p.returncode, p.stderr)
    assert msg in p.stderr and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr


def test_prolog_that_cannot_check_lets_the_job_start() -> None:
    """A broken check must not refuse jobs (a failing prolog drains the node and requeues the job)."""
    p = subprocess.run([sys.executable, "-m", "gpuclinic", "slurm", "prolog", "--scenario", "nosuch"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and "could not check" in p.stderr and "letting the job start" in p.stderr, (
        p.stderr
    )


def _fallen_node_without_scontrol(hook: str) -> subprocess.CompletedProcess[str]:
    """The Slurm ``hook`` on a node whose GPU fell off the bus, with an scontrol that cannot run."""
    argv = [sys.executable, "-m", "gpuclinic", "slurm", hook, "--scenario", "fallen-off-bus"]
    argv += ["--scontrol", "/nonexistent/scontrol", "--node", "n1"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

def test_epilog_that_finds_a_problem_but_cannot_drain_fails() -> None:
    """Then Slurm drains the node itself ("Epilog error"): the problem is never swallowed."""
    p = _fallen_node_without_scontrol("epilog")
    assert p.returncode == 1 and "could not drain" in p.stderr, p.stderr


def test_prolog_that_finds_a_problem_but_cannot_drain_still_refuses() -> None:
    """The GPU was judged bad; only the drain failed (slurmctld down): the job must not start on it."""
    p = _fallen_node_without_scontrol("prolog")
    assert p.returncode == 1 and "gpu.fallen_off_bus" in p.stderr and "could not drain" in p.stderr, p.stderr
