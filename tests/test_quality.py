"""ruff and mypy are part of the test run: a lint or type error fails CI like a broken test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_clean() -> None:
    r = _run("ruff", "check", "src", "tests", "bench")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.timeout(600)
def test_mypy_clean() -> None:
    r = _run("mypy")
    assert r.returncode == 0, r.stdout + r.stderr
