"""PCIe link health: generation/width below what GPU and slot support, and link replays.

Idle GPUs lower their link *speed* to save power (the generation follows the P-state), so a low
generation at idle is informational; a narrower link is not explained by idle power saving: it
usually means the link trained at reduced width (seating, riser, cable, slot), so it is flagged
even at idle.  Under load both are real losses of host<->GPU bandwidth.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from gpuclinic.checks import check
from gpuclinic.checks._hw import THRESHOLDS_FILE, THRESHOLDS_SOURCE, busy, load_line, ref, threshold
from gpuclinic.checks._kernel import (
    AER_FREQUENT_COUNT,
    AER_FREQUENT_PER_HOUR,
    SOURCE,
    _base_data,
    _span_s,
    _uuid_map,
    gpu_ref,
    kernel_finding,
)
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.codes import finding, severity
from gpuclinic.model import Family, Finding, GpuRef

GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
# DCGM replay budget: errors per minute per lane at BER 1e-12 (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp)
REPLAY_PER_LANE_PER_MIN = {1: 0.15, 2: 0.30, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}



def _bw(gen: int | None, width: int | None) -> float | None:
    if gen is None or width is None or gen not in GEN_GTS:
        return None
    return GEN_GTS[gen] * width


@check("pcie.link_degraded", codes=["pcie.link_degraded"], what="PCIe link generation and width")
def link_degraded(snap: Snapshot) -> Iterable[Finding]:
    out = []
    idle: list[Finding] = []
    for g in snap.gpus:
        if g.lost:
            continue
        f = _link(g)
        if f and f.data.get("reason") == "idle_gen":
            idle.append(f)
        elif f:
            out.append(f)
    if len(idle) > 1:  # one line for a whole idle node, not one per GPU
        gens = sorted({f.data["gen"] for f in idle})
        out.append(
            finding(
                "pcie.link_degraded",
                when="idle",
                title=f"{len(idle)} idle GPUs have their PCIe links at Gen{'/'.join(map(str, gens))} (power "
                      "saving)",
                evidence=_grouped(idle)
                + ["idle GPUs lower the link generation to save power; this is expected at idle"],
                source=idle[0].source,
                data={"reason": "idle_gen", "gpus": [f.gpu.index for f in idle if f.gpu]},
            )
        )
    else:
        out.extend(idle)
    return out


def _grouped(findings: list[Finding]) -> list[str]:
    """``GPU 0, 1, 2: <link line>`` for GPUs sharing the same link state."""
    groups: dict[str, list[str]] = {}
    for f in findings:
        groups.setdefault(f.evidence[0], []).append(str(f.gpu.index if f.gpu else "?"))
    return [f"GPU {', '.join(ids)}: {line}" for line, ids in groups.items()]


def _board_wired(g: GpuFacts) -> bool:
    """A notebook GPU (by its name): NVML reports the chip's max width, the board wires fewer lanes."""
    markers = load_data(THRESHOLDS_FILE)["pcie_board_wired_name_markers"]["value"]
    return bool(g.name) and any(m in str(g.name) for m in markers)


def _low_power_pstate(g: GpuFacts) -> bool:
    p = (g.performance_state or "").strip().upper()
    return p[:1] == "P" and p[1:].isdigit() and int(p[1:]) >= threshold("link_idle_pstate_min")


def _link(g: GpuFacts) -> Finding | None:
    gen, gmax, w, wmax = g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max
    gen_low = gen is not None and gmax is not None and gen < gmax
    width_low = w is not None and wmax is not None and w < wmax
    # a lower generation (width intact) in a low-power P-state is the driver's power saving, whatever a
    # desktop's momentary utilisation sample says
    is_busy = busy(g) and not (gen_low and not width_low and _low_power_pstate(g))
    link = (
        f"pcie.link.gen.current = {gen if gen is not None else '?'} (max "
        f"{gmax if gmax is not None else '?'}), "
        f"pcie.link.width.current = x{w if w is not None else '?'} (max x{wmax if wmax is not None else '?'})"
    )
    ev = [link, load_line(g)]
    src = "nvml" if "nvml" not in g.unreadable else "pci"
    if not gen_low and not width_low:
        gpu_max = g.pcie_gen_gpu_max
        if gpu_max is not None and gmax is not None and gpu_max > gmax:
            return finding(
                "pcie.link_degraded",
                when="power_saving",
                title=f"GPU {g.index} supports PCIe Gen{gpu_max} but the slot/platform only Gen{gmax}",
                evidence=[link, f"GPU max generation = {gpu_max}"],
                gpu=ref(g),
                source=src,
                data={"reason": "platform_limited", "gen_max": gmax, "gpu_gen_max": gpu_max},
            )
        return None
    cur_bw, max_bw = _bw(gen, w), _bw(gmax, wmax)
    frac = (cur_bw / max_bw) if cur_bw and max_bw else None
    if frac is not None:
        ev.append(f"link bandwidth ≈ {frac:.0%} of what GPU and slot support")
    what = " and ".join(
        x
        for x in (
            f"Gen{gen} instead of Gen{gmax}" if gen_low else "",
            f"x{w} instead of x{wmax}" if width_low else "",
        )
        if x
    )
    data = {
        "gen": gen,
        "gen_max": gmax,
        "width": w,
        "width_max": wmax,
        "busy": is_busy,
        "bandwidth_fraction": frac,
    }
    if is_busy:
        starved = frac is not None and frac <= threshold("pcie_bandwidth_critical_fraction")
        sev = severity("pcie.link_degraded", "starved") if starved else severity("pcie.link_degraded")
        if starved:
            ev.append(
                f"critical at <= {threshold('pcie_bandwidth_critical_fraction'):.0%} ({THRESHOLDS_SOURCE})"
            )
        return Finding(
            code="pcie.link_degraded",
            severity=sev,
            family=Family.PCIE_POWER,
            title=f"GPU {g.index} PCIe link runs at {what} while busy",
            evidence=ev,
            gpu=ref(g),
            source=src,
            data=data,
        )
    if width_low and _board_wired(g):
        ev.append(f"{g.name} is a notebook GPU: its board wires fewer lanes than the chip's x{wmax} "
                  f"({THRESHOLDS_SOURCE} pcie_board_wired_name_markers)")
        return Finding(
            code="pcie.link_degraded",
            severity=severity("pcie.link_degraded", "power_saving"),
            family=Family.PCIE_POWER,
            title=f"GPU {g.index} (notebook GPU) PCIe link is {what}: the laptop board's wiring",
            evidence=ev,
            gpu=ref(g),
            source=src,
            data={**data, "reason": "board_wired"},
        )
    if width_low:
        ev.append(
            "idle power saving lowers link speed, not width: a narrow link at idle usually trained narrow"
        )
        return finding(
            "pcie.link_degraded",
            title=f"GPU {g.index} PCIe link is {what} (at idle; width loss is not explained by power saving)",
            evidence=ev,
            gpu=ref(g),
            source=src,
            data=data,
        )
    ev.append("idle GPUs lower the link generation to save power; this is expected at idle")
    return finding(
        "pcie.link_degraded",
        when="idle",
        title=f"GPU {g.index} PCIe link at {what} while idle (power saving)",
        evidence=ev,
        gpu=ref(g),
        source=src,
        data={**data, "reason": "idle_gen"},
    )


@check("pcie.replay", codes=["pcie.replay"], what="PCIe replay counters")
def replay(snap: Snapshot) -> Iterable[Finding]:
    out = []
    warn = threshold("pcie_replay_warn")
    for g in snap.gpus:
        n = g.pcie_replay_count
        if g.lost or n is None or n < warn:
            continue
        ev = [f"pcie.replay_counter = {n} since the driver loaded (a lifetime count; {THRESHOLDS_SOURCE})"]
        gen, w = g.pcie_gen_max or g.pcie_gen, g.pcie_width_max or g.pcie_width
        budget = math.ceil(REPLAY_PER_LANE_PER_MIN[gen] * w) if gen in REPLAY_PER_LANE_PER_MIN and w else None
        if budget is not None:
            ev.append(f"DCGM budget for a Gen{gen} x{w} link: {budget} replays per minute (BER 1e-12)")
        rate = g.pcie_replay_rate_per_min
        # A lifetime counter alone cannot say the link is bad now (a week of uptime collects replays): it is
        # a warning only when two samples give a rate above the budget.
        over = rate is not None and rate > (budget if budget is not None else 0)
        if rate is not None:
            ev.append(f"measured rate: {rate:.1f} replays per minute")
        else:
            ev.append(
                "no rate: sample the counter twice (`nvidia-smi -q -d PCIE` a minute apart, or `gpuclinic "
                "watch`)"
            )
        out.append(
            finding(
                "pcie.replay",
                when=None if over else "lifetime_count",
                title=f"GPU {g.index} PCIe link is retransmitting ({n} replays)",
                evidence=ev,
                gpu=ref(g),
                source="nvml",
                data={"replays": n, "rate_per_min": rate},
            )
        )
    return out


def _aer_total(counters: dict[str, int], total_key: str) -> int:
    if total_key in counters:
        return counters[total_key]
    return sum(v for k, v in counters.items() if not k.startswith("TOTAL_"))


def _aer_detail(counters: dict[str, int]) -> str:
    parts = [f"{k} {v}" for k, v in counters.items() if v and not k.startswith("TOTAL_")]
    return f" ({', '.join(parts)})" if parts else ""


@check(
    "pcie.aer_counters",
    codes=["pcie.aer_corrected", "pcie.aer_uncorrected"],
    what="PCIe AER counters (sysfs)",
)
def aer_counters(snap: Snapshot) -> Iterable[Finding]:
    """AER counters in sysfs (since boot): readable in containers where the kernel log is not.

    Devices the kernel log already reported AER lines for are left to the kernel-log check, so one
    link's errors are not reported twice.
    """
    if not snap.pci_read:
        return []
    by_bus = {d.bus_id: d for d in snap.pci_devices}
    logged: set[str] = set()
    for e in snap.kernel_events:
        if e.kind == "aer":
            for x in (e.pci_bus_id, e.detail.get("device"), e.detail.get("reporter")):
                if x:
                    logged.add(normalize_bus_id(str(x)))
    warn_cor = threshold("aer_corrected_warn")
    out: list[Finding] = []
    for gpu_dev in (d for d in snap.pci_devices if d.is_gpu):
        parent = by_bus.get(gpu_dev.parent_bus_id) if gpu_dev.parent_bus_id else None
        for dev, where in ((gpu_dev, ""), (parent, " (on the PCIe bridge/switch port above it)")):
            if dev is None or dev.bus_id in logged:
                continue
            fatal = _aer_total(dev.aer_fatal, "TOTAL_ERR_FATAL")
            nonfatal = _aer_total(dev.aer_nonfatal, "TOTAL_ERR_NONFATAL")
            corr = _aer_total(dev.aer_corrected, "TOTAL_ERR_COR")
            gref = GpuRef(pci_bus_id=gpu_dev.bus_id)
            label = f"GPU {gpu_dev.bus_id}"
            data = {
                "device": dev.bus_id,
                "gpu_bus_id": gpu_dev.bus_id,
                "where": "bridge_above_gpu" if where else "gpu",
                "fatal": fatal,
                "nonfatal": nonfatal,
                "corrected": corr,
            }
            if fatal or nonfatal:
                ev = [
                    f"sysfs {dev.bus_id}/aer_dev_fatal: TOTAL_ERR_FATAL = "
                    f"{fatal}{_aer_detail(dev.aer_fatal)}",
                    f"sysfs {dev.bus_id}/aer_dev_nonfatal: TOTAL_ERR_NONFATAL = "
                    f"{nonfatal}{_aer_detail(dev.aer_nonfatal)}",
                    "counters count since boot",
                ]
                out.append(
                    finding(
                        "pcie.aer_uncorrected",
                        when=None if fatal else "non_fatal",
                        gpu=gref,
                        source="pci",
                        data=data,
                        evidence=ev,
                        title=f"{label}: PCIe uncorrected ({'fatal' if fatal else 'non-fatal'}) errors "
                        f"counted{where}",
                    )
                )
            if corr >= warn_cor:
                out.append(
                    finding(
                        "pcie.aer_corrected",
                        gpu=gref,
                        source="pci",
                        data=data,
                        title=f"{label}: {corr} PCIe corrected errors counted since boot{where}",
                        evidence=[
                            f"sysfs {dev.bus_id}/aer_dev_correctable: TOTAL_ERR_COR = "
                            f"{corr}{_aer_detail(dev.aer_corrected)}",
                            f"warn at {warn_cor:.0f} ({THRESHOLDS_SOURCE})",
                        ],
                    )
                )
    return out


# --------------------------------------------------------------------------------------------------
# pcie.aer_corrected / pcie.aer_uncorrected
# --------------------------------------------------------------------------------------------------


def _aer_target(snap: Snapshot, e: KernelEvent) -> tuple[str | None, str]:
    """(GPU bus id or device bus id, where) for an AER event: on the GPU, on the bridge above it, or other."""
    dev = e.detail.get("device") or e.pci_bus_id
    dev = str(dev) if dev else None
    if dev and snap.gpu_by_bus_id(dev) is not None:
        return dev, "gpu"
    if dev:
        for d in snap.pci_devices:
            if d.parent_bus_id and normalize_bus_id(d.parent_bus_id) == dev and d.is_gpu:
                return normalize_bus_id(d.bus_id), "bridge_above_gpu"
        for d in snap.pci_devices:
            if normalize_bus_id(d.bus_id) == dev and d.is_gpu:
                return dev, "gpu"
    if e.detail.get("nvidia"):
        return dev, "gpu"
    # the kernel's recovery lines named the devices below the reporting port: a GPU among them
    below = [str(b) for b in (e.detail.get("downstream") or [])]
    for b in below:
        if snap.gpu_by_bus_id(b) is not None:
            return b, "bridge_above_gpu"
    nv = [str(b) for b in (e.detail.get("downstream_nvidia") or [])]
    if nv:
        return nv[0], "bridge_above_gpu"
    return dev, "other"


def aer_level(e: KernelEvent) -> str | None:
    """An AER kernel event's class as the parser read it: "corrected", "fatal" or "nonfatal" (an
    uncorrected error of unknown severity counts as non-fatal); None for a recovery report.  The one reading
    of an AER line, for doctor's rule here and watch's live conditions (watch/kernel.py)."""
    level = str(e.detail.get("severity") or "unknown")
    if level == "recovery":
        return None
    return level if level in ("corrected", "fatal") else "nonfatal"


@check(
    "kernel.aer", codes=["pcie.aer_corrected", "pcie.aer_uncorrected"], what="PCIe AER errors (kernel log)"
)
def aer_errors(snap: Snapshot) -> list[Finding]:
    evs = [e for e in snap.kernel_events if e.kind == "aer" and aer_level(e) is not None]
    if not evs:
        return []
    uuids = _uuid_map(snap)
    recov = [e for e in snap.kernel_events if e.kind == "aer" and e.detail.get("severity") == "recovery"]
    topology_known = bool(snap.pci_devices) or bool(snap.gpus)
    groups: dict[tuple[str | None, str, str], list[KernelEvent]] = {}
    for e in evs:
        target, where = _aer_target(snap, e)
        cls = "corrected" if aer_level(e) == "corrected" else "uncorrected"
        groups.setdefault((target, where, cls), []).append(e)
    out: list[Finding] = []
    for (target, where, cls), group in groups.items():
        if where == "other" and cls == "corrected" and topology_known:
            continue  # corrected errors on a NIC/NVMe path are not a GPU problem
        data = _base_data(group)
        count = len(group)
        data["where"] = where
        data["devices"] = sorted({str(d) for e in group if (d := e.detail.get("device"))})
        data["reporters"] = sorted({str(r) for e in group if (r := e.detail.get("reporter"))})
        data["types"] = dict(Counter(str(e.detail.get("type")) for e in group if e.detail.get("type")))
        bits = Counter(b for e in group for b in (e.detail.get("bits") or []))
        if bits:
            data["error_bits"] = dict(bits)
        multiple = sum(1 for e in group if e.detail.get("multiple"))
        if multiple:
            data["multiple_error_reports"] = multiple
        span = _span_s(group)
        rate_h = (count / (span / 3600.0)) if span and span > 0 else None
        data["span_s"] = span
        data["rate_per_hour"] = round(rate_h, 2) if rate_h is not None else None
        ref = gpu_ref(snap, target, uuids) if where != "other" else None
        label = ref.label() if ref else f"PCIe device {target or '?'}"
        place = {"gpu": "", "bridge_above_gpu": " (on the PCIe bridge/switch port above it)", "other": ""}[
            where
        ]
        rate_txt = (
            f"{count} in {span / 3600:.1f} h ({rate_h:.1f}/h)"
            if rate_h is not None and span
            else f"{count} logged"
        )
        lines = [ln for e in group[:2] for ln in (e.detail.get("lines") or [])][:3]
        if cls == "corrected":
            frequent = count >= AER_FREQUENT_COUNT or (
                rate_h is not None and count >= threshold("aer_corrected_rate_min_count")
                and rate_h >= AER_FREQUENT_PER_HOUR
            )
            sev = severity("pcie.aer_corrected") if frequent else severity("pcie.aer_corrected", "few")
            data["frequent"] = frequent
            title = f"{label}: PCIe corrected errors (AER){place}: {rate_txt}"
            code = "pcie.aer_corrected"
        else:
            fatal = any(aer_level(e) == "fatal" for e in group)
            sev = severity("pcie.aer_uncorrected") if fatal else severity("pcie.aer_uncorrected", "non_fatal")
            data["fatal"] = fatal
            near = {str(d) for e in group for d in (e.detail.get("device"), e.detail.get("reporter")) if d}
            failed = [e for e in recov if e.detail.get("recovery") == "failed" and e.pci_bus_id in near]
            if failed:
                sev = severity("pcie.aer_uncorrected")
                data["recovery_failed"] = True
                lines.append(failed[0].line)
            kind = "fatal" if fatal else "non-fatal"
            title = f"{label}: PCIe uncorrected ({kind}) errors (AER){place}: {rate_txt}"
            code = "pcie.aer_uncorrected"
        out.append(kernel_finding(code, sev, Family.PCIE_POWER, title, group, ref, data, lines))
    return out


# --------------------------------------------------------------------------------------------------
# pcie.bandwidth_limited (kernel boot message)
# --------------------------------------------------------------------------------------------------


@check(
    "kernel.pcie_limited", codes=["pcie.bandwidth_limited"], what="PCIe bandwidth limits at boot (kernel log)"
)
def bandwidth_limited(snap: Snapshot) -> list[Finding]:
    evs = [e for e in snap.kernel_events if e.kind == "pcie_limited"]
    if not evs:
        return []
    uuids = _uuid_map(snap)
    nvidia_pci = {normalize_bus_id(d.bus_id) for d in snap.pci_devices if d.is_gpu}
    latest: dict[str, KernelEvent] = {}
    others: dict[str, KernelEvent] = {}
    for e in evs:
        if not e.pci_bus_id:
            continue
        is_gpu = (
            snap.gpu_by_bus_id(e.pci_bus_id) is not None
            or e.pci_bus_id in nvidia_pci
            or bool(e.detail.get("nvidia"))
        )
        (latest if is_gpu else others)[e.pci_bus_id] = e
    out: list[Finding] = [f for bus, e in others.items() if (f := _device_limited(bus, e)) is not None]
    for bus, e in latest.items():
        d = e.detail
        width, cap_w = int(d.get("width", 0)), int(d.get("capable_width", 0))
        narrow = width and cap_w and width < cap_w
        sev = (
            severity("pcie.bandwidth_limited") if narrow else severity("pcie.bandwidth_limited", "not_narrow")
        )
        ref = gpu_ref(snap, bus, uuids)
        label = ref.label() if ref else f"GPU {bus}"
        title = (
            f"{label}: kernel reports {d.get('available_gbps')} Gb/s available PCIe bandwidth, limited by "
            f"a {d.get('speed_gts')} GT/s x{width} link at {d.get('limited_at')} (capable of "
            f"{d.get('capable_gbps')} Gb/s at {d.get('capable_speed_gts')} GT/s x{cap_w})"
        )
        out.append(
            Finding(
                code="pcie.bandwidth_limited",
                severity=sev,
                family=Family.PCIE_POWER,
                title=title,
                evidence=[e.line],
                gpu=ref,
                data={**d, "narrow": bool(narrow)},
                source=SOURCE,
            )
        )
    return out


def _device_limited(bus: str, e: KernelEvent) -> Finding | None:
    """A non-GPU device (a NIC such as mlx5_core, an NVMe drive) whose link trained narrower than it can
    (``pcie_device_width_min_fraction``): its bandwidth is cut for good, unlike a GPU's idle speed drop.
    A speed-only limit is left alone: a slower slot is how the platform was built."""
    d = e.detail
    width, cap_w = int(d.get("width", 0)), int(d.get("capable_width", 0))
    floor = threshold("pcie_device_width_min_fraction")
    if not (width and cap_w and width < cap_w * floor):
        return None
    drv = d.get("driver")
    name = f"{drv} {bus}" if drv and drv not in ("pci", "pcieport") else f"PCI device {bus}"
    return finding(
        "pcie.bandwidth_limited",
        title=(
            f"{name}: PCIe link trained at x{width} of x{cap_w}: {d.get('available_gbps')} Gb/s available "
            f"of {d.get('capable_gbps')} Gb/s (limited at {d.get('limited_at')})"
        ),
        evidence=[e.line, f"link width x{width} under x{cap_w * floor:g} (pcie_device_width_min_fraction = "
                                  f"{floor:g} of the capable x{cap_w}; {THRESHOLDS_SOURCE})"],
        data={**d, "narrow": True, "device": name},
        source=SOURCE,
    )

