from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/realtools.py (require a real tool: skip locally, fail with CI=true) is importable everywhere
sys.path.insert(0, str(Path(__file__).parent))

import background  # tests/background.py, importable through the path above

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_finish(session: pytest.Session) -> None:
    """mypy starts now, niced, when test_quality's test_mypy_clean is going to run (tests/background.py)."""
    if session.config.option.collectonly:
        return
    if any(item.nodeid.endswith("test_quality.py::test_mypy_clean") for item in session.items):
        background.start("mypy", [sys.executable, "-m", "mypy"], ROOT)


def pytest_sessionfinish(session: pytest.Session) -> None:
    background.stop_all()


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test away from the real user's store and config."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("GPUCLINIC_DB", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
