"""``gpuclinic accept`` end to end: scenarios (simulated NVML), bad input, the store and --compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.accept.history import compare, latest_run
from gpuclinic.accept.model import Scorecard


def accept(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", "accept", *args], capture_output=True, text=True, timeout=timeout
    )


def items(doc: dict[str, Any], iid: str) -> dict[str, dict[str, Any]]:
    return {str(i["gpu"]): i for i in doc["items"] if i["id"] == iid}


def test_straggler_scenario_json_scorecard() -> None:
    p = accept("--scenario", "straggler", "--force", "--json", "--burn", "30")
    assert p.returncode == 2, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "gpuclinic.accept/1" and doc["origin"] == "scenario"
    for it in doc["items"]:
        assert {"id", "title", "gpu", "measured", "expected", "unit", "status"} <= set(it)
        assert it["status"] in ("pass", "warn", "fail", "skipped")
        if it["status"] == "skipped":
            assert it["why"], it
    mm = items(doc, "gpu.matmul.bf16")
    assert mm["6"]["status"] == "fail" and mm["6"]["expected"] == 791.6
    assert {g for g, i in mm.items() if i["status"] == "pass"} == {"0", "1", "2", "3", "4", "5", "7"}
    assert items(doc, "health")["None"]["status"] == "warn"  # doctor's perf.straggler
    assert doc["summary"]["verdict"] == "fail" and doc["summary"]["exit_code"] == 2
    assert "gpu.matmul.bf16@6" in doc["summary"]["failed"]
    assert doc["backend"].startswith("simulated")
    # 30 s simulated burn: one sample per second per GPU, GPU 6 held at its capped clock
    series = {s["gpu"]: s for s in doc["burn"]["series"]}
    assert len(series) == 8 and len(series["6"]["t"]) == 31
    assert set(series["6"]["sm_clock_mhz"]) == {1365.0}
    assert items(doc, "burn.throttle")["6"]["measured"] == "sw_power_cap 100%"


def test_busy_gpus_are_not_loaded_without_force() -> None:
    p = accept("--scenario", "pcie-x8-under-load", "--json", "--quick")
    doc = json.loads(p.stdout)
    h2d = items(doc, "gpu.pcie.h2d")
    assert h2d["6"]["status"] == "skipped"
    assert "running other processes (pid 48219 python3)" in h2d["6"]["why"]
    assert items(doc, "burn")["None"]["status"] == "skipped"
    assert any("--force" in n for n in doc["notes"])
    # only doctor's pcie.link_degraded warning is judged: no GPU measured means no acceptance verdict
    assert p.returncode == 3 and doc["summary"]["verdict"] == "could not judge"
    p = accept("--scenario", "pcie-x8-under-load", "--json", "--quick", "--force")
    doc = json.loads(p.stdout)
    assert items(doc, "gpu.pcie.h2d")["6"]["status"] == "fail" and p.returncode == 2


def test_terminal_and_markdown_output() -> None:
    p = accept("--scenario", "pcie-x8-under-load", "--force", "--quick")
    out = p.stdout
    assert "gpuclinic accept: sim-hgx-h100-01 (scenario pcie-x8-under-load, quick mode)" in out
    assert "GPUs: 8 x NVIDIA H100 80GB HBM3 [H100 SXM]" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("FAIL") and "gpu.pcie.h2d" in ln)
    assert " 6 " in line and "25.2" in line and "63.0" in line and "now Gen5 x8" in line
    assert "0,1,2,3,4,5,6,7" in out  # rows that differ only in the GPU fold into one
    assert out.rstrip().endswith("exit 2)")
    p = accept("--scenario", "pcie-x8-under-load", "--force", "--quick", "--markdown")
    assert "| FAIL | gpu.pcie.h2d | 6 | 25.2 | 63.0 | GB/s |" in p.stdout


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--quick", "--full"], "choose one of --quick and --full"),
        (["--json", "--markdown", "--scenario", "straggler"], "choose one of --json and --markdown"),
        (["--scenario", "no-such"], "unknown scenario 'no-such'"),
        (["--python", "/nonexistent/python3"], "--python /nonexistent/python3: no such file"),
        (["--burn", "-5"], "--burn"),
        (["--data-dir", "/nonexistent-dir"], "--data-dir /nonexistent-dir: no such directory"),
        (["--html", "/nonexistent-dir/x.html", "--scenario", "straggler"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_64(args: list[str], msg: str) -> None:
    p = accept(*args)
    assert p.returncode in (64, 2) if args[0] == "--burn" else p.returncode == 64, p.stderr
    assert msg in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_runs_are_stored_compared_and_served_to_fleet(tmp_path: Path) -> None:
    p1 = accept("--scenario", "straggler", "--force", "--burn", "5", "--json")
    doc1 = json.loads(p1.stdout)
    assert doc1["run_id"] == 1
    p2 = accept("--scenario", "straggler", "--force", "--burn", "5", "--compare")
    assert (
        "compare with run 1 of" in p2.stdout and "no differences" in p2.stdout
    )  # the model is deterministic
    latest = latest_run(include_scenarios=True)
    assert latest is not None and latest["run_id"] == 2 and latest["schema"] == "gpuclinic.accept/1"
    assert latest_run() is None  # simulated runs are not fleet facts unless asked for
    # a slower GPU 6 next week: compare() reports the change per item
    prev = json.loads(json.dumps(doc1))
    for it in prev["items"]:
        if it["id"] == "gpu.matmul.bf16" and it["gpu"] == "6":
            it["measured"], it["status"] = 791.6, "pass"
    deltas = compare(prev, Scorecard.from_dict(doc1))
    (d,) = [x for x in deltas if x["key"] == "gpu.matmul.bf16@6"]
    assert d["delta_pct"] == pytest.approx((545.7 - 791.6) / 791.6 * 100, abs=0.05)
    assert (d["previous_status"], d["status"]) == ("pass", "fail")
    p3 = accept("--scenario", "straggler", "--force", "--burn", "5", "--compare", "--json")
    assert json.loads(p3.stdout)["compare"] == {"previous_run": 2, "deltas": []}


def test_scorecard_round_trips_through_json() -> None:
    doc = json.loads(accept("--scenario", "overheating", "--force", "--json", "--burn", "200").stdout)
    sc = Scorecard.from_dict(doc)
    again = sc.to_dict()
    assert again["items"] == doc["items"] and again["burn"] == doc["burn"]
    assert (
        doc["burn"]["stopped"] == "GPU 3 reached 87 C at 158 s, within 2 C of its 89 C slowdown temperature"
    )
