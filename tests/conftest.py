from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# test files that take longest (summed test durations of a 2-worker run on 2 cores, most first): they go
# out first, so that the two workers end together instead of one running a long file alone at the end
# (the cpu_burn file a little later: it would wait for the throughput ones, see _cpu_burn_apart)
HEAVY_FIRST = (
    "transfer/test_sync.py",
    "transfer/test_get_image.py",
    "supervise/test_run_e2e.py",
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


def pytest_sessionfinish(session: pytest.Session) -> None:
    background.stop_all()


@pytest.fixture(autouse=True)
def _cpu_burn_apart(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under xdist, a ``cpu_burn`` test (torch on every core) and a ``throughput`` test (a transfer's
    speed asserted) never run at the same time in the two workers: a lock file of the session, held
    exclusive by the one and shared by the other (throughput tests may run beside each other)."""
    burn = request.node.get_closest_marker("cpu_burn") is not None
    timed = request.node.get_closest_marker("throughput") is not None
    root = os.environ.get(background.ENV)
    if not (burn or timed) or not os.environ.get("PYTEST_XDIST_WORKER") or not root:
        yield
        return
    with open(Path(root) / "cpu.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if burn else fcntl.LOCK_SH)
        yield


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
