"""Time-series rules: from a stream of per-GPU samples to conditions (future events).

Each rule looks at the current sample and a little remembered state (since when a state holds, the
previous counter values).  Durations use agent time, so a scenario at ``--time-scale 60`` shows a
five-minute stall in five seconds.  Codes reuse the doctor's finding codes where the meaning is the
same (``thermal.throttle``, ``pcie.link_degraded``, ``gpu.missing``) and take every severity and shared
threshold
from ``knowledge/data/codes.json`` and ``gpu_thresholds.json``; agent-only signals are ``watch.*``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.checks._hw import threshold
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.knowledge.codes import severity
from gpuclinic.watch import reasons as R
from gpuclinic.watch.config import RulesConfig
from gpuclinic.watch.events import Condition

GIB = 1024**3
# the doctor's per-GPU state detectors watch runs on every sample (heat runs through its own functions)
_STATE_CHECKS = [
    "memory.row_remap",
    "memory.retired_pages",
    "gpu.recovery_action",
    "gpu.inforom",
    "power.insufficient",
]

# clock event reason -> (code, severity condition in codes.json, title, remedy)
_THROTTLE = {
    "hw_thermal_slowdown": (
        "thermal.throttle",
        None,
        "hardware thermal slowdown",
        "The GPU is too hot and the hardware cut its clocks. Check airflow, fans and inlet "
        "temperature (`gpuclinic runbook thermal.slowdown`).",
    ),
    "sw_thermal_slowdown": (
        "thermal.throttle",
        "software",
        "software thermal slowdown",
        "The driver is holding clocks down to keep GPU/memory under the max operating "
        "temperature. Improve cooling or lower the load (`gpuclinic runbook thermal.slowdown`).",
    ),
    "hw_slowdown": (
        "clocks.hw_slowdown",
        None,
        "hardware slowdown (clocks cut by half or more)",
        "HW slowdown is heat, an external power brake or a power spike. Check temperature and the "
        "PSUs (`gpuclinic runbook power.brake`).",
    ),
    "hw_power_brake_slowdown": (
        "power.brake",
        None,
        "power brake engaged (external power brake)",
        "The system asserted the power-brake signal: usually a failing or overloaded power "
        "supply (`gpuclinic runbook power.brake`).",
    ),
    "sw_power_cap": (
        "power.cap",
        None,
        "running at the power limit (software power cap)",
        "The GPU draws its full power limit, which is normal under heavy load. If the limit was "
        "lowered (compare with the default limit), restore it (`gpuclinic runbook power.cap`).",
    ),
}


@dataclass
class _GpuState:
    throttle_since: dict[str, float] = field(default_factory=dict)
    stall_since: float | None = None
    idle_since: float | None = None
    straggler_since: float | None = None
    pcie_bad_since: float | None = None
    prev: dict[str, int] = field(default_factory=dict)


@dataclass
class Known:
    index: int
    uuid: str | None
    pci_bus_id: str | None
    name: str | None


def gpu_key(g: GpuFacts) -> str:
    return g.uuid or g.pci_bus_id or f"index-{g.index}"


def _limit_lowered(g: GpuFacts) -> bool:
    """The doctor's power.cap rule: an enforced limit under a fraction of the default, on a busy GPU."""
    lim = g.power_enforced_limit_w or g.power_limit_w
    if not lim or not g.power_default_limit_w:
        return False
    return lim < g.power_default_limit_w * threshold("power_limit_lowered_fraction") and (
        (g.utilization_gpu_pct or 0) >= threshold("busy_util_pct")
    )


def _fmt_s(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class RuleEngine:
    """Evaluate the rules on each tick; keep per-GPU state between ticks."""

    def __init__(self, cfg: RulesConfig, expect_gpus: int | None = None) -> None:
        self.cfg = cfg
        self.expect_gpus = expect_gpus
        self.state: dict[str, _GpuState] = {}
        self.known: dict[str, Known] = {}  # every GPU seen since start (for "count dropped")
        self._throttle_reasons = [R.canonical(r) for r in cfg.throttle_reasons]

    def _gpu_condition(self, g: GpuFacts, code: str, *, uuid: str | None = None, **kw: Any) -> Condition:
        """A per-GPU condition keyed by the GPU's identity, with its code's one severity from codes.json."""
        return Condition(key=f"rules:{code}:{self.key(g)}", code=code, severity=severity(code), gpu=g.index,
                         uuid=uuid or g.uuid, **kw)

    def key(self, g: GpuFacts) -> str:
        """A GPU's identity across samples, even when a lost GPU no longer reports its UUID."""
        if g.uuid:
            return g.uuid
        for k, kn in self.known.items():
            if (g.pci_bus_id and kn.pci_bus_id == g.pci_bus_id) or (not g.pci_bus_id and kn.index == g.index):
                return k
        return gpu_key(g)

    def _st(self, g: GpuFacts) -> _GpuState:
        return self.state.setdefault(self.key(g), _GpuState())

    def evaluate(self, now: float, gpus: list[GpuFacts]) -> tuple[list[Condition], list[Condition]]:
        """-> (state conditions true now, point conditions: counters that rose this tick)."""
        conds: list[Condition] = []
        points: list[Condition] = []
        present = set()
        for g in gpus:
            k = self.key(g)
            present.add(k)
            old = self.known.get(k)
            self.known[k] = Known(
                g.index,
                g.uuid or (old.uuid if old else None),
                g.pci_bus_id or (old.pci_bus_id if old else None),
                g.name or (old.name if old else None),
            )
            if g.lost:
                conds.append(self._lost(g))
                continue
            st = self._st(g)
            conds.extend(self._throttle(now, g, st))
            conds.extend(self._state(g))
            points.extend(self._counters(g, st))
            conds.extend(self._pcie(now, g, st))
            conds.extend(self._stall_idle(now, g, st))
        conds.extend(self._straggler(now, gpus))
        conds.extend(self._missing(present))
        return conds, points

    # -- individual rules ---------------------------------------------------------------------------------
    def _lost(self, g: GpuFacts) -> Condition:
        if (g.lost_reason or "").startswith("unresponsive"):  # the doctor's gpu.unresponsive: hung, not gone
            return self._gpu_condition(
                g,
                "gpu.unresponsive",
                uuid=g.uuid or self.known[self.key(g)].uuid,
                title=f"GPU {g.index} does not answer NVML: driver or GPU firmware hung",
                evidence=[f"GPU {g.index} {g.pci_bus_id or ''}: {g.lost_reason}".strip()],
                remedy="Drain, stop its processes, reset it (`gpuclinic runbook gpu.unresponsive`).",
            )
        return self._gpu_condition(
            g,
            "gpu.missing",
            uuid=g.uuid or self.known[self.key(g)].uuid,
            title=f"GPU {g.index} is lost (NVML can no longer talk to it)",
            evidence=[f"GPU {g.index} {g.pci_bus_id or ''}: {g.lost_reason or 'GPU is lost'}".strip()],
            remedy="Jobs on this GPU are dead. Drain the node, save logs (`gpuclinic capture --redact`) and "
                   "reboot: a GPU "
            "reset cannot reach a GPU that left the bus (`gpuclinic runbook gpu.fallen_off_bus`).",
        )

    def _missing(self, present: set[str]) -> list[Condition]:
        expected = max(self.expect_gpus or 0, len(self.known))
        gone = [kn for k, kn in self.known.items() if k not in present]
        if not gone and len(present) >= expected:
            return []
        ev = [f"{len(present)} GPU(s) visible now, {expected} expected"]
        ev += [f"missing: GPU {kn.index} {kn.pci_bus_id or ''} {kn.uuid or ''}".rstrip() for kn in gone]
        return [
            Condition(
                key="rules:gpu.missing:node",
                code="gpu.missing",
                severity=severity("gpu.missing"),
                title=f"GPU count dropped to {len(present)} of {expected}",
                evidence=ev,
                remedy="A GPU vanished from NVML: check `gpuclinic events` for an XID 79 / "
                       "fallen-off-the-bus line, "
                "drain the node and reboot; ask the provider to inspect the GPU if it keeps disappearing.",
            )
        ]

    def _throttle(self, now: float, g: GpuFacts, st: _GpuState) -> list[Condition]:
        out = []
        act = set(R.active(g.clock_event_reasons_mask, g.clock_event_reasons))
        for r in list(st.throttle_since):
            if r not in act:
                del st.throttle_since[r]
        for r in act:
            st.throttle_since.setdefault(r, now)
        for r in self._throttle_reasons:
            if r not in act or r not in _THROTTLE:
                continue
            if r == "sw_power_cap" and (g.utilization_gpu_pct or 0) < self.cfg.sw_power_cap_min_util_pct:
                continue
            since = st.throttle_since[r]
            if now - since < self.cfg.throttle_min_s:
                continue
            code, when, title, remedy = _THROTTLE[r]
            if r == "sw_power_cap" and _limit_lowered(g):
                when, title = "lowered_busy", "capped by a power limit below its default"
            sev = severity(code, when)
            ev = [f"clock event reason {r} active since onset ({R.DESCRIPTION.get(r, r)})"]
            if g.sm_clock_mhz is not None and g.sm_clock_max_mhz:
                ev.append(f"SM clock {g.sm_clock_mhz:.0f} of {g.sm_clock_max_mhz:.0f} MHz at onset")
            if g.temperature_c is not None:
                ev.append(
                    f"temperature {g.temperature_c:.0f} °C (slowdown at {g.slowdown_temp_c:.0f} °C)"
                    if g.slowdown_temp_c
                    else f"temperature {g.temperature_c:.0f} °C"
                )
            if g.power_draw_w is not None and (g.power_enforced_limit_w or g.power_limit_w):
                ev.append(
                    f"power {g.power_draw_w:.0f} W of {(g.power_enforced_limit_w or g.power_limit_w):.0f} W "
                    "limit"
                )
            out.append(
                Condition(
                    key=f"rules:{code}:{self.key(g)}:{r}",
                    code=code,
                    severity=sev,
                    gpu=g.index,
                    uuid=g.uuid,
                    title=f"GPU {g.index}: {title}",
                    evidence=ev,
                    remedy=remedy,
                    data={"reason": r, "since": since, "active_s": round(now - since, 1)},
                )
            )
        return out

    def _state(self, g: GpuFacts) -> list[Condition]:
        """What is wrong with this sample by the doctor's own detectors (heat, HBM row remapping)."""
        from gpuclinic.checks import run_checks
        from gpuclinic.checks.thermal import gpu_temperature, hbm_temperature
        from gpuclinic.facts.snapshot import Snapshot

        found = [f for f in (gpu_temperature(g, self.cfg.temp_margin_c), hbm_temperature(g)) if f is not None]
        findings, _ = run_checks(Snapshot(gpus=[g], nvml_available=True), only=_STATE_CHECKS)
        found += findings
        return [
            Condition(
                key=f"rules:{f.code}:{self.key(g)}" + (f":{f.data['sensor']}" if "sensor" in f.data else ""),
                code=f.code,
                severity=f.severity,
                gpu=g.index,
                uuid=g.uuid,
                title=f.title,
                evidence=list(f.evidence),
                remedy=f.remedy,
                data=dict(f.data),
            )
            for f in found
        ]

    def _counters(self, g: GpuFacts, st: _GpuState) -> list[Condition]:
        out = []
        specs = [
            (
                "ecc_uncorr",
                g.ecc_volatile_uncorrected
                if g.ecc_volatile_uncorrected is not None
                else g.ecc_aggregate_uncorrected,
                "memory.ecc_uncorrectable",
                None,
                "uncorrectable ECC errors",
                "Uncorrectable memory errors corrupt data and kill jobs. Drain the GPU, "
                "reset it so row remapping takes effect, and ask the provider to replace it if errors "
                "continue.",
            ),
            (
                "ecc_corr",
                g.ecc_volatile_corrected
                if g.ecc_volatile_corrected is not None
                else g.ecc_aggregate_corrected,
                "memory.ecc_correctable_rate",
                None,
                "correctable ECC errors rising",
                "Correctable errors are fixed by ECC, but a climbing count often precedes uncorrectable "
                "ones. Watch "
                "the trend (`gpuclinic history ecc_corrected`) and plan a replacement if it keeps rising.",
            ),
            (
                "remap_uncorr",
                g.remapped_rows_uncorrectable,
                "memory.row_remap_uncorrectable",
                None,
                "rows remapped after uncorrectable errors",
                "Memory rows were retired after uncorrectable errors. Reset the GPU at the next safe point; "
                "replace "
                "it if remapping fails or keeps happening.",
            ),
            (
                "pcie_replay",
                g.pcie_replay_count,
                "pcie.replay",
                None,
                "PCIe replays rising",
                "The PCIe link is retransmitting: a marginal riser, cable or slot. Check `gpuclinic doctor` "
                "for the "
                "link state; ask the provider to reseat the GPU if replays keep climbing.",
            ),
        ]
        for name, val, code, when, title, remedy in specs:
            sev = severity(code, when)
            if val is None:
                continue
            prev = st.prev.get(name)
            st.prev[name] = int(val)
            if prev is not None and val > prev:
                out.append(
                    Condition(
                        key=f"rules:{code}:{self.key(g)}",
                        code=code,
                        severity=sev,
                        gpu=g.index,
                        uuid=g.uuid,
                        title=f"GPU {g.index}: {title}",
                        evidence=[f"{name.replace('_', ' ')} {prev} -> {int(val)}"],
                        remedy=remedy,
                        data={"from": prev, "to": int(val)},
                        hold_s=self.cfg.counter_hold_s,
                    )
                )
        return out

    def _pcie(self, now: float, g: GpuFacts, st: _GpuState) -> list[Condition]:
        gen_bad = g.pcie_gen is not None and g.pcie_gen_max is not None and g.pcie_gen < g.pcie_gen_max
        width_bad = (
            g.pcie_width is not None and g.pcie_width_max is not None and g.pcie_width < g.pcie_width_max
        )
        loaded = (g.utilization_gpu_pct or 0) >= self.cfg.pcie_min_util_pct
        if not ((gen_bad or width_bad) and loaded):
            st.pcie_bad_since = None
            return []
        if st.pcie_bad_since is None:
            st.pcie_bad_since = now
        if now - st.pcie_bad_since < self.cfg.pcie_sustain_s:
            return []
        return [
            self._gpu_condition(
                g,
                "pcie.link_degraded",
                title=f"GPU {g.index}: PCIe link downtrained under load",
                evidence=[
                    f"link Gen{g.pcie_gen} x{g.pcie_width}, capable of Gen{g.pcie_gen_max} "
                    f"x{g.pcie_width_max}, "
                    f"at {g.utilization_gpu_pct or 0:.0f}% utilisation"
                ],
                remedy="Host<->GPU transfers run slower than the slot allows. Reseat the GPU/riser, check "
                       "BIOS PCIe "
                "settings; ask the provider to inspect the slot if it persists after a reboot.",
            )
        ]

    def _stall_idle(self, now: float, g: GpuFacts, st: _GpuState) -> list[Condition]:
        out = []
        util = g.utilization_gpu_pct
        held = sum(p.used_memory_bytes or 0 for p in g.processes)
        if not held and g.processes and g.memory_used_bytes:
            held = g.memory_used_bytes
        stalled = (
            bool(g.processes)
            and util is not None
            and util <= self.cfg.stall_util_pct
            and held >= self.cfg.stall_min_memory_mib * 1024 * 1024
        )
        if stalled:
            st.stall_since = st.stall_since if st.stall_since is not None else now
            dur = now - st.stall_since
            if dur >= self.cfg.stall_minutes * 60:
                procs = ", ".join(
                    f"PID {p.pid} ({p.name or '?'}) holds {(p.used_memory_bytes or 0) / GIB:.1f} GiB"
                    for p in g.processes[:4]
                )
                out.append(
                    self._gpu_condition(
                        g,
                        "watch.stall",
                        title=f"GPU {g.index}: job holds memory but does no work (stalled?)",
                        evidence=[procs, f"utilisation <= {self.cfg.stall_util_pct:g}% for {_fmt_s(dur)}"],
                        remedy="The process is alive but the GPU is idle: a hung NCCL collective, a "
                               "dataloader deadlock or "
                        "a job waiting on a dead peer. Dump its stacks (py-spy dump --pid PID), check the "
                        "other "
                        "ranks, then restart it from the last checkpoint.",
                        data={"since": st.stall_since},
                    )
                )
        else:
            st.stall_since = None
        idle = not g.processes and (util is None or util < 5)
        if idle:
            st.idle_since = st.idle_since if st.idle_since is not None else now
            dur = now - st.idle_since
            if dur >= self.cfg.idle_minutes * 60:
                out.append(
                    self._gpu_condition(
                        g,
                        "watch.idle",
                        title=f"GPU {g.index} idle: no process for {_fmt_s(dur)}",
                        evidence=[
                            f"no compute process and {util or 0:.0f}% utilisation since the idle period began"
                        ],
                        remedy="A rented GPU doing nothing costs money. Start the next job or release the "
                        "server. (Inside "
                        "a container without --pid=host, processes are invisible: "
                        "check utilisation instead.)",
                        data={"since": st.idle_since},
                    )
                )
        else:
            st.idle_since = None
        return out

    def _straggler(self, now: float, gpus: list[GpuFacts]) -> list[Condition]:
        busy = [g for g in gpus if not g.lost and g.processes and g.utilization_gpu_pct is not None]
        if len(busy) < threshold("straggler_min_peers"):
            for g in gpus:
                self._st(g).straggler_since = None
            return []
        med_u = statistics.median(g.utilization_gpu_pct or 0 for g in busy)
        ratio = self.cfg.straggler_clock_ratio or threshold("straggler_clock_ratio")
        clocks = [g.sm_clock_mhz for g in busy if g.sm_clock_mhz]
        med_c = statistics.median(clocks) if clocks else None
        out = []
        for g in busy:
            st = self._st(g)
            slow_u = med_u >= 50 and (g.utilization_gpu_pct or 0) < med_u - self.cfg.straggler_util_gap_pct
            slow_c = (
                med_c is not None
                and g.sm_clock_mhz is not None
                and med_u >= 50
                and g.sm_clock_mhz < med_c * ratio
            )
            if not (slow_u or slow_c):
                st.straggler_since = None
                continue
            st.straggler_since = st.straggler_since if st.straggler_since is not None else now
            if now - st.straggler_since < self.cfg.straggler_minutes * 60:
                continue
            ev = [f"utilisation {g.utilization_gpu_pct:.0f}% vs peers' median {med_u:.0f}%"]
            if med_c is not None and g.sm_clock_mhz is not None:
                ev.append(f"SM clock {g.sm_clock_mhz:.0f} MHz vs peers' median {med_c:.0f} MHz")
            out.append(
                self._gpu_condition(
                    g,
                    "perf.straggler",
                    title=f"GPU {g.index} is a straggler: slower than its peers",
                    evidence=ev,
                    remedy="In data-parallel training every step waits for the slowest GPU. Look for "
                    "throttling on this GPU "
                    "(`gpuclinic events`), its PCIe link and temperature; exclude it if it stays slow.",
                    data={"since": st.straggler_since},
                )
            )
        return out
