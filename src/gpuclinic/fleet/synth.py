"""A synthetic fleet as OpenMetrics text, for `promtool tsdb create-blocks-from openmetrics`.

Used by the fleet scale benchmark (1,000 nodes) and by a test that checks every fleet figure against
known truth.  Node profiles, by position: node 0 lost GPU 4 (drain), every 10th has two idle GPUs,
every 25th has rising corrected ECC, remaps, replays, thermal throttling and an XID (warning), every
97th stopped answering 10 minutes ago (up 0, no fresh series).  Everything else is a busy, healthy
8-GPU node.  Families are written one after another, as OpenMetrics requires.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO


@dataclass
class Truth:
    """What `gpuclinic fleet` must find for one node."""

    node: str
    verdict: str = "healthy"
    incidents: list[tuple[str, str, int | None]] = field(default_factory=list)  # code, severity, gpu
    gpus_seen: int | None = 8
    idle_gpus: int = 0
    ecc_per_min: float = 0.0
    throttle_per_min: float = 0.0
    remaps: int = 0
    xids: int = 0
    idle_counter: bool = True  # False: an agent from before gpuclinic_gpu_idle_seconds_total
    room: dict[str, float] | None = None  # BMC figures when the agent polls one


def profile(i: int, legacy_every: int = 0) -> Truth:
    t = Truth(node=f"n{i:04d}", idle_counter=not (legacy_every and i % legacy_every == legacy_every - 1))
    if i % 97 == 96:
        t.verdict, t.gpus_seen = "unreachable", None
        return t
    if i == 0:
        t.verdict, t.gpus_seen = "drain", 7
        t.incidents = [("gpu.fallen_off_bus", "critical", 4)]
    if i % 25 == 24:
        t.verdict = "warning"
        t.incidents = [("ecc.corrected_rising", "warning", 2)]
        t.ecc_per_min, t.throttle_per_min, t.remaps, t.xids = 4.0, 3.0, 1, 1
    if i % 10 == 9:
        t.idle_gpus = 2
    if i % 25 == 0 and i % 100 != 0 or i == 0:  # agents that poll a BMC: n0000, n0025, n0050, n0075, ...
        t.room = {"bmc_up": 1, "inlet": 24.0, "fan_failed": 0, "psu_failed": 0}
        if i == 0:
            t.room["inlet"] = 35.5
        if i % 100 == 25:
            t.room["fan_failed"] = 1
        if i % 100 == 50:
            t.room["psu_failed"] = 1
        if i % 100 == 75:
            t.room["bmc_up"] = 0
    return t


class _Series:
    """The fleet's series, section by section, over timestamps ``start..end`` every ``step`` seconds."""

    def __init__(self, truths: list[Truth], gpus: int, start: int, end: int, step: int,
                 down_for: int) -> None:
        self.truths, self.gpus, self.end, self.step, self.down_for = truths, gpus, end, step, down_for
        self.ts = list(range(start, end + 1, step))

    def lab(self, t: Truth, extra: str = "") -> str:
        return f'job="gpuclinic",instance="{t.node}:9847",node="{t.node}"{extra}'

    def glab(self, t: Truth, g: int, extra: str = "") -> str:
        return self.lab(t, ',uuid="GPU-' + t.node + "-" + str(g) + '",index="' + str(g) + '"' + extra)

    def alive(self, t: Truth, at: int) -> bool:
        return t.verdict != "unreachable" or at < self.end - self.down_for

    def node_gauges(self) -> Iterator[str]:
        """Per node: scrape up, verdict, GPU counts."""
        yield "# TYPE up gauge"
        for t in self.truths:
            for at in self.ts:
                yield f"up{{{self.lab(t)}}} {1 if self.alive(t, at) else 0} {at}"
        yield "# TYPE gpuclinic_health_verdict gauge"
        for t in self.truths:
            v = {"drain": 2, "warning": 1}.get(t.verdict, 0)
            for at in self.ts:
                if self.alive(t, at):
                    yield f"gpuclinic_health_verdict{{{self.lab(t)}}} {v} {at}"
        yield "# TYPE gpuclinic_gpus gauge"
        for t in self.truths:
            for at in self.ts:
                if self.alive(t, at):
                    yield f"gpuclinic_gpus{{{self.lab(t)}}} {self.gpus} {at}"
        yield "# TYPE gpuclinic_gpus_expected gauge"
        for t in self.truths:
            for at in self.ts:
                if self.alive(t, at):
                    yield f"gpuclinic_gpus_expected{{{self.lab(t)}}} {self.gpus} {at}"

    def gpu_gauges(self) -> Iterator[str]:
        """Per GPU: lost, open events, utilisation."""
        yield "# TYPE gpuclinic_gpu_lost gauge"
        for t in self.truths:
            for g in range(self.gpus):
                lost = 1 if t.verdict == "drain" and g == 4 else 0
                for at in self.ts:
                    if self.alive(t, at):
                        yield f"gpuclinic_gpu_lost{{{self.glab(t, g)}}} {lost} {at}"
        yield "# TYPE gpuclinic_event_open gauge"
        for t in self.truths:
            for code, sev, ig in t.incidents:
                for at in self.ts:
                    if self.alive(t, at) and at >= self.end - 1800:  # open for the last 30 minutes
                        extra = f',code="{code}",severity="{sev}",uuid="GPU-{t.node}-{ig}",index="{ig}"'
                        yield f"gpuclinic_event_open{{{self.lab(t, extra)}}} 1 {at}"
        yield "# TYPE gpuclinic_gpu_utilization_ratio gauge"
        for t in self.truths:
            for g in range(self.gpus):
                idle = g >= self.gpus - t.idle_gpus
                for at in self.ts:
                    if self.alive(t, at) and not (t.verdict == "drain" and g == 4):
                        u = 0.0 if idle else 0.97
                        yield f"gpuclinic_gpu_utilization_ratio{{{self.glab(t, g)}}} {u} {at}"

    def gpu_counters(self) -> Iterator[str]:
        """Error and clock-event counters; GPU 2 is the faulty one."""
        for fam, suffix, extra, rate_of in (
            ("gpuclinic_gpu_ecc_errors", "_total", ',type="corrected",scope="volatile"', "ecc"),
            ("gpuclinic_gpu_remapped_rows", "_total", ',cause="correctable"', "remap"),
            ("gpuclinic_gpu_pcie_replay_errors", "_total", "", "zero"),
            ("gpuclinic_gpu_clock_event_duration_seconds", "_total", ',reason="thermal"', "throttle"),
        ):
            yield f"# TYPE {fam} counter"
            for t in self.truths:
                for g in range(self.gpus):
                    if t.verdict == "drain" and g == 4:
                        continue
                    hot = g == 2
                    for k, at in enumerate(self.ts):
                        if not self.alive(t, at):
                            continue
                        mins = k * self.step / 60
                        cv = {"ecc": t.ecc_per_min * mins if hot else 0.0,
                             "remap": float(t.remaps) if hot and k >= len(self.ts) // 2 else 0.0,
                             "throttle": t.throttle_per_min * mins if hot else 0.0, "zero": 0.0}[rate_of]
                        yield f"{fam}{suffix}{{{self.glab(t, g, extra)}}} {cv:g} {at}"

    def idle_counter(self) -> Iterator[str]:
        """The agent-side idle counter, where the profile has one."""
        yield "# TYPE gpuclinic_gpu_idle_seconds counter"
        for t in self.truths:
            if not t.idle_counter:
                continue
            for g in range(self.gpus):
                if t.verdict == "drain" and g == 4:
                    continue
                idle = g >= self.gpus - t.idle_gpus
                for k, at in enumerate(self.ts):
                    if self.alive(t, at):
                        v = k * self.step if idle else 0
                        yield f"gpuclinic_gpu_idle_seconds_total{{{self.glab(t, g)}}} {v} {at}"

    def room(self) -> Iterator[str]:
        """BMC room metrics, for nodes with a BMC."""
        room = [t for t in self.truths if t.room is not None]
        bmc = ("gpuclinic_room_bmc_up", "bmc_up")
        for fam, key in (bmc, ("gpuclinic_room_inlet_temperature_celsius", "inlet")):
            yield f"# TYPE {fam} gauge"
            for t in room:
                assert t.room is not None
                for at in self.ts:
                    if self.alive(t, at) and (key == "bmc_up" or t.room["bmc_up"]):
                        yield f"{fam}{{{self.lab(t)}}} {t.room[key]:g} {at}"
        for fam, key, part in (
            ("gpuclinic_room_fan_ok", "fan_failed", "fan"),
            ("gpuclinic_room_psu_ok", "psu_failed", "psu"),
            ("gpuclinic_room_psu_present", "", "psu"),
        ):
            yield f"# TYPE {fam} gauge"
            for t in room:
                assert t.room is not None
                if not t.room["bmc_up"]:
                    continue
                for k in range(2):
                    ok = 0 if key and k == 0 and t.room[key] else 1
                    extra = f',{part}="{part.upper()}{k}"' + (f',id="{k}"' if part == "fan" else "")
                    for at in self.ts:
                        if self.alive(t, at):
                            yield f"{fam}{{{self.lab(t, extra)}}} {ok} {at}"

    def xids(self) -> Iterator[str]:
        """XID 94 counts on GPU 2 in the second half; then the OpenMetrics end marker."""
        yield "# TYPE gpuclinic_gpu_xid_errors counter"
        for t in self.truths:
            if not t.xids:
                continue
            for k, at in enumerate(self.ts):
                if self.alive(t, at):
                    v = t.xids if k >= len(self.ts) // 2 else 0
                    xl = self.lab(t, ',uuid="GPU-' + t.node + '-2",pci_bus_id="0000:3a:00.0",xid="94"')
                    yield f"gpuclinic_gpu_xid_errors_total{{{xl}}} {v} {at}"
        yield "# EOF"


def _lines(truths: list[Truth], gpus: int, start: int, end: int, step: int, down_for: int) -> Iterator[str]:
    sr = _Series(truths, gpus, start, end, step, down_for)
    for section in (sr.node_gauges, sr.gpu_gauges, sr.gpu_counters, sr.idle_counter, sr.room, sr.xids):
        yield from section()


def write_openmetrics(
    out: IO[str],
    *,
    nodes: int,
    gpus: int = 8,
    end: int,
    duration_s: int = 3600,
    step_s: int = 60,
    down_for_s: int = 600,
    legacy_every: int = 0,
) -> list[Truth]:
    """Write the fleet's history ending at ``end`` (Unix seconds); returns the truth per node.

    ``legacy_every=3``: every third node is an agent without the idle counter (fleet samples its
    utilisation instead), so both ways of counting idle time are exercised.
    """
    truths = [profile(i, legacy_every) for i in range(nodes)]
    for line in _lines(truths, gpus, end - duration_s, end, step_s, down_for_s):
        out.write(line)
        out.write("\n")
    return truths
