"""What is new since a baseline: NVML counters that rose, findings that appeared.

Why one module: ``watch`` (``watch/rules.py``, a counter that rose since the last tick) and ``run``
(``supervise/gpuwatch.py``, a fault that appeared on the job's GPU since the previous sample) ask the same
question of the same samples.  The counters, the code each one's rise belongs to and the way a finding is
told apart from another (also what ``Detector.observe`` folds a window by) live here once; what the state
*means* (severity, title, runbook) stays with the code's detector and ``knowledge/data/codes.json``.  Not a
check module (the name starts with ``_``); it imports only facts and the model, so both commands (and
``checks/__init__.py``) import it without cycles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.model import Finding, GpuRef


def _ecc_uncorr(g: GpuFacts) -> int | None:
    v = g.ecc_volatile_uncorrected
    return v if v is not None else g.ecc_aggregate_uncorrected


def _ecc_corr(g: GpuFacts) -> int | None:
    v = g.ecc_volatile_corrected
    return v if v is not None else g.ecc_aggregate_corrected


class Counter(NamedTuple):
    """An NVML counter that only grows while the driver is loaded; a rise is an event of ``code``."""

    name: str
    code: str
    title: str
    read: Callable[[GpuFacts], int | None]


COUNTERS: tuple[Counter, ...] = (
    Counter("ecc_uncorr", "memory.ecc_uncorrectable", "uncorrectable ECC errors", _ecc_uncorr),
    Counter("ecc_corr", "memory.ecc_correctable_rate", "correctable ECC errors rising", _ecc_corr),
    Counter("remap_uncorr", "memory.row_remap_uncorrectable", "rows remapped after uncorrectable errors",
            lambda g: g.remapped_rows_uncorrectable),
    Counter("pcie_replay", "pcie.replay", "PCIe replays rising", lambda g: g.pcie_replay_count),
)


class Rise(NamedTuple):
    counter: Counter
    before: int
    after: int

    @property
    def evidence(self) -> str:
        return f"{self.counter.name.replace('_', ' ')} {self.before} -> {self.after}"


def rises(prev: dict[str, int], g: GpuFacts) -> list[Rise]:
    """The counters of ``g`` that rose since ``prev`` (the GPU's last readings), and move ``prev`` forward
    to this sample.  A counter the sample lacks keeps its old reading; a first reading is no rise."""
    out = []
    for c in COUNTERS:
        v = c.read(g)
        if v is None:
            continue
        before = prev.get(c.name)
        prev[c.name] = int(v)
        if before is not None and v > before:
            out.append(Rise(c, before, int(v)))
    return out


def gpu_key(ref: GpuRef | GpuFacts) -> str:
    """A GPU's identity across samples: UUID, else normalised bus id, else index."""
    if ref.uuid:
        return ref.uuid
    if ref.pci_bus_id:
        return normalize_bus_id(ref.pci_bus_id)
    return f"#{ref.index}"


FindingKey = tuple[str, str | None, object]


def finding_key(f: Finding, gpu: str | None = None) -> FindingKey:
    """What makes a finding the same fault in two samples: its code, its GPU (``gpu`` overrides the
    finding's own, for a node finding attributed to a GPU) and its sensor (a GPU's and its HBM's
    temperature are two)."""
    who = gpu if gpu is not None else (gpu_key(f.gpu) if f.gpu is not None else None)
    return (f.code, who, f.data.get("sensor"))


def appeared(before: Iterable[FindingKey], now: Iterable[FindingKey]) -> list[FindingKey]:
    """The finding keys of ``now`` that the baseline ``before`` did not have, in ``now``'s order."""
    old = set(before)
    return [k for k in now if k not in old]
