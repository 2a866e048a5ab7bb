"""Time-series rules: from a stream of per-GPU samples to conditions (future events).

What a sample *means* is the doctor's: the detectors of the failure classes a sample shows (heat, power,
HBM, GPU presence; ``WINDOW_DETECTORS``) judge the engine's window of recent samples through
:meth:`Detector.observe`, so a code, its severity, title, evidence and remedy are the same in ``watch``,
``doctor`` and the alert rules.  What needs history stays here: onsets (a clock slowdown must be in
every sample of a window ``throttle_min_s`` long), counters that rose since the last sample, a PCIe link
downtrained under load for ``pcie_sustain_s``, stalls, idle GPUs, stragglers among peers and a GPU count
that dropped.  Durations use agent time, so a scenario at ``--time-scale 60`` shows a five-minute stall in
five seconds.  Every severity and shared threshold comes from ``knowledge/data/codes.json`` and
``gpu_thresholds.json``, every remedy of a rule here from the code's runbook; agent-only signals are
``watch.*``.
"""

from __future__ import annotations

import datetime as _dt
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.checks import Window, detectors
from gpuclinic.checks._baseline import gpu_key, rises
from gpuclinic.checks._hw import threshold
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import severity
from gpuclinic.knowledge.runbooks import remedy as runbook_remedy
from gpuclinic.model import Finding, GpuRef
from gpuclinic.watch import reasons as R
from gpuclinic.watch.config import RulesConfig
from gpuclinic.watch.events import Condition, condition_remedy

GIB = 1024**3
# the failure classes a single sample shows; the engine runs their detectors over its window of samples
WINDOW_DETECTORS = ("heat", "power", "hbm", "gpu_presence")


def clock_reasons(f: Finding) -> set[str]:
    """The clock-event reasons a finding reports (thermal.throttle, power.brake, power.cap at the cap):
    such a finding opens an event only once it has lasted ``throttle_min_s``."""
    d = f.data
    out = {str(r) for r in d.get("reasons") or []}
    if isinstance(d.get("reason"), str):
        out.add(d["reason"])
    if d.get("sw_power_cap") and d.get("busy"):
        out.add("sw_power_cap")
    return {r for r in (R.canonical(x) for x in out) if r in R.BIT}


@dataclass
class _GpuState:
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


def _limit_lowered(g: GpuFacts) -> bool:
    """The doctor's power.cap rule: an enforced limit under a fraction of the default, on a busy GPU."""
    lim = g.power_enforced_limit_w or g.power_limit_w
    if not lim or not g.power_default_limit_w:
        return False
    return lim < g.power_default_limit_w * threshold("power_limit_lowered_fraction") and (
        (g.utilization_gpu_pct or 0) >= threshold("busy_util_pct")
    )


def _remedy(code: str, g: GpuFacts | None) -> str:
    """What to do about ``code``: its runbook's first step, filled in for the GPU (one text everywhere)."""
    return runbook_remedy(code, GpuRef(index=g.index, pci_bus_id=g.pci_bus_id, uuid=g.uuid) if g else None)


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
        self._throttle_reasons = {R.canonical(r) for r in cfg.throttle_reasons}
        self._ring: deque[tuple[float, Snapshot]] = deque()  # the window the detectors observe
        dets = detectors()
        self._detectors = [dets[d] for d in WINDOW_DETECTORS]
        self._memo: dict[str, dict[int, Any]] = {d: {} for d in WINDOW_DETECTORS}  # each sample judged once

    def _gpu_condition(self, g: GpuFacts, code: str, *, uuid: str | None = None, **kw: Any) -> Condition:
        """A per-GPU condition keyed by the GPU's identity, with its code's one severity from codes.json and
        its runbook's first step as the remedy."""
        return Condition(key=f"rules:{code}:{self.key(g)}", code=code, severity=severity(code), gpu=g.index,
                         uuid=uuid or g.uuid, remedy=_remedy(code, g), **kw)

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
        conds.extend(self._window(now, gpus))
        for g in gpus:
            if g.lost:  # the presence detector says so; a lost GPU has no live numbers for the rest
                continue
            st = self._st(g)
            points.extend(self._counters(g, st))
            conds.extend(self._pcie(now, g, st))
            conds.extend(self._stall_idle(now, g, st))
        conds.extend(self._straggler(now, gpus))
        conds.extend(self._missing(present))
        return conds, points

    # -- the doctor's detectors over the window -----------------------------------------------------------
    def _window(self, now: float, gpus: list[GpuFacts]) -> list[Condition]:
        """The window detectors' findings on the recent samples, as conditions.

        The window reaches back ``throttle_min_s`` (one sample at or before that time is kept, so it
        spans the onset time once there is enough history).  A warning the window saw stays open while it
        is in the window (``Detector.observe``); a clock slowdown opens only when every sample had it."""
        taken = _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat()
        snap = Snapshot(origin="watch", gpus=list(gpus), nvml_available=True, taken_at=taken)
        self._ring.append((now, snap))
        while len(self._ring) >= 2 and self._ring[1][0] <= now - self.cfg.throttle_min_s:
            self._ring.popleft()
        live = {id(s) for _, s in self._ring}
        for memo in self._memo.values():
            for k in [k for k in memo if k not in live]:
                del memo[k]
        span = now - self._ring[0][0]
        window = Window(tuple(snap for _, snap in self._ring), span_s=span)
        found: list[Finding] = []
        for det in self._detectors:
            found += det.observe(window, self._memo[det.name])[0]
        if self.cfg.temp_margin_c is not None:  # the site's own margin, through the doctor's heat rule
            from gpuclinic.checks.thermal import gpu_temperature

            found = [f for f in found if not (f.code == "thermal.slowdown" and f.data.get("sensor") == "gpu")]
            found += [f for g in gpus if not g.lost and (f := gpu_temperature(g, self.cfg.temp_margin_c))]
        out = []
        for f in found:
            reasons = clock_reasons(f)
            if reasons:
                w = f.data.get("window") or {}
                if not reasons & self._throttle_reasons:
                    continue
                if w and (w.get("samples") != w.get("of") or span < self.cfg.throttle_min_s):
                    continue  # not yet in every sample of a window as long as the onset time
            out.append(self._finding_condition(f, reasons, span))
        return out

    def _facts_of(self, ref: GpuRef | None) -> GpuFacts | None:
        """The newest sample of the GPU a finding names."""
        if ref is None:
            return None
        for _, snap in reversed(self._ring):
            for g in snap.gpus:
                if (ref.uuid and g.uuid == ref.uuid) or (ref.pci_bus_id and g.pci_bus_id == ref.pci_bus_id) \
                        or (not ref.uuid and not ref.pci_bus_id and g.index == ref.index):
                    return g
        return None

    def _finding_condition(self, f: Finding, reasons: set[str], span: float) -> Condition:
        """A detector finding as a condition keyed by the GPU's identity (and sensor or clock reason)."""
        g = self._facts_of(f.gpu)
        who = self.key(g) if g is not None else "node"
        sub = f.data.get("sensor") or (sorted(reasons)[0] if reasons else None)
        data = dict(f.data)
        if reasons:
            data["reason"] = sorted(reasons)[0] if len(reasons) == 1 else sorted(reasons)
            data["active_s"] = round(span, 1)
        uuid = g.uuid if g is not None else None
        if g is not None and uuid is None and who in self.known:
            uuid = self.known[who].uuid
        return Condition(
            key=f"rules:{f.code}:{who}" + (f":{sub}" if sub else ""),
            code=f.code,
            severity=f.severity,
            title=f.title,
            gpu=g.index if g is not None else (f.gpu.index if f.gpu else None),
            uuid=uuid,
            evidence=list(f.evidence),
            remedy=condition_remedy(f),
            data=data,
        )

    # -- rules that need history --------------------------------------------------------------------------
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
                remedy=_remedy("gpu.missing", None),
            )
        ]

    def _counters(self, g: GpuFacts, st: _GpuState) -> list[Condition]:
        """A counter that rose since the last tick is a point event of its code (the shared counters and
        baseline of ``checks/_baseline.py``, as ``run`` uses them); the count as a state is the detector's."""
        return [
            Condition(
                key=f"rules:{r.counter.code}:{self.key(g)}:rise",
                code=r.counter.code,
                severity=severity(r.counter.code),
                gpu=g.index,
                uuid=g.uuid,
                title=f"GPU {g.index}: {r.counter.title}",
                evidence=[r.evidence],
                remedy=_remedy(r.counter.code, g),
                data={"from": r.before, "to": r.after},
                hold_s=self.cfg.counter_hold_s,
            )
            for r in rises(st.prev, g)
        ]

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
                        data={"since": st.idle_since},
                    )
                )
        else:
            st.idle_since = None
        return out

    def _straggler(self, now: float, gpus: list[GpuFacts]) -> list[Condition]:
        """The doctor's straggler rule (``checks/perf.stragglers``) on this sample; watch adds only the
        onset: it opens once the same GPU was a straggler for ``straggler_minutes``."""
        from gpuclinic.checks.perf import stragglers

        slow = stragglers([g for g in gpus if not g.lost], self.cfg.straggler_clock_ratio)
        found = {f.gpu.index: f for f in slow if f.gpu is not None}
        out = []
        for g in gpus:
            st = self._st(g)
            f = found.get(g.index)
            if f is None:
                st.straggler_since = None
                continue
            st.straggler_since = st.straggler_since if st.straggler_since is not None else now
            if now - st.straggler_since < self.cfg.straggler_minutes * 60:
                continue
            c = self._finding_condition(f, set(), 0.0)
            c.data["since"] = st.straggler_since
            out.append(c)
        return out
