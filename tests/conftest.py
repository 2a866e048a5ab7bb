from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# tests/realtools.py (require a real tool: skip locally, fail with CI=true) is importable everywhere
sys.path.insert(0, str(Path(__file__).parent))

import background  # tests/background.py, importable through the path above

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]

# the compiled-regex cache and explain's scan plan (gpuclinic/recache.py, scanplan.py) of this run, shared
# by its workers and the commands its tests start: a plan an older checkout left (other literals) would
# start scans the readers then start again, and tests count those scans
if not os.environ.get("GPUCLINIC_RECACHE_DIR"):
    os.environ["GPUCLINIC_RECACHE_DIR"] = tempfile.mkdtemp(prefix="gpuclinic-cache-")
    atexit.register(shutil.rmtree, os.environ["GPUCLINIC_RECACHE_DIR"], True)


# tests whose long, self-contained command starts when the session starts (tests/background.py):
# node id suffix -> the function of the test's module that starts it
BACKGROUND = {
    "test_quality.py::test_mypy_clean": "start_mypy",
    "cli/test_readme.py::test_quick_start_runs": "start_quick_start",
    "watch/test_watch_deploy.py::test_promtool_rule_unit_tests": "start_rule_unit_tests",
    "accept/test_device_check.py::test_device_check_with_a_scenario": "start_device_check",
}


# test files that take longest (summed test durations of a 2-worker run on 2 cores, most first): they go
# out first, so that the two workers end together instead of one running a long file alone at the end
# (test_sync's solo tests wait for the other worker's test at hand: short ones beside it at the start)
HEAVY_FIRST = (
    "transfer/test_sync.py",
    "supervise/test_run_e2e.py",
    "transfer/test_get_image.py",
    "cli/test_bad_input.py",
    "accept/test_cpu_workload.py",
    "room/test_ipmi_sim.py",
    "transfer/test_get_url.py",
    "watch/test_watch_incidents.py",
    "slurm/test_slurm_cluster.py",
    "network/test_net_registries.py",
    "accept/test_cli.py",
    "fleet/test_fleet_page.py",
    "accept/test_live_fake_nvml.py",
    "network/test_probes.py",
)


def _file_rank(item: pytest.Item) -> int:
    """0.. for HEAVY_FIRST, then the rest; last the files whose test reads a BACKGROUND job (it has
    had the whole run to finish by then)."""
    rel = item.nodeid.split("::", 1)[0].removeprefix("tests/")
    if rel in HEAVY_FIRST:
        return HEAVY_FIRST.index(rel)
    if any(suffix.split("::", 1)[0] == rel for suffix in BACKGROUND):
        return len(HEAVY_FIRST) + 1
    return len(HEAVY_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole files move (heavy first, BACKGROUND readers last); within a file the order stays."""
    items.sort(key=_file_rank)  # stable


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


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n`` (scripts/test): one test file is one unit of work, so a module's server fixture
    (a registry with a 200 MiB image, sshd, a Slurm cluster) starts once, in one worker; the units
    go out in collection order (HEAVY_FIRST puts the long ones first, so none is left for the end)."""
    if config.option.dist != "load":  # an explicit --dist other than the default of -n
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist, a ``solo`` test (one that asserts a transfer's speed against the link's caps) runs
    while the other worker waits: every other test holds a session lock file shared, from its first
    fixture to its last teardown, and a solo test holds it exclusive.  A second lock file (the gate) is
    held exclusive by a solo test while it waits, so that the other worker cannot start test after test
    and keep it waiting."""
    root = os.environ.get(background.ENV)
    if not os.environ.get("PYTEST_XDIST_WORKER") or not root:
        yield
        return
    with open(Path(root) / "solo.gate", "a") as gate, open(Path(root) / "solo.lock", "a") as lock:
        if item.get_closest_marker("solo") is not None:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(lock, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # the locks go with the files


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
    # the caller's terminal width is not the tests' (pytest-xdist's workers get COLUMNS=80): the
    # renderers' widths are what a test sets itself
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
