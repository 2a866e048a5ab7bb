"""`gpuclinic k8s npd` keeps node-problem-detector's plugin contract: exit 0/1/2, one short stdout line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuclinic.k8s.npd import cut, plugin_result


def npd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", "k8s", "npd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("scenario", "rc", "msg"),
    [
        ("fallen-off-bus", 1, "drain: gpu.fallen_off_bus GPU 4"),
        ("overheating", 1, "drain: thermal.slowdown GPU 3"),
        ("straggler", 0, "warning: perf.straggler GPU 6 (+1 more)"),
        ("healthy-8xh100-load", 0, "healthy: 8 GPUs"),
    ],
)
def test_exit_and_message(scenario: str, rc: int, msg: str) -> None:
    p = npd("--scenario", scenario)
    assert (p.returncode, p.stdout) == (rc, msg + "\n"), p.stderr


def test_warning_can_count_as_a_problem() -> None:
    p = npd("--scenario", "straggler", "--fail-on", "warning")
    assert p.returncode == 1 and p.stdout.startswith("warning: perf.straggler")


def test_could_not_check_is_unknown_and_short() -> None:
    from gpuclinic.diagnose import diagnose
    from gpuclinic.facts.snapshot import Snapshot

    snap = Snapshot(origin="live", nvml_available=False)  # a node whose driver does not load: nothing seen
    snap.skip("GPUs through NVML", "NVML library not found (libnvidia-ml.so.1)")
    res = plugin_result(diagnose(snap))
    assert res.status == 2 and res.message.startswith("gpuclinic could not judge: no GPUs seen")
    assert len(res.message.encode()) <= 80
    boom = plugin_result(None, error="RuntimeError: " + "x" * 200)
    assert boom.status == 2 and len(boom.message.encode()) == 80 and "\n" not in boom.message


def test_message_is_cut_to_max_output_length() -> None:
    p = npd("--scenario", "fallen-off-bus", "--max-output-length", "20")
    assert p.returncode == 1 and len(p.stdout.rstrip("\n").encode()) <= 20 and p.stdout.endswith("...\n")
    assert cut("é" * 50, 11) == "éééé..."  # never half a character
    assert cut("a\nb   c", 80) == "a b c"
