from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/realtools.py (require a real tool: skip locally, fail with CI=true) is importable everywhere
sys.path.insert(0, str(Path(__file__).parent))

import background  # tests/background.py, importable through the path above

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


# tests whose long, self-contained command starts when the session starts (tests/background.py):
# node id suffix -> the function of the test's module that starts it
BACKGROUND = {
    "test_quality.py::test_mypy_clean": "start_mypy",
    "cli/test_readme.py::test_quick_start_runs": "start_quick_start",
    "watch/test_watch_deploy.py::test_promtool_rule_unit_tests": "start_rule_unit_tests",
    "accept/test_device_check.py::test_device_check_with_a_scenario": "start_device_check",
}


def pytest_configure(config: pytest.Config) -> None:
    """The session's folder for the BACKGROUND jobs, made before xdist starts its workers."""
    if not hasattr(config, "workerinput"):
        background.begin_session()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the BACKGROUND commands of the tests that are going to run (once per session: under
    xdist every worker collects every test, and the first to claim a job starts it).  First among
    this hook's implementations, so a worker has started its jobs before it reports its collection
    and xdist hands out the first test."""
    if session.config.option.collectonly:
        return
    for item in session.items:
        for suffix, starter in BACKGROUND.items():
            if not isinstance(item, pytest.Function) or not item.nodeid.endswith(suffix):
                continue
            if background.claim(starter):
                getattr(item.module, starter)()


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
