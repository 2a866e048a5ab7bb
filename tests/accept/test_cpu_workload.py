"""The whole flow with a real child workload: Debian's CPU PyTorch for /usr/bin/python3 runs the
workload's code path on ``--device cpu``; NVML comes from a scenario or is absent (this machine).
Also: Ctrl-C stops the workload at once, and a Python without torch/CuPy is reported, not crashed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuclinic.accept.runner import device_labels
from realtools import require


def accept(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", "accept", *args], capture_output=True, text=True, timeout=timeout
    )


def by_id(doc: dict[str, Any], iid: str) -> dict[str, dict[str, Any]]:
    return {str(i["gpu"]): i for i in doc["items"] if i["id"] == iid}


def test_live_cpu_run_with_torch_measures_and_judges_the_host(tmp_path: Path) -> None:
    py = require("python3-torch")["python3-torch"]
    p = accept(
        "--quick",
        "--device",
        "cpu",
        "--python",
        py,
        "--burn",
        "4",
        "--json",
        "--data-dir",
        str(tmp_path),
        "--no-store",
    )
    assert p.returncode in (0, 1, 2), p.stderr
    doc = json.loads(p.stdout)
    assert doc["backend"].startswith("torch ") and doc["backend"].endswith("(cpu)")
    assert doc["python"] == py and doc["device"] == "cpu"
    mm = by_id(doc, "gpu.matmul.bf16")["cpu"]
    assert mm["measured"] > 0 and mm["status"] == "skipped" and "no expectation for a CPU" in mm["why"]
    assert by_id(doc, "gpu.hbm")["cpu"]["measured"] > 0
    assert "no host<->device link" in by_id(doc, "gpu.pcie.h2d")["cpu"]["why"]
    (cpu_series,) = doc["burn"]["series"]
    assert cpu_series["gpu"] == "cpu" and len(cpu_series["tflops"]) >= 3 and min(cpu_series["tflops"]) > 0
    thr = by_id(doc, "burn.throughput")["cpu"]
    assert thr["status"] in ("pass", "warn", "fail") and thr["measured"] > 0  # a real ratio, judged
    # health: no NVML on this machine -> skipped with the reason, not a crash
    assert by_id(doc, "health")["None"]["status"] == "skipped"
    assert by_id(doc, "network")["None"]["why"].startswith("--quick")
    disk = by_id(doc, "host.disk.seq")["None"]
    assert disk["measured"] > 0 and disk["status"] in ("pass", "warn", "fail")
    assert not list(tmp_path.iterdir())  # the temp file is gone
    assert by_id(doc, "host.shm")["None"]["measured"] > 0
    assert by_id(doc, "host.membw")["None"]["measured"] > 0


def test_scenario_with_cpu_workload_runs_both(tmp_path: Path) -> None:
    py = require("python3-torch")["python3-torch"]
    p = accept(
        "--scenario",
        "straggler",
        "--force",
        "--device",
        "cpu",
        "--python",
        py,
        "--burn",
        "3",
        "--json",
        "--no-store",
    )
    assert p.returncode == 2, p.stderr
    doc = json.loads(p.stdout)
    assert doc["backend"].startswith("simulated") and "workload: torch" in doc["backend"]
    assert by_id(doc, "gpu.matmul.bf16")["6"]["status"] == "fail"  # the simulated GPUs are judged
    assert by_id(doc, "gpu.matmul.bf16")["cpu"]["measured"] > 0  # and the real CPU workload ran
    series = {s["gpu"]: s for s in doc["burn"]["series"]}
    assert set(series) == {"cpu", *map(str, range(8))}
    assert len(series["cpu"]["tflops"]) >= 2
    assert len(series["0"]["t"]) >= 2 and series["6"]["sm_clock_mhz"][-1] == 1365.0  # sampled in real time


def _as_at_a_terminal() -> None:
    """In the child before exec: SIGINT delivered and handled by default, as for a command a user runs at a
    terminal (a test process may hand down an ignored or blocked SIGINT, which Python then honours)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _sigint_state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "?"
    return " ".join(ln.replace("\t", "") for ln in status.splitlines() if ln.startswith(("SigBlk", "SigIgn")))


def test_ctrl_c_stops_the_workload_at_once(tmp_path: Path) -> None:
    py = require("python3-torch")["python3-torch"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "accept",
            "--quick",
            "--device",
            "cpu",
            "--python",
            py,
            "--burn",
            "120",
            "--json",
            "--no-store",
            "--progress",  # stderr is a pipe: ask for the step lines, to see when the burn begins
            "--data-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_at_a_terminal,
    )
    err_lines: list[str] = []
    burning = threading.Event()

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line)
            if line.startswith("burn: first figure"):  # the burn runs and has been measured once
                burning.set()

    out_parts: list[str] = []

    def read_out() -> None:  # drained all along, so a large JSON document cannot block the process
        assert proc.stdout is not None
        out_parts.append(proc.stdout.read())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_err, read_out)]
    for r in readers:
        r.start()
    try:
        me = psutil.Process(proc.pid)
        assert burning.wait(120), "the burn never started:\n" + "".join(err_lines)
        child = next((c for c in me.children(recursive=True) if "workload.py" in " ".join(c.cmdline())), None)
        assert child is not None, "no workload process during the burn"
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # say what was still running, and what accept last said
            tree = [
                f"{c.pid} {c.status()} {' '.join(c.cmdline())[:120]}" for c in me.children(recursive=True)
            ]
            pytest.fail(
                f"accept still runs 20 s after Ctrl-C ({me.status()}, {_sigint_state(proc.pid)}); "
                f"children: {tree}; stderr:\n" + "".join(err_lines[-20:])
            )
        took = time.monotonic() - t0
        for r in readers:
            r.join(10)
        out = "".join(out_parts)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(err_lines)
    assert proc.returncode == 130, err
    assert took < 8
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    doc = json.loads(out)
    assert any(n.startswith("interrupted by Ctrl-C") for n in doc["notes"])
    assert "interrupted (Ctrl-C)" in by_id(doc, "burn")["cpu"]["why"]


def test_python_without_torch_or_cupy_says_why(tmp_path: Path) -> None:
    # an interpreter with neither library: the venv's own python (the project does not depend on torch)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; print(bool(u.find_spec('torch') or u.find_spec('cupy')))",
        ],
        capture_output=True,
        text=True,
    )
    if probe.stdout.strip() == "True":
        import pytest

        pytest.skip("this interpreter has torch or cupy")
    p = accept(
        "--scenario",
        "straggler",
        "--force",
        "--device",
        "cpu",
        "--python",
        sys.executable,
        "--burn",
        "0",
        "--json",
        "--no-store",
    )
    doc = json.loads(p.stdout)
    assert "workload: none (torch not importable" in doc["backend"]
    assert "cupy" in doc["backend"]


def test_device_labels_map_cuda_order_to_nvml_indices() -> None:
    nvml: list[tuple[int, str | None, str | None]] = [
        (0, "0000:18:00.0", "GPU-a"),
        (1, "0000:2a:00.0", "GPU-b"),
        (2, "0000:3a:00.0", "GPU-c"),
    ]
    devs: list[dict[str, Any]] = [
        {"index": 0, "bus_id": "0000:3a:00.0", "uuid": None},
        {"index": 1, "bus_id": None, "uuid": "GPU-a"},
        {"index": 2, "bus_id": None, "uuid": None},
    ]
    assert device_labels(devs, nvml, "cuda") == {0: "2", 1: "0", 2: "1"}  # by bus id, by UUID, the one left
    devs = [{"index": 0, "bus_id": "00000000:2A:00.0", "uuid": None}, {"index": 1, "uuid": "c"}]
    assert device_labels(devs, nvml, "cuda") == {
        0: "1",
        1: "2",
    }  # NVML's bus-id spelling; UUID without "GPU-"
    assert device_labels([{"index": 0}], [], "cpu") == {0: "cpu"}


def test_a_python_that_is_not_python_is_reported(tmp_path: Path) -> None:
    p = accept(
        "--quick",
        "--burn",
        "0",
        "--python",
        "/bin/true",
        "--json",
        "--no-store",
        "--data-dir",
        str(tmp_path),
        "--device",
        "cpu",
    )
    doc = json.loads(p.stdout)
    assert "workload exited with 0 before reporting a backend" in doc["backend"]
    assert "workload exited with 0" in by_id(doc, "gpu.matmul")["cpu"]["why"]
    assert p.returncode == 3  # nothing about the GPUs could be judged
