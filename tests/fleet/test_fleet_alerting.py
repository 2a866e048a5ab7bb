"""The shipped Alertmanager example and fleet alert rules, checked by the real amtool and promtool."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

from realtools import require

DEPLOY = Path(str(resources.files("gpuclinic.fleet").joinpath("deploy")))


def _run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False, cwd=cwd)


def test_amtool_accepts_the_alertmanager_example() -> None:
    amtool = require("amtool")["amtool"]
    p = _run(amtool, "check-config", str(DEPLOY / "alertmanager.yml"))
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr
    assert "2 inhibit rules" in p.stdout and "3 receivers" in p.stdout


def test_routes_by_severity() -> None:
    amtool = require("amtool")["amtool"]
    for sev, receiver in (("critical", "gpu-oncall"), ("warning", "gpu-team"), ("info", "blackhole")):
        p = _run(
            amtool,
            "config",
            "routes",
            "test",
            f"--config.file={DEPLOY / 'alertmanager.yml'}",
            f"--verify.receivers={receiver}",
            "alertname=GpuclinicGpuFallenOffBus",
            f"severity={sev}",
            "node=gpu-07",
            "code=gpu.fallen_off_bus",
        )
        assert p.returncode == 0 and p.stdout.strip() == receiver, (sev, p.stdout, p.stderr)


def test_groups_by_node_and_incident(tmp_path: Path) -> None:
    """group_by is part of the contract; a config that groups otherwise must not pass this test."""
    import yaml

    cfg = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    assert cfg["route"]["group_by"] == ["node", "code"]
    assert all("group_by" not in r for r in cfg["route"]["routes"])  # children inherit it
    amtool = require("amtool")["amtool"]
    broken = tmp_path / "am.yml"
    broken.write_text(
        (DEPLOY / "alertmanager.yml")
        .read_text()
        .replace("receiver: gpu-team\n  group_by", "receiver: nobody\n  group_by")
    )
    p = _run(amtool, "check-config", str(broken))
    assert p.returncode != 0 and "nobody" in (p.stdout + p.stderr)


def test_promtool_unit_tests_for_fleet_rules(tmp_path: Path) -> None:
    promtool = require("promtool")["promtool"]
    for f in ("gpuclinic-fleet-rules.yml", "gpuclinic-fleet-rules.test.yml"):
        shutil.copy(DEPLOY / f, tmp_path / f)
    p = _run(promtool, "check", "rules", "gpuclinic-fleet-rules.yml", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    p = _run(promtool, "test", "rules", "gpuclinic-fleet-rules.test.yml", cwd=tmp_path)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def test_fleet_rules_load_with_the_agents_incident_rules(tmp_path: Path) -> None:
    """Prometheus loads both files side by side: no clashing alert names, no duplicate per-incident alert."""
    import yaml

    promtool = require("promtool")["promtool"]
    agent_rules = Path(str(resources.files("gpuclinic.watch").joinpath("deploy"))) / "gpuclinic-rules.yml"
    p = _run(promtool, "check", "rules", str(agent_rules), str(DEPLOY / "gpuclinic-fleet-rules.yml"))
    assert p.returncode == 0, p.stdout + p.stderr
    names = [
        r["alert"]
        for f in (agent_rules, DEPLOY / "gpuclinic-fleet-rules.yml")
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    assert len(names) == len(set(names))
    fleet_exprs = [
        r["expr"]
        for g in yaml.safe_load((DEPLOY / "gpuclinic-fleet-rules.yml").read_text())["groups"]
        for r in g["rules"]
    ]
    assert not any("gpuclinic_incident_open" in e for e in fleet_exprs)  # the agent's rules own incidents
