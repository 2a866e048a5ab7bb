"""The live path with NVML answered by the project's fake pynvml (tests/nvml/fake_pynvml.py) and a
real child: GPUs running other processes are hidden from the workload (CUDA_VISIBLE_DEVICES), the
CPU-only torch build is reported as "cannot use CUDA", and nothing state-changing reaches NVML."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from gpuclinic.accept.run import AcceptOptions, run_accept
from realtools import require

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml"))
from fake_pynvml import FakeGpu, FakeNvml


@pytest.mark.timeout(120)
def test_busy_gpus_hidden_and_cpu_torch_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch_py = require("python3-torch")["python3-torch"]
    gpus = [FakeGpu(i) for i in range(4)]
    for g in gpus[:2]:
        g.set("nvmlDeviceGetComputeRunningProcesses", [])  # GPUs 0 and 1 are free; 2 and 3 run pid 4244/4245
    fake = FakeNvml(gpus).install(monkeypatch)
    # the user's "python": records the environment accept gives it, then runs Debian's torch
    seen = tmp_path / "env.txt"
    shim = tmp_path / "python"
    shim.write_text(
        f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES|$CUDA_DEVICE_ORDER" > {seen}\nexec {torch_py} "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sc = run_accept(AcceptOptions(mode="quick", python=str(shim), burn_s=2, data_dir=str(tmp_path)))
    assert (
        seen.read_text().strip()
        == "GPU-00000000-aaaa-bbbb-cccc-000000000000,GPU-00000001-aaaa-bbbb-cccc-000000000001|PCI_BUS_ID"
    )
    assert (
        sc.backend is not None
        and "cannot use CUDA here" in sc.backend
        and "cupy not importable" in sc.backend
    )
    items = {(i.id, i.gpu): i for i in sc.items}
    assert "no GPU backend: torch: RuntimeError: torch" in items[("gpu.matmul.bf16", "0")].why
    assert "GPU 2 is running other processes (pid 4244" in items[("gpu.matmul.bf16", "2")].why
    assert "peer tests need them all" in items[("gpu.allreduce", "all")].why
    assert items[("health", None)].status in ("pass", "warn", "fail")  # doctor ran on the (fake) NVML facts
    assert sc.exit_code in (2, 3) and sc.gpus[0]["sku"] == "H100 SXM"
    assert any("GPU(s) 2, 3 run other processes" in n for n in sc.notes)
    assert not fake.mutating_calls  # never a Set/Reset/Clear: clocks and power limits untouched
    assert os.environ.get("CUDA_VISIBLE_DEVICES") is None  # only the child's environment was changed
