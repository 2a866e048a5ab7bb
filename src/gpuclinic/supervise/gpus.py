"""Which GPUs a job uses, how to watch them, and how to hand it fewer.

``CUDA_VISIBLE_DEVICES`` may hold indices, full or prefix UUIDs (``GPU-8f3a...``) or MIG ids; we
resolve what we can to index/UUID/bus id through the GPU source so kernel XID lines (which name bus
ids) can be matched to the job, and we rewrite the variable with UUIDs when excluding a faulted GPU,
since indices shift when a GPU disappears (and CUDA's default FASTEST_FIRST order need not match
NVML's PCI order).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuclinic.errors import InputError
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.serial import from_jsonable
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.model import GpuRef


def parse_visible(value: str | None) -> list[str] | None:
    """Tokens of CUDA_VISIBLE_DEVICES; None when unset (all GPUs).  Like CUDA, stop at an empty token."""
    if value is None:
        return None
    out: list[str] = []
    for tok in value.split(","):
        tok = tok.strip()
        if not tok:
            break
        out.append(tok)
    return out


@dataclass
class JobGpu:
    token: str  # how the job's environment named it
    index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None

    def ref(self) -> GpuRef:
        return GpuRef(index=self.index, pci_bus_id=self.pci_bus_id, uuid=self.uuid)

    def label(self) -> str:
        return self.uuid or self.ref().label()


def resolve(tokens: list[str] | None, gpus: list[GpuFacts]) -> list[JobGpu]:
    """Map CUDA_VISIBLE_DEVICES tokens (None = all) to known GPUs; unknown tokens are kept as-is."""
    if tokens is None:
        return [JobGpu(token=g.uuid or str(g.index), index=g.index, uuid=g.uuid,
                       pci_bus_id=normalize_bus_id(g.pci_bus_id) if g.pci_bus_id else None) for g in gpus]
    out: list[JobGpu] = []
    for tok in tokens:
        g = _find(tok, gpus)
        if g is None:
            out.append(JobGpu(token=tok, uuid=tok if tok.upper().startswith(("GPU-", "MIG-")) else None,
                              index=int(tok) if tok.isdigit() else None))
        else:
            out.append(JobGpu(token=tok, index=g.index, uuid=g.uuid,
                              pci_bus_id=normalize_bus_id(g.pci_bus_id) if g.pci_bus_id else None))
    return out


def _find(tok: str, gpus: list[GpuFacts]) -> GpuFacts | None:
    if tok.isdigit():
        return next((g for g in gpus if g.index == int(tok)), None)
    low = tok.lower()
    if low.startswith("gpu-"):
        hits = [g for g in gpus if g.uuid and g.uuid.lower().startswith(low)]
        return hits[0] if len(hits) == 1 else None
    return None


def visible_value(gpus: list[JobGpu]) -> str:
    """CUDA_VISIBLE_DEVICES naming exactly these GPUs (UUIDs when known: stable across exclusions)."""
    return ",".join(g.uuid or g.token for g in gpus)


def exclude(gpus: list[JobGpu], bad: GpuRef) -> tuple[list[JobGpu], JobGpu | None]:
    """Drop the GPU matching ``bad`` (by UUID, bus id, then index); returns (remaining, removed)."""
    def same(g: JobGpu) -> bool:
        if bad.uuid and g.uuid:
            return bad.uuid == g.uuid
        if bad.pci_bus_id and g.pci_bus_id:
            return normalize_bus_id(bad.pci_bus_id) == g.pci_bus_id
        return bad.index is not None and g.index == bad.index

    removed = next((g for g in gpus if same(g)), None)
    if removed is None:
        return gpus, None
    return [g for g in gpus if g is not removed], removed


class GpuSource(Protocol):
    """Where GPU identities and 1 Hz-style samples come from (NVML, a simulation file, a scenario)."""

    name: str

    def identities(self) -> list[GpuFacts]: ...

    def sample(self) -> list[GpuFacts]: ...

    def close(self) -> None: ...


@dataclass
class NoGpus:
    why: str
    name: str = "none"

    def identities(self) -> list[GpuFacts]:
        return []

    def sample(self) -> list[GpuFacts]:
        return []

    def close(self) -> None:
        return None


class NvmlSource:
    """Live GPUs through the NVML source's reader (time-boxed calls)."""

    name = "nvml"

    def __init__(self) -> None:
        from gpuclinic.sources.nvml import NvmlReader

        self._reader: Any = NvmlReader()
        self._reader.__enter__()
        self._ids: list[GpuFacts] = []

    def identities(self) -> list[GpuFacts]:
        if not self._ids:
            gpus, *_ = self._reader.read_all()
            self._ids = list(gpus)
        return self._ids

    def sample(self) -> list[GpuFacts]:
        return list(self._reader.sample())

    def close(self) -> None:
        try:
            self._reader.__exit__(None, None, None)
        except Exception:
            pass


@dataclass
class FileSource:
    """Simulated GPUs from a JSON file, re-read on every sample so a test can change them mid-run.

    The file holds a list of GpuFacts objects, ``{"gpus": [...]}``, or a whole snapshot.
    """

    path: Path
    name: str = "file"
    _last: list[GpuFacts] = field(default_factory=list)

    def _read(self) -> list[GpuFacts]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return self._last  # mid-write: keep the previous view
        items = data if isinstance(data, list) else data.get("gpus", []) if isinstance(data, dict) else []
        gpus = [from_jsonable(GpuFacts, d) for d in items if isinstance(d, dict) and "index" in d]
        self._last = gpus
        return gpus

    def identities(self) -> list[GpuFacts]:
        return self._read()

    def sample(self) -> list[GpuFacts]:
        return self._read()

    def close(self) -> None:
        return None


@dataclass
class ScenarioSource:
    """GPUs of a simulated node from the doctor scenario backend."""

    scenario: str
    name: str = "scenario"

    def __post_init__(self) -> None:
        from gpuclinic.sources.scenarios import load_scenario

        snap = load_scenario(self.scenario)
        self._gpus = list(snap.gpus)
        self._events = list(snap.kernel_events)

    def identities(self) -> list[GpuFacts]:
        return self._gpus

    def kernel_events(self) -> list[KernelEvent]:
        """The scenario's kernel lines, delivered as if logged while the job ran (a simulated fault)."""
        return list(self._events)

    def sample(self) -> list[GpuFacts]:
        return self._gpus

    def close(self) -> None:
        return None


def open_source(gpu_facts: str | None = None, scenario: str | None = None) -> GpuSource:
    """The GPU source to use; never raises for a missing driver (returns :class:`NoGpus` with why)."""
    if gpu_facts:
        p = Path(gpu_facts)
        if not p.is_file():
            raise InputError(f"--gpu-facts: no such file: {gpu_facts}")
        return FileSource(p)
    if scenario:
        try:
            return ScenarioSource(scenario)
        except ImportError as e:
            raise InputError(f"scenarios are not available in this build ({e})") from e
        except KeyError as e:
            raise InputError(f"unknown scenario: {scenario}") from e
    if os.environ.get("GPUCLINIC_NO_NVML"):
        return NoGpus("NVML disabled by GPUCLINIC_NO_NVML")
    try:
        return NvmlSource()
    except ImportError as e:
        return NoGpus(f"NVML source not available ({e})")
    except Exception as e:
        return NoGpus(f"NVML unavailable: {type(e).__name__}: {e}")
