"""``Detector.observe(window)``: the detector's rules over every sample of the window, not just the newest."""

from __future__ import annotations

import copy

from gpuclinic.checks import Window, detectors
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.scenarios import load_scenario


def _samples(n: int) -> list[Snapshot]:
    base = load_scenario("steady8")
    out = []
    for i in range(n):
        s = copy.deepcopy(base)
        s.taken_at = f"2026-12-01T10:00:{i * 10:02d}+00:00"
        out.append(s)
    return out


def _brake(s: Snapshot, gpu: int) -> None:
    s.gpus[gpu].clock_event_reasons = [*s.gpus[gpu].clock_event_reasons, "hw_power_brake_slowdown"]


def test_a_fault_in_an_earlier_sample_is_still_reported() -> None:
    power = detectors()["power"]
    samples = _samples(4)
    _brake(samples[1], 3)  # the brake asserted at t=10 s and released by t=20 s
    _brake(samples[2], 3)
    window = Window(tuple(samples), span_s=30.0)
    assert [f.code for f in power.evaluate(window.latest)[0]] == []
    found, _ = power.observe(window)
    (f,) = found
    assert (f.code, f.gpu.index if f.gpu else None) == ("power.brake", 3)
    assert f.data["window"] == {
        "samples": 2, "of": 4, "in_newest": False,
        "first_seen": "2026-12-01T10:00:10+00:00", "last_seen": "2026-12-01T10:00:20+00:00",
    }
    assert "seen in 2 of 4 samples (last at 2026-12-01T10:00:20+00:00), not in the newest" in f.evidence


def test_a_fault_in_every_sample_is_one_finding_from_the_newest() -> None:
    power = detectors()["power"]
    samples = _samples(3)
    for s in samples:
        _brake(s, 5)
    (f,) = power.observe(Window(tuple(samples), span_s=20.0))[0]
    (now,) = power.evaluate(samples[-1])[0]
    assert f.code == now.code and f.gpu == now.gpu and f.severity == now.severity
    assert f.data["window"]["samples"] == 3 and f.data["window"]["in_newest"] is True


def test_a_past_note_is_not_news_and_a_clean_window_is_clean() -> None:
    det = detectors()["pcie"]
    samples = _samples(3)
    assert det.observe(Window(tuple(samples)))[0] == []
    idle = load_scenario("idle-pcie-downclock")  # informational only: links at Gen1 at idle
    info = [f for f in det.evaluate(idle)[0]]
    assert info and all(f.severity.name == "INFO" for f in info)
    assert det.observe(Window((idle, *samples)))[0] == []
