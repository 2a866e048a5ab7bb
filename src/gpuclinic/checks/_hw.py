"""Helpers shared by the NVML/PCI hardware checks (not a check module: the name starts with _)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding, GpuRef

THRESHOLDS_FILE = "gpu_thresholds.json"
THRESHOLDS_SOURCE = "knowledge/data/gpu_thresholds.json"
HOST_THRESHOLDS_FILE = "host_thresholds.json"


def host_threshold(name: str) -> float:
    """A threshold of the host and container checks from ``host_thresholds.json`` (each with its source)."""
    return float(load_data(HOST_THRESHOLDS_FILE)[name]["value"])


@cache
def threshold(name: str) -> float:
    """A threshold value from ``gpu_thresholds.json`` (each entry carries its source)."""
    v = load_data(THRESHOLDS_FILE)[name]["value"]
    return float(v)


def ref(g: GpuFacts) -> GpuRef:
    return GpuRef(index=g.index, pci_bus_id=g.pci_bus_id, uuid=g.uuid)


def unreadable_finding(
    g: GpuFacts, code: str, says: str, error: str, title: str, **data: str
) -> Finding | None:
    """The finding of a state NVML reports only as the error of its reads (reset required, corrupted
    InfoROM, insufficient power): ``says`` in a failed read's message, ``error`` the NVML name of it;
    ``title`` may name the GPU as ``{index}``."""
    fields = sorted(k for k, v in g.unreadable.items() if says in v)
    if not fields:
        return None
    return finding(
        code,
        title=title.format(index=g.index),
        evidence=[f"{error} on: {', '.join(fields)}"],
        gpu=ref(g),
        data=dict(data),
        source="nvml",
    )


def unreadable_findings(
    snap: Snapshot, code: str, says: str, error: str, title: str
) -> list[Finding]:
    """:func:`unreadable_finding` for every GPU of the snapshot."""
    return [f for g in snap.gpus if (f := unreadable_finding(g, code, says, error, title))]


def readable(snap: Snapshot) -> list[GpuFacts]:
    """GPUs NVML could read (lost/unresponsive ones have no live numbers)."""
    return [g for g in snap.gpus if not g.lost]


def busy(g: GpuFacts) -> bool:
    util = g.utilization_gpu_pct
    if util is not None and util >= threshold("busy_util_pct"):
        return True
    return g.busy


def load_line(g: GpuFacts) -> str:
    """The evidence line that says how busy the GPU is (why idle explanations do or don't apply)."""
    parts = []
    if g.utilization_gpu_pct is not None:
        parts.append(f"utilization.gpu = {g.utilization_gpu_pct:.0f}%")
    if g.performance_state:
        parts.append(f"pstate = {g.performance_state}")
    if g.processes:
        parts.append(f"{len(g.processes)} process(es) on the GPU")
    return ", ".join(parts) or "load unknown"


def median(values: Iterable[float]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def kernel_lines(snap: Snapshot, bus_id: str | None, kinds: Iterable[str], limit: int = 3,
                 xids: Iterable[int] | None = None) -> list[str]:
    """Kernel-log lines about this GPU, as evidence (the log line itself); ``xids`` filters Xid events."""
    if not bus_id:
        return []
    key = normalize_bus_id(bus_id)
    want = set(kinds)
    only = set(xids) if xids is not None else None
    out = []
    for e in snap.kernel_events:
        if e.kind == "xid" and only is not None and e.xid not in only:
            continue
        line = f"kernel: {e.line.strip()}"
        if e.kind in want and e.pci_bus_id and normalize_bus_id(e.pci_bus_id) == key and line not in out:
            out.append(line)
            if len(out) >= limit:
                break
    return out


def fmt_w(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f} W"


def fmt_c(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f} °C"


def fmt_mhz(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f} MHz"


def fmt_pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f}%"
