from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from supervise_helpers import RunResult, child_env, run_cmd


@pytest.fixture
def gpuclinic_run(tmp_path: Path) -> Callable[..., RunResult]:
    def _run(run_args: list[str], trainer_args: list[str], env: dict[str, str] | None = None,
             timeout: float = 40) -> RunResult:
        r = subprocess.run(run_cmd(tmp_path, run_args, trainer_args), capture_output=True, text=True,
                           env=child_env(env), timeout=timeout)
        return RunResult(r.returncode, r.stdout, r.stderr, tmp_path / "ledger.db", tmp_path / "ckpt")

    return _run

