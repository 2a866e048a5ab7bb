"""The scenario simulator: a scripted timeline of GPU facts and kernel-log lines, as data.

A scenario (``watch/scenarios/<name>.json``) lists GPUs (or a template expanded ``gpu_count`` times),
``tracks`` of numeric fields with keyframes ``[t, value]`` (linear between keyframes for float
fields, stepwise for the rest) and timed ``events``: ``set`` fields on a GPU, append a ``kernel``
line, ``hang_s`` (the next sample blocks, like a hung driver) or ``nvml_error`` (the next sample
raises, like NVML returning an error).  ``rules`` holds threshold overrides that make the demo
show its events in minutes instead of hours.  The same backend interface as NVML drives the agent,
so everything downstream (rules, store, metrics, alerts, dashboard) runs for real.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gpuclinic.errors import InputError
from gpuclinic.facts.gpu import GpuFacts, GpuProcess
from gpuclinic.watch.backend import BackendInfo, Clock

_FIELDS = {f.name: f for f in dataclasses.fields(GpuFacts)}
_FLOAT_FIELDS = {n for n, f in _FIELDS.items() if str(f.type).startswith("float")}
BUS_IDS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
           "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


class SimulatedNvmlError(Exception):
    """Raised by a scripted ``nvml_error`` event (stands in for ``pynvml.NVMLError``)."""


@dataclass
class Scenario:
    name: str
    description: str
    gpus: list[dict[str, Any]]
    tracks: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    rules: dict[str, Any] = field(default_factory=dict)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    duration_s: float | None = None
    room: dict[str, Any] | None = None  # BMC facts (facts.room.RoomFacts as JSON) while the fault lasts
    room_from: float = 0.0
    room_until: float | None = None


def _scenario_dir() -> Any:
    return resources.files("gpuclinic.watch").joinpath("scenarios")


def list_watch_scenarios() -> list[tuple[str, str]]:
    out = []
    for ref in sorted(_scenario_dir().iterdir(), key=lambda r: r.name):
        if ref.name.endswith(".json"):
            d = json.loads(ref.read_text(encoding="utf-8"))
            out.append((ref.name[:-5], d.get("description", "")))
    return out


def load_watch_scenario(name_or_path: str, *, hold: bool = False) -> Scenario:
    """A shipped scenario by name, or a JSON file path (``hold``: a fault state never recovers)."""
    p = Path(name_or_path)
    try:
        if p.suffix == ".json" and p.exists():
            raw = json.loads(p.read_text(encoding="utf-8"))
        else:
            ref = _scenario_dir().joinpath(f"{name_or_path}.json")
            if not ref.is_file():
                from gpuclinic.sources.scenarios import is_fault_state, unknown_scenario

                if is_fault_state(name_or_path):
                    return timeline_from_fault_state(name_or_path, hold=hold)
                raise unknown_scenario(name_or_path)
            raw = json.loads(ref.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"scenario {name_or_path} is not valid JSON: {e}") from None
    return scenario_from_dict(raw, default_name=p.stem)


def scenario_from_dict(raw: dict[str, Any], default_name: str = "scenario") -> Scenario:
    gpus: list[dict[str, Any]] = list(raw.get("gpus") or [])
    if not gpus and raw.get("gpu_count"):
        tmpl = raw.get("gpu_template") or {}
        for i in range(int(raw["gpu_count"])):
            g = {k: (v.format(i=i) if isinstance(v, str) else copy.deepcopy(v)) for k, v in tmpl.items()}
            g.setdefault(
                "pci_bus_id", BUS_IDS[i % len(BUS_IDS)] if i < len(BUS_IDS) else f"0000:{0x10 + i:02x}:00.0"
            )
            gpus.append(g)
    if not gpus:
        raise InputError("scenario has no GPUs (give 'gpus' or 'gpu_count' + 'gpu_template')")
    for i, g in enumerate(gpus):
        g.setdefault("index", i)
        g.setdefault("pci_bus_id", BUS_IDS[i % len(BUS_IDS)])
        g.setdefault("uuid", f"GPU-5a1c0000-0000-4000-8000-{i:012d}")
        for k in g:
            if k not in _FIELDS:
                raise InputError(f"scenario GPU {i}: unknown field {k!r}")
    for tr in raw.get("tracks") or []:
        if tr.get("field") not in _FIELDS:
            raise InputError(f"scenario track: unknown field {tr.get('field')!r}")
    return Scenario(
        name=raw.get("name") or default_name,
        description=raw.get("description", ""),
        gpus=gpus,
        tracks=list(raw.get("tracks") or []),
        events=sorted(raw.get("events") or [], key=lambda e: float(e["t"])),
        rules=dict(raw.get("rules") or {}),
        driver_version=raw.get("driver_version"),
        cuda_driver_version=raw.get("cuda_driver_version"),
        duration_s=raw.get("duration_s"),
        room=raw.get("room"),
        room_from=float(raw.get("room_from") or 0.0),
        room_until=float(raw["room_until"]) if raw.get("room_until") is not None else None,
    )


_SKIP = {"nvlinks"}  # per-link facts are the doctor's; the sampler replays GPU-level fields


def timeline_from_fault_state(name: str, *, hold: bool = False) -> Scenario:
    """A doctor scenario as a timeline: the healthy node, the fault at ``fault_at``, recovery if transient.

    ``hold`` keeps a transient fault in place (no recovery): fleet tests and demos need a node that stays
    faulted for as long as they look at it.
    """
    from gpuclinic.sources.scenarios import build_snapshot_dict, timeline

    tl = timeline(name)
    healthy = build_snapshot_dict("healthy-8xh100-load")
    faulted = build_snapshot_dict(name)
    fault_at, recover_at = float(tl["fault_at"] or 0), (None if hold else tl["recover_at"])
    gpus = [
        {k: copy.deepcopy(v) for k, v in g.items() if k in _FIELDS and k not in _SKIP}
        for g in healthy["gpus"]
    ]
    events: list[dict[str, Any]] = []
    for i, (h, f) in enumerate(zip(gpus, faulted["gpus"], strict=True)):
        if f.get("lost"):
            diff = {"lost": True, "lost_reason": f.get("lost_reason")}
        else:
            diff = {k: v for k, v in f.items() if k in _FIELDS and k not in _SKIP and h.get(k) != v}
        if not diff:
            continue
        events.append({"t": fault_at, "gpu": i, "set": copy.deepcopy(diff)})
        if recover_at is not None:
            events.append(
                {"t": float(recover_at), "gpu": i, "set": {k: copy.deepcopy(h.get(k)) for k in diff}}
            )
    lines = [str(e["line"]) for e in faulted["kernel_events"] if e.get("line")]
    if lines:
        events.append({"t": fault_at, "kernel": lines})
    snap = faulted
    return scenario_from_dict(
        {
            "name": name,
            "description": f"{snap['notes'][0].split(': ', 1)[-1]} (fault at {fault_at:g} s"
            + (f", recovers at {float(recover_at):g} s)" if recover_at is not None else ")"),
            "gpus": gpus,
            "events": events,
            "driver_version": snap.get("driver_version"),
            "cuda_driver_version": snap.get("cuda_driver_version"),
            "duration_s": tl["duration_s"],
            "rules": {"throttle_min_s": 2, "pcie_sustain_s": 5, "straggler_minutes": 0.1},
            "room": snap.get("room"),
            "room_from": fault_at,
            "room_until": recover_at,
        },
        default_name=name,
    )


def _targets(spec: Any, n: int) -> list[int]:
    if spec is None or spec == "*":
        return list(range(n))
    if isinstance(spec, list):
        return [int(x) for x in spec]
    return [int(spec)]


def _interp(points: list[list[Any]], t: float, linear: bool) -> Any:
    if t <= float(points[0][0]):
        return points[0][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t < float(t1):
            if linear and isinstance(v0, (int, float)) and isinstance(v1, (int, float)):
                return v0 + (v1 - v0) * (t - float(t0)) / (float(t1) - float(t0))
            return v0
    return points[-1][1]


def _to_processes(v: Any) -> list[GpuProcess]:
    return [p if isinstance(p, GpuProcess) else GpuProcess(**p) for p in (v or [])]


class ScenarioBackend:
    """Plays a :class:`Scenario` against the agent's clock (scaled for tests and demos)."""

    def __init__(self, scenario: Scenario, clock: Clock, *, loop: bool = False) -> None:
        self.scenario = scenario
        self.clock = clock
        self.loop = loop
        self.t0: float | None = None  # scenario time starts at the first sample
        self._base = [dict(g) for g in scenario.gpus]
        self._applied = 0  # events applied so far (sample side)
        self._kernel_sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def elapsed(self) -> float:
        if self.t0 is None:
            self.t0 = self.clock.now()
        t = self.clock.now() - self.t0
        if self.loop and self.scenario.duration_s:
            t %= self.scenario.duration_s
        return t

    def open(self) -> BackendInfo:
        return BackendInfo(
            name=f"scenario:{self.scenario.name}",
            driver_version=self.scenario.driver_version,
            cuda_driver_version=self.scenario.cuda_driver_version,
            notes=[f"simulated: {self.scenario.description}"],
        )

    def sample(self) -> list[GpuFacts]:
        t = self.elapsed()
        hang = 0.0
        error: str | None = None
        with self._lock:
            evs = self.scenario.events
            while self._applied < len(evs) and float(evs[self._applied]["t"]) <= t:
                ev = evs[self._applied]
                self._applied += 1
                for i in _targets(ev.get("gpu"), len(self._base)) if "set" in ev else []:
                    self._base[i].update(ev["set"])
                hang += float(ev.get("hang_s") or 0)
                if ev.get("nvml_error"):
                    error = str(ev["nvml_error"])
        if hang:
            # a hung driver blocks the calling thread; the agent must not wait for it
            self._stop.wait(hang / getattr(self.clock, "scale", 1.0))
        if error:
            raise SimulatedNvmlError(error)
        out = []
        for i, base in enumerate(self._base):
            if base.get("absent"):
                continue
            vals = {k: v for k, v in base.items() if k != "absent"}
            for tr in self.scenario.tracks:
                if i in _targets(tr.get("gpu"), len(self._base)):
                    name = tr["field"]
                    v = _interp(tr["points"], t, name in _FLOAT_FIELDS)
                    vals[name] = round(v, 2) if isinstance(v, float) else v
            vals["processes"] = _to_processes(vals.get("processes"))
            if vals.get("lost"):
                g = GpuFacts(
                    index=vals["index"],
                    name=vals.get("name"),
                    uuid=vals.get("uuid"),
                    pci_bus_id=vals.get("pci_bus_id"),
                    lost=True,
                    lost_reason=vals.get("lost_reason") or "GPU is lost (NVML_ERROR_GPU_IS_LOST)",
                )
            else:
                g = GpuFacts(**vals)
            out.append(g)
        return out

    def poll_kernel_lines(self) -> list[str]:
        t = self.elapsed()
        lines = []
        with self._lock:
            evs = [e for e in self.scenario.events if "kernel" in e]
            while self._kernel_sent < len(evs) and float(evs[self._kernel_sent]["t"]) <= t:
                k = evs[self._kernel_sent]["kernel"]
                lines.extend(k if isinstance(k, list) else [k])
                self._kernel_sent += 1
        return lines

    def room_facts(self) -> Any:
        """The scripted BMC facts while the fault lasts (None: no BMC in this scenario, or not now)."""
        sc = self.scenario
        if not sc.room:
            return None
        t = self.elapsed()
        if t < sc.room_from or (sc.room_until is not None and t >= sc.room_until):
            return None
        from gpuclinic.facts.room import RoomFacts
        from gpuclinic.facts.serial import from_jsonable

        return from_jsonable(RoomFacts, copy.deepcopy(sc.room))

    def close(self) -> None:
        self._stop.set()


def wall_time_for(scenario_seconds: float, scale: float) -> float:
    """How long a test must wait (wall time) for scenario time ``scenario_seconds``."""
    return scenario_seconds / scale


__all__ = [
    "Scenario",
    "ScenarioBackend",
    "SimulatedNvmlError",
    "list_watch_scenarios",
    "load_watch_scenario",
    "scenario_from_dict",
    "wall_time_for",
]
