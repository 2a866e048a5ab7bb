"""Shipped deploy files: promtool-clean rules with passing unit tests, and every metric they (and the
Grafana dashboard) query exists in what the agent actually exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
from prometheus_client import generate_latest

import background
from gpuclinic.watch.agent import Agent
from gpuclinic.watch.metrics import make_registry
from realtools import require

DEPLOY = Path(str(resources.files("gpuclinic.watch").joinpath("deploy")))


@pytest.fixture
def _promtool() -> None:
    require("promtool")


needs_promtool = pytest.mark.usefixtures("_promtool")
_NAME = re.compile(r"\b(gpuclinic_[a-z0-9_]+)")


@needs_promtool
def test_promtool_check_rules() -> None:
    r = subprocess.run(
        ["promtool", "check", "rules", str(DEPLOY / "gpuclinic-rules.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def _rule_tests_in(d: Path) -> list[str]:
    for f in ("gpuclinic-rules.yml", "gpuclinic-rules.test.yml"):
        shutil.copy(DEPLOY / f, d / f)
    return ["promtool", "test", "rules", "gpuclinic-rules.test.yml"]


def start_rule_unit_tests() -> None:
    """Called by conftest.py when the session starts: the rule unit tests are seconds of promtool's
    CPU that need nothing from the other tests (tests/background.py)."""
    if shutil.which("promtool"):
        tmp = background.workdir("promtool-rules")  # removed with the session
        background.start("promtool-rules", _rule_tests_in(tmp), tmp)


@needs_promtool
def test_promtool_rule_unit_tests(tmp_path: Path) -> None:
    r = background.result("promtool-rules", timeout=60)
    if r is None:  # not started with the session
        r = subprocess.run(_rule_tests_in(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def _exported(agent_factory: Callable[..., Agent], scenario: str, secs: float) -> set[str]:
    a = agent_factory(scenario, scale=60)
    a.run(duration_s=secs)
    names = set()
    for line in generate_latest(make_registry(a)).decode().splitlines():
        if line.startswith("# TYPE "):
            name, typ = line.split()[2:4]
            names.add(name + "_total" if typ == "counter" and not name.endswith("_total") else name)
    return names


def test_rules_and_dashboard_only_use_exported_metrics(agent_factory: Callable[..., Agent]) -> None:
    names = _exported(agent_factory, "demo", 70) | _exported(agent_factory, "memory-errors", 30)
    rules = set(_NAME.findall((DEPLOY / "gpuclinic-rules.yml").read_text()))
    dash = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = rules | {n for e in exprs for n in _NAME.findall(e)}
    assert used - names == set()
    assert len(exprs) >= 15 and {p["type"] for p in dash["panels"]} >= {
        "stat",
        "timeseries",
        "state-timeline",
    }


def test_systemd_unit_and_daemonset_run_the_agent() -> None:
    unit = (DEPLOY / "gpuclinic-watch.service").read_text()
    assert re.search(r"^ExecStart=/usr/local/bin/gpuclinic watch .*--db /var/lib/gpuclinic/", unit, re.M)
    assert "Restart=always" in unit and "NoNewPrivileges=yes" in unit
    ds = (DEPLOY / "daemonset.yaml").read_text()
    assert "kind: DaemonSet" in ds and '"watch", "--listen", "0.0.0.0:9847"' in ds
    assert "secretKeyRef" in ds and "metrics_require_token = false" in ds
    if shutil.which("systemd-analyze"):
        pass  # verifying needs the binary path to exist; the regexes above cover the contract


def test_shipped_rules_are_the_generator_output() -> None:
    from gpuclinic.watch.alertrules import agent_alerts, alert_rules, render_rules, render_tests

    assert (DEPLOY / "gpuclinic-rules.yml").read_text() == render_rules()
    assert (DEPLOY / "gpuclinic-rules.test.yml").read_text() == render_tests()
    names = [r.name for r in alert_rules()]
    assert len(names) == len(set(names))
    from gpuclinic.knowledge import codes as K

    alerted = {r.code for r in alert_rules()}
    for c in K.all_codes():  # every code that can be a warning or worse has its rule, with its runbook
        if c.code not in ("error.*", "run.interruption.*") and agent_alerts(c):
            assert c.code in alerted, c.code
    assert all("gpuclinic runbook" in r.description for r in alert_rules())
