"""/metrics: conventional names, XIDs as counters, and `promtool check metrics` clean."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuclinic.watch.agent import Agent
from gpuclinic.watch.metrics import make_registry
from realtools import require


def _exposition(a: Agent) -> str:
    return generate_latest(make_registry(a)).decode()


def test_metric_names_units_and_labels(agent_factory: Callable[..., Agent], tmp_path: Path) -> None:
    a = agent_factory("demo", scale=60)
    a.run(duration_s=40)
    text = _exposition(a)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    info = fams["gpuclinic_gpu_info"]
    assert {s.labels["uuid"] for s in info.samples} >= {"GPU-5a1c0000-7e57-4d0c-9a11-000000000000"}
    assert {s.labels["driver_version"] for s in info.samples} == {"550.54.15"}
    temp = {s.labels["index"]: s.value for s in fams["gpuclinic_gpu_temperature_celsius"].samples}
    assert 80 < temp["0"] < 95 and "2" not in temp  # GPU 2 is lost: no readings, but gpu_lost=1
    lost = {s.labels["index"]: s.value for s in fams["gpuclinic_gpu_lost"].samples}
    assert lost["2"] == 1 and lost["0"] == 0
    sm = [s.value for s in fams["gpuclinic_gpu_sm_clock_hertz"].samples if s.labels["index"] == "0"][0]
    assert sm > 1e9  # hertz, not MHz
    util = [s.value for s in fams["gpuclinic_gpu_utilization_ratio"].samples if s.labels["index"] == "0"][0]
    assert 0.9 < util <= 1.0
    xid = fams["gpuclinic_gpu_xid_errors"]  # the parser strips _total from counter family names
    assert xid.type == "counter"
    (s,) = [s for s in xid.samples if s.name.endswith("_total")]
    assert s.labels["xid"] == "79" and s.value == 1 and s.labels["uuid"].startswith("GPU-5a1c0002")
    (last,) = fams["gpuclinic_gpu_xid_last_seen_timestamp_seconds"].samples
    assert last.value > 1.7e9
    thr = {
        (s.labels["index"], s.labels["reason"]): s.value
        for s in fams["gpuclinic_gpu_clock_event_active"].samples
    }
    assert thr[("0", "hw_thermal_slowdown")] == 1 and thr[("1", "hw_thermal_slowdown")] == 0
    opened = {(s.labels["code"], s.labels["index"]) for s in fams["gpuclinic_event_open"].samples}
    assert ("xid.79", "2") in opened
    assert fams["gpuclinic_gpus_expected"].samples[0].value == 4
    assert fams["gpuclinic_health_verdict"].samples[0].value == 2


def test_promtool_check_metrics_clean(agent_factory: Callable[..., Agent]) -> None:
    require("promtool")
    a = agent_factory("demo", scale=60)
    a.run(duration_s=40)
    text = _exposition(a)
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr
