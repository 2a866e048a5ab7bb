"""The sustained burn: record clocks, temperature, throttle reasons and throughput over time, stop
early when a GPU nears its slowdown temperature, and judge what the series show.

Why: some GPUs pass a 10-second benchmark and slow down only after minutes (a clogged heatsink, a
failing fan, a board that power-brakes when warm); only a burn with samples over time shows it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable

from gpuclinic.accept.model import BurnSeries, Item, skipped
from gpuclinic.accept.score import ratio_status
from gpuclinic.accept.specs import threshold, threshold_source
from gpuclinic.facts.gpu import GpuFacts

BAD_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")
THERMAL = ("hw_thermal_slowdown", "sw_thermal_slowdown")

Sampler = Callable[[float], list[GpuFacts]]


class BurnMonitor:
    """Collects the series of each GPU and decides when the burn must stop."""

    def __init__(self, labels: dict[int, str], facts: dict[str, GpuFacts]) -> None:
        self.labels = labels  # NVML index -> scorecard label
        self.series: dict[str, BurnSeries] = {}
        for lab, g in facts.items():
            self.series[lab] = BurnSeries(gpu=lab, slowdown_temp_c=g.slowdown_temp_c,
                                          sm_clock_max_mhz=g.sm_clock_max_mhz)
        self.stopped: str | None = None
        self.stopped_gpu: str | None = None
        self._hot: Counter[str] = Counter()
        self.margin = threshold("burn_stop_margin_c")

    def _get(self, lab: str) -> BurnSeries:
        if lab not in self.series:
            self.series[lab] = BurnSeries(gpu=lab)
        return self.series[lab]

    def on_tflops(self, lab: str, t: float, value: float) -> None:
        s = self._get(lab)
        s.tflops_t.append(round(t, 2))
        s.tflops.append(round(value, 4))

    def on_sample(self, t: float, samples: list[GpuFacts]) -> str | None:
        """Record one NVML sample per GPU; return why the burn must stop, or None."""
        for g in samples:
            lab = self.labels.get(g.index)
            if lab is None:
                continue
            s = self._get(lab)
            if s.slowdown_temp_c is None:
                s.slowdown_temp_c = g.slowdown_temp_c
            s.t.append(round(t, 2))
            s.sm_clock_mhz.append(g.sm_clock_mhz)
            s.temperature_c.append(g.temperature_c)
            s.power_w.append(g.power_draw_w)
            s.reasons.append(list(g.clock_event_reasons))
            if self.stopped:
                continue
            slow = s.slowdown_temp_c
            if g.temperature_c is not None and slow and g.temperature_c >= slow - self.margin:
                self.stopped_gpu = lab
                self.stopped = (f"GPU {lab} reached {g.temperature_c:g} C at {t:.0f} s, within "
                                f"{self.margin:g} C of its {slow:g} C slowdown temperature")
            elif any(r in THERMAL for r in g.clock_event_reasons):
                self._hot[lab] += 1
                if self._hot[lab] >= 2:
                    self.stopped_gpu = lab
                    self.stopped = (
                        f"GPU {lab} in thermal slowdown at {t:.0f} s ({', '.join(g.clock_event_reasons)})"
                    )
            else:
                self._hot[lab] = 0
        return self.stopped


def simulate(
    monitor: BurnMonitor, sampler: Sampler, tflops: Callable[[int, GpuFacts], float | None], seconds: float
) -> None:
    """A burn in virtual time (scenarios): one sample per simulated second, no waiting."""
    t = 0.0
    while t <= seconds:
        samples = sampler(t)
        for g in samples:
            v = tflops(g.index, g)
            lab = monitor.labels.get(g.index)
            if v is not None and lab is not None and t > 0:
                monitor.on_tflops(lab, t, v)
        if monitor.on_sample(t, samples):
            break
        t += 1.0


def _quarters(vals: list[float]) -> tuple[float, float] | None:
    if len(vals) < 4:
        return None
    q = max(1, len(vals) // 4)
    return statistics.median(vals[:q]), statistics.median(vals[-q:])


def score_burn(
    series: list[BurnSeries], seconds: float, stopped: str | None, stopped_gpu: str | None, interrupted: bool
) -> list[Item]:
    items: list[Item] = []
    if not series:
        return [skipped("burn", "sustained burn", "burn", "no burn ran")]
    for s in series:
        lab = s.gpu
        if interrupted:
            items.append(
                skipped(
                    "burn",
                    "sustained burn",
                    "burn",
                    f"interrupted (Ctrl-C) after {max(s.t or s.tflops_t or [0]):.0f} s",
                    lab,
                )
            )
            continue
        clocks = [c for c in s.sm_clock_mhz if c]
        q = _quarters(clocks)
        if q:
            first, last = q
            st = ratio_status(last / first, "burn_clock_warn", "burn_clock_fail") if first else "pass"
            items.append(
                Item(
                    "burn.clocks",
                    "SM clock held",
                    "burn",
                    st,
                    lab,
                    round(last),
                    round(first),
                    "MHz",
                    "clock in the first quarter of the burn",
                    threshold_source("burn_clock_fail"),
                    f"{last / first * 100:.0f}% of the early clock over {s.t[-1]:.0f} s" if first else "",
                )
            )
        elif s.t:
            items.append(skipped("burn.clocks", "SM clock held", "burn", "too few clock samples", lab, "MHz"))
        temps = [x for x in s.temperature_c if x is not None]
        if temps:
            hi = max(temps)
            slow = s.slowdown_temp_c
            reasons = {r for rs in s.reasons for r in rs}
            if slow:
                warn_at = slow - threshold("burn_temp_warn_margin_c")
                if stopped_gpu == lab or reasons & set(THERMAL):
                    st, why = (
                        "fail",
                        stopped if stopped_gpu == lab and stopped else "thermal slowdown during the burn",
                    )
                elif hi >= warn_at:
                    st, why = "warn", f"peaked {slow - hi:g} C below its {slow:g} C slowdown"
                else:
                    st, why = "pass", f"peaked {slow - hi:g} C below its {slow:g} C slowdown"
                items.append(
                    Item(
                        "burn.temperature",
                        "peak temperature vs slowdown",
                        "burn",
                        st,
                        lab,
                        hi,
                        round(warn_at, 1),
                        "C",
                        f"slowdown {slow:g} C - margin",
                        threshold_source("burn_temp_warn_margin_c"),
                        why,
                    )
                )
            else:
                items.append(
                    Item(
                        "burn.temperature",
                        "peak temperature vs slowdown",
                        "burn",
                        "pass",
                        lab,
                        hi,
                        None,
                        "C",
                        "no slowdown threshold reported",
                        "",
                        "measured only",
                    )
                )
        if s.reasons:
            cnt: Counter[str] = Counter(r for rs in s.reasons for r in rs if r != "idle")
            bad = sorted(r for r in cnt if r in BAD_REASONS)
            text = ", ".join(f"{r} {n * 100 // len(s.reasons)}%" for r, n in cnt.most_common()) or "none"
            why = (
                ("hardware/thermal slowdown: " + ", ".join(bad))
                if bad
                else ("power cap under full load is normal" if "sw_power_cap" in cnt else "no throttling")
            )
            items.append(
                Item(
                    "burn.throttle",
                    "throttle reasons over time",
                    "burn",
                    "fail" if bad else "pass",
                    lab,
                    text,
                    "no hw/thermal slowdown",
                    "",
                    "clock-event reasons",
                    "NVML nvmlDeviceGetCurrentClocksEventReasons",
                    why,
                )
            )
        q2 = _quarters([v for v in s.tflops if v > 0])
        if q2:
            first, last = q2
            st = (
                ratio_status(last / first, "burn_throughput_warn", "burn_throughput_fail")
                if first
                else "pass"
            )
            items.append(
                Item(
                    "burn.throughput",
                    "matmul throughput held",
                    "burn",
                    st,
                    lab,
                    round(last, 3),
                    round(first, 3),
                    "TFLOPS",
                    "throughput in the first quarter",
                    threshold_source("burn_throughput_fail"),
                    f"{last / first * 100:.0f}% of the early throughput" if first else "",
                )
            )
        elif not s.t:
            items.append(
                skipped(
                    "burn.throughput",
                    "matmul throughput held",
                    "burn",
                    f"burn too short ({len(s.tflops)} samples of {seconds:g} s)",
                    lab,
                    "TFLOPS",
                )
            )
    order = ["burn", "burn.clocks", "burn.temperature", "burn.throttle", "burn.throughput"]
    return sorted(
        items, key=lambda i: order.index(i.id) if i.id in order else len(order)
    )  # stable: GPU order kept
