"""No code is emitted with different severities by different commands (doctor, explain, watch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.knowledge import codes as K
from gpuclinic.model import Severity
from gpuclinic.sources.kernellog import parse_lines
from gpuclinic.sources.scenarios import list_scenarios, load_scenario
from gpuclinic.watch.config import RulesConfig
from gpuclinic.watch.kernel import condition_for
from gpuclinic.watch.rules import RuleEngine

FX = Path(__file__).resolve().parents[1] / "fixtures" / "kernel_log"
LOGS = [
    "gpu-burn-1-aer-fatal-xid79.log",
    "gpud-pr500-xid119-gsp.log",
    "nvsentinel-022-xid74-nvlink.log",
    "ml-engineering-debug-xid63.log",
    "gpud-pr46-ctime-xid13-109.log",
    "gpu-operator-1146-syslog-rminit-xid48-64.log",
]


@pytest.mark.parametrize("name", [n for n, _ in list_scenarios()])
def test_watch_rules_and_doctor_agree_on_a_scenario(name: str) -> None:
    snap = load_scenario(name)
    doctor = {(f.code, f.gpu.index if f.gpu else None): f.severity for f in diagnose(snap).findings}
    eng = RuleEngine(
        RulesConfig(
            throttle_min_s=0, pcie_sustain_s=0, straggler_minutes=0, stall_minutes=0, idle_minutes=1e9
        )
    )
    eng.evaluate(0.0, snap.gpus)
    conds, points = eng.evaluate(100.0, snap.gpus)
    bus = {g.pci_bus_id: (g.index, g.uuid) for g in snap.gpus if g.pci_bus_id}
    kernel = [c for c in (condition_for(e, bus, 60.0) for e in snap.kernel_events) if c is not None]
    watch: dict[tuple[str, int | None], Severity] = {}
    for c in [*conds, *points, *kernel]:
        k = (c.code, c.gpu)
        watch[k] = max(watch.get(k, c.severity), c.severity)
        allowed = K.allowed(c.code)
        assert allowed is None or c.severity in allowed, (c.code, c.severity)
    for k in set(doctor) & set(watch):
        assert doctor[k] == watch[k], (k, doctor[k], watch[k])


@pytest.mark.parametrize("log", LOGS)
def test_one_log_gives_the_same_codes_to_doctor_explain_and_watch(log: str) -> None:
    p = FX / log

    def run(*args: str) -> set[tuple[str, str]]:
        r = subprocess.run(
            [sys.executable, "-m", "gpuclinic", *args, "--json"], capture_output=True, text=True, timeout=60
        )
        return {(f["code"], f["severity"]) for f in json.loads(r.stdout)["findings"]}

    doctor, explain = run("doctor", "--from", str(p)), run("explain", "--offline", str(p))
    assert doctor == explain
    watch = {
        (c.code, c.severity.label)
        for c in (condition_for(e, {}, 60.0) for e in parse_lines(p.read_text().splitlines(), str(p)))
        if c
    }
    assert watch and watch <= doctor
