"""The agent's idle-seconds counter: time below the idle line between samples, gaps and lost GPUs
not counted."""

from __future__ import annotations

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.fleet.idle import MAX_GAP_S, IdleMeter


def g(util: float | None, *, lost: bool = False) -> GpuFacts:
    return GpuFacts(index=0, uuid="GPU-a", utilization_gpu_pct=util, lost=lost)


def test_idle_time_between_samples() -> None:
    m = IdleMeter()
    for t, u in ((0, 0.0), (1, 0.0), (2, 3.0), (3, 90.0), (4, 90.0), (5, 1.0), (6, 1.0)):
        m.observe(float(t), [g(u)])
    # idle at t=0,1,2 (3 % < 5 %) counts the next second each; busy 3,4; idle 5 counts 5->6
    assert m.snapshot() == [("GPU-a", 0, 4.0)]


def test_gaps_and_lost_gpus_are_not_idle() -> None:
    m = IdleMeter()
    m.observe(0.0, [g(0.0)])
    m.observe(MAX_GAP_S + 5, [g(0.0)])  # the agent stalled: unknown, not idle
    m.observe(MAX_GAP_S + 6, [g(0.0, lost=True)])
    m.observe(MAX_GAP_S + 7, [g(0.0)])  # back: counting restarts from this sample
    m.observe(MAX_GAP_S + 8, [g(0.0)])
    m.observe(MAX_GAP_S + 9, [g(None)])  # no utilisation reading: not counted either
    assert m.snapshot() == [("GPU-a", 0, 1.0)]
