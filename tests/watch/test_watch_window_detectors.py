"""watch judges its window of samples with the doctor's detectors (``Detector.observe``): the same condition
is the same finding (code, severity, title, remedy) in ``doctor`` (one snapshot) and ``watch`` (a window),
and every code watch can alert on has its Prometheus alert rule."""

from __future__ import annotations

import copy

import pytest

from gpuclinic.checks import detectors
from gpuclinic.diagnose import diagnose
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.knowledge import codes as K
from gpuclinic.knowledge.runbooks import remedy
from gpuclinic.model import Severity
from gpuclinic.sources.scenarios import list_scenarios, load_scenario
from gpuclinic.watch.alertrules import agent_alerts, alert_rules
from gpuclinic.watch.config import RulesConfig
from gpuclinic.watch.rules import WINDOW_DETECTORS, RuleEngine

CODES = {c for d in WINDOW_DETECTORS for c in detectors()[d].codes}


def _engine(throttle_min_s: float = 0.0) -> RuleEngine:
    return RuleEngine(RulesConfig(throttle_min_s=throttle_min_s, idle_minutes=1e9))


@pytest.mark.parametrize("name", [n for n, _ in list_scenarios()])
def test_a_scenario_is_the_same_finding_in_doctor_and_watch(name: str) -> None:
    snap = load_scenario(name)
    doctor = {
        (f.code, f.gpu.index if f.gpu else None, f.data.get("sensor")): f
        for f in diagnose(snap).findings
        if f.code in CODES and f.source == "nvml"  # what a sample of the GPUs shows
    }
    conds, _ = _engine().evaluate(100.0, snap.gpus)
    watch = {(c.code, c.gpu, c.data.get("sensor")): c for c in conds if c.code in CODES}
    # doctor's report points a symptom's remedy at its cause: compare with the detectors' own findings
    own = {
        (f.code, f.gpu.index if f.gpu else None, f.data.get("sensor")): f
        for d in WINDOW_DETECTORS
        for f in detectors()[d].evaluate(snap)[0]
    }
    assert set(doctor) <= set(watch), (name, set(doctor) - set(watch))
    for k, c in watch.items():
        f = own[k]
        # the doctor's remedy (its runbook's first step) and the pointer to the rest, as every watch alert
        assert (c.severity, c.title, c.remedy) == (f.severity, f.title, remedy(f.code, f.gpu, f.remedy)), k
        if k in doctor:
            assert c.severity == doctor[k].severity


def _brake(g: GpuFacts) -> GpuFacts:
    g = copy.deepcopy(g)
    g.clock_event_reasons = [*g.clock_event_reasons, "hw_power_brake_slowdown"]
    return g


def test_a_warning_seen_in_the_window_stays_and_a_clock_slowdown_needs_its_onset() -> None:
    base = load_scenario("healthy-8xh100-load").gpus
    eng = _engine(throttle_min_s=5.0)
    pending = copy.deepcopy(base)
    pending[2].remapped_rows_pending = True
    braked = [_brake(g) if g.index == 4 else g for g in base]

    def codes(now: float, gpus: list[GpuFacts]) -> dict[tuple[str, int | None], dict[str, object]]:
        return {(c.code, c.gpu): c.data for c in eng.evaluate(now, gpus)[0]}

    assert not [k for k in codes(0.0, base) if k[0] in CODES]
    got = codes(2.0, pending)
    w = got[("memory.row_remap_pending", 2)]["window"]
    assert isinstance(w, dict) and (w["samples"], w["of"], w["in_newest"]) == (1, 2, True)
    got = codes(4.0, braked)  # the remap is no longer pending, but the window (5 s) still holds it
    assert ("memory.row_remap_pending", 2) in got and ("power.brake", 4) not in got  # brake: onset 0 s
    assert codes(6.0, braked).get(("power.brake", 4)) is None  # 2 s of 5
    got = codes(9.5, braked)  # in every sample of a window that reaches 5 s back
    assert got[("power.brake", 4)]["reason"] == "hw_power_brake_slowdown"
    assert ("memory.row_remap_pending", 2) not in got  # out of the window now
    # the doctor on the braked sample: the same code and severity
    snap = load_scenario("healthy-8xh100-load")
    snap.gpus = braked
    (f,) = [f for f in diagnose(snap).findings if f.code == "power.brake"]
    (c,) = [c for c in eng.evaluate(10.0, braked)[0] if c.code == "power.brake"]
    assert (c.severity, c.gpu, c.title) == (f.severity, 4, f.title) and c.severity == Severity.CRITICAL


def test_every_code_watch_alerts_on_has_an_alert_rule() -> None:
    rules = {r.code for r in alert_rules()}
    seen: set[str] = set()
    for name, _ in list_scenarios():
        conds, _ = _engine().evaluate(100.0, load_scenario(name).gpus)
        seen |= {c.code for c in conds if c.severity >= Severity.WARNING}
    assert seen, "no scenario raised anything"
    for code in seen:
        info = K.require(code)
        assert agent_alerts(info) and info.code in rules, code


def test_watch_and_doctor_share_one_straggler_rule() -> None:
    """perf.straggler is checks/perf.stragglers in both: the same GPUs on the same sample, and a GPU whose
    utilisation alone is low (its clock is the peers') is no straggler in either (NCCL waits keep the
    waiting GPUs busy, so utilisation does not single out the slow one)."""
    snap = load_scenario("straggler")
    doctor = sorted(f.gpu.index for f in diagnose(snap).findings
                    if f.code == "perf.straggler" and f.gpu and f.gpu.index is not None)
    conds, _ = RuleEngine(RulesConfig(straggler_minutes=0.0, idle_minutes=1e9)).evaluate(1.0, snap.gpus)
    watch = sorted(c.gpu for c in conds if c.code == "perf.straggler" and c.gpu is not None)
    assert doctor and watch == doctor
    gpus = [copy.copy(g) for g in snap.gpus]
    for g in gpus:
        g.sm_clock_mhz = gpus[0].sm_clock_mhz
        g.power_draw_w = gpus[0].power_draw_w
    gpus[-1].utilization_gpu_pct = 40.0  # far below its peers, same clock
    conds, _ = RuleEngine(RulesConfig(straggler_minutes=0.0, idle_minutes=1e9)).evaluate(1.0, gpus)
    assert [c for c in conds if c.code == "perf.straggler"] == []
