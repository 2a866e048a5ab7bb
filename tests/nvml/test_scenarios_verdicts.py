"""Every scenario produces its expected codes and verdict through the full pipeline (and the CLI)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuclinic.checks import load_all
from gpuclinic.cli import cli
from gpuclinic.diagnose import diagnose
from gpuclinic.model import Severity
from gpuclinic.sources.scenarios import expected, list_scenarios, load_scenario

NAMES = [n for n, _ in list_scenarios()]
# codes produced by this area's checks: anything else in `expect` belongs to other areas' checks
MINE = (
    "gpu.missing",
    "gpu.unresponsive",
    "gpu.recovery_action",
    "gpu.inforom",
    "memory.",
    "thermal.",
    "power.",
    "pcie.link_degraded",
    "pcie.replay",
    "pcie.aer_",
    "nvlink.error",
    "perf.straggler",
)


def _registered(code: str) -> bool:
    for c in load_all().values():
        for pat in c.codes:
            if pat == code or (pat.endswith(".*") and code.startswith(pat[:-1])):
                return True
    return False


@pytest.mark.parametrize("name", NAMES)
def test_scenario_verdict_and_codes(name: str) -> None:
    exp = expected(name)
    report = diagnose(load_scenario(name))
    codes = {f.code for f in report.findings}
    assert report.verdict.value == exp["verdict"], [(f.code, f.severity.label) for f in report.findings]
    for code in exp["codes"]:
        if code.startswith(MINE) or _registered(code):
            assert code in codes, f"{name}: expected {code}, got {sorted(codes)}"
    # no surprise warnings from this area's checks
    loud = {f.code for f in report.findings if f.severity >= Severity.WARNING and f.code.startswith(MINE)}
    assert loud <= set(exp["codes"]), f"{name}: unexpected {loud - set(exp['codes'])}"
    for f in report.findings:
        assert f.evidence and f.remedy and f.title


def test_healthy_scenario_has_no_findings_from_this_area() -> None:
    report = diagnose(load_scenario("healthy-8xh100-load"))
    assert [f.code for f in report.findings if f.code.startswith(MINE)] == []
    assert all(gv.verdict.value == "healthy" for gv in report.gpu_verdicts)


def test_cli_scenario_json_and_exit_codes() -> None:
    r = CliRunner().invoke(
        cli, ["doctor", "--scenario", "pcie-x8-under-load", "--json"], standalone_mode=False
    )
    assert r.exception is None, r.output
    d = json.loads(r.output)
    assert d["verdict"] == "warning" and r.return_value == 1
    f = next(x for x in d["findings"] if x["code"] == "pcie.link_degraded")
    assert f["gpu"] == {"index": 6, "pci_bus_id": "0000:ba:00.0", "uuid": f["gpu"]["uuid"]}
    r = CliRunner().invoke(cli, ["doctor", "--scenario", "fallen-off-bus"], standalone_mode=False)
    assert r.return_value == 2 and "gpu.missing" in r.output


def test_cli_list_scenarios() -> None:
    r = CliRunner().invoke(cli, ["doctor", "--list-scenarios"])
    assert r.exit_code == 0 and all(n in r.output for n in NAMES)
