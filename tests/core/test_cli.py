from __future__ import annotations

import json
import os
import subprocess
import sys


def run_cli(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", *args],
        capture_output=True,
        text=True,
        input=input,
        env=e,
        timeout=120,
    )


def test_doctor_runs_without_gpu_and_says_why() -> None:
    r = run_cli("doctor", "--quick", "--json")
    assert r.returncode in (0, 1, 2), r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuclinic.report/2"
    assert any("NVML" in s["what"] for s in d["skipped"]) or d["gpus"]


def test_unknown_command_is_one_line_error() -> None:
    r = run_cli("frobnicate")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_conflicting_formats() -> None:
    r = run_cli("doctor", "--json", "--markdown")
    assert r.returncode == 64 and r.stderr.startswith("gpuclinic: error:")
