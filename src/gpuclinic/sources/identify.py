"""Which GPU is index N (or bus B) on this machine: its index, bus id and UUID.

``gpuclinic runbook CODE --gpu N`` prints commands to paste (``lspci -s {bus}``, an RMA naming the UUID);
a placeholder left in them sends the reader off to look it up by hand.  NVML answers first (no process,
each call time-boxed); ``nvidia-smi --query-gpu`` second; when neither answers the caller says how to
find the value instead.  Nothing here changes GPU state.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.model import GpuRef

CALL_TIMEOUT_S = 2.0  # per NVML call: a hung GPU must not hang the runbook
SMI_TIMEOUT_S = 10.0
SMI_QUERY = ["--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader"]

Runner = Callable[[list[str], float], "subprocess.CompletedProcess[bytes]"]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)


def identify(index: int | None = None, bus: str | None = None) -> tuple[GpuRef, str] | None:
    """The GPU with this index (or, without one, at this bus id) and where that came from (``NVML`` or
    ``nvidia-smi``); None when neither can tell."""
    if index is None and bus is None:
        return None
    want = normalize_bus_id(bus) if bus else None
    for where, read in (("NVML", _from_nvml), ("nvidia-smi", _from_smi)):
        refs = read(index)
        if refs is None:
            continue  # this source cannot answer here: ask the next
        for r in refs:
            if (index is None or r.index == index) and (want is None or r.pci_bus_id == want):
                return r, where
        return None  # the source listed the GPUs and this one is not among them
    return None


def _from_nvml(index: int | None) -> list[GpuRef] | None:
    from gpuclinic.sources.nvml import NvmlReader, NvmlUnavailable

    reader = NvmlReader(call_timeout_s=CALL_TIMEOUT_S, parallel=False)
    try:
        reader.open()
        n = reader.device_count()
        which = range(n) if index is None else [index] if index < n else []
        return [_ref(reader.identity(i)) for i in which]
    except NvmlUnavailable:
        return None
    finally:
        reader.close()


def _ref(g: GpuFacts) -> GpuRef:
    return GpuRef(index=g.index, pci_bus_id=g.pci_bus_id, uuid=g.uuid)


def _from_smi(index: int | None) -> list[GpuRef] | None:
    exe = shutil.which("nvidia-smi") or "nvidia-smi"
    try:
        cp = _run([exe, *SMI_QUERY], SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    if cp.returncode != 0:
        return None
    out = []
    for line in cp.stdout.decode("utf-8", "replace").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        out.append(
            GpuRef(
                index=int(parts[0]),
                pci_bus_id=normalize_bus_id(parts[1]) if ":" in parts[1] else None,
                uuid=parts[2] if parts[2].startswith(("GPU-", "MIG-")) else None,
            )
        )
    return out
