from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/realtools.py (require a real tool: skip locally, fail with CI=true) is importable everywhere
sys.path.insert(0, str(Path(__file__).parent))

FIXTURES = Path(__file__).parent / "fixtures"


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
