"""ruff and mypy are part of the test run: a lint or type error fails CI like a broken test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

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
    """One run over src, tests and bench (the file list is in pyproject.toml)."""
    r = _run("mypy")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_checks_stay_strict() -> None:
    """Line length, complexity and strict typing are enforced, not merely configured."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    lint = cfg["tool"]["ruff"]["lint"]
    assert cfg["tool"]["ruff"]["line-length"] == 110
    assert {"E", "C90"} <= set(lint["select"]) and "E501" not in lint.get("ignore", [])
    assert lint["mccabe"]["max-complexity"] <= 15
    assert not lint.get("per-file-ignores"), "no file opts out of the line length or complexity limit"
    mypy = cfg["tool"]["mypy"]
    assert mypy["strict"] is True and mypy["warn_unreachable"] is True
    assert {"src/gpuclinic", "tests", "bench"} <= set(mypy["files"])
    assert not any(o.get("ignore_errors") or o.get("disable_error_code") for o in mypy.get("overrides", []))


MAX_MODULE_LINES = 600  # the house style (CONTRACT: "Modules under ~600 lines")


def test_modules_stay_small() -> None:
    """Issues 10 and 14: no module anywhere in src/ over 600 lines."""
    files = list((ROOT / "src").rglob("*.py"))
    assert len(files) > 100  # the walk found the package, not an empty directory
    big = {str(p.relative_to(ROOT)): n for p in files
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not big, big
