"""Merging what several evidence readers found into one snapshot.

GPUs are matched by UUID, then PCI bus id (a paste that names no GPU joins the only GPU of a one-GPU dump);
nvlink output joins by UUID or nvidia-smi index; lspci link facts fill what nvidia-smi did not give;
a captured snapshot folds in without doubling.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable

from gpuclinic.facts.gpu import GpuFacts, PciDevice
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.facts.software import SoftwareFacts
from gpuclinic.record import fields_of
from gpuclinic.sources.smi_common import SmiDump, iso_time

NVML_FAILURE_MARKERS = ("failed to initialize nvml", "couldn't communicate with the nvidia driver",
                        "no devices were found", "version mismatch", "unable to find nvidia driver",
                        "nvidia driver is not loaded")


class _Unrecognised(ValueError):
    """An input that is readable but is none of the formats we know."""


def _replay_sample(snap: Snapshot, g: GpuFacts) -> tuple[int, str] | None:
    """The replay counter already known for the GPU ``g`` is, and when it was read (the first dump's time)."""
    if g.pcie_replay_count is None or not snap.taken_at or not (g.uuid or g.pci_bus_id):
        return None
    same = next((x for x in snap.gpus if g.uuid and x.uuid and x.uuid.lower() == g.uuid.lower()), None) or \
        (snap.gpu_by_bus_id(g.pci_bus_id) if g.pci_bus_id else None)
    if same is None or same.pcie_replay_count is None:
        return None
    return same.pcie_replay_count, snap.taken_at


def _replay_rate(g: GpuFacts, before: tuple[int, str] | None, count: int | None, taken: str | None) -> None:
    """Two samples of the lifetime replay counter (two dumps of one GPU, minutes apart) give a rate."""
    if before is None or count is None or not taken:
        return
    try:
        minutes = (
            _dt.datetime.fromisoformat(taken) - _dt.datetime.fromisoformat(before[1])
        ).total_seconds() / 60
    except ValueError:
        return
    if minutes <= 0 or count < before[0]:
        return  # same moment, or the counter reset (driver reload) in between
    g.pcie_replay_rate_per_min = (count - before[0]) / minutes
    g.pcie_replay_count = count


def merge_gpu(snap: Snapshot, g: GpuFacts, *, alone: bool = True) -> GpuFacts:
    """Merge ``g`` into the snapshot's GPU with the same UUID or bus id, or add it.

    ``alone``: ``g`` is the only GPU of its output, so a nameless one may be the snapshot's only GPU; two
    nameless GPUs listed side by side (``gpuId 0``, ``gpuId 1``) are two cards."""
    match: GpuFacts | None = None
    if g.uuid:
        match = next((x for x in snap.gpus if x.uuid and x.uuid.lower() == g.uuid.lower()), None)
    if match is None and g.pci_bus_id:
        match = snap.gpu_by_bus_id(g.pci_bus_id)
    if match is None and alone and len(snap.gpus) == 1:
        # a section paste names no GPU: with exactly one GPU on each side they are the same card
        only = snap.gpus[0]
        if (not g.uuid and not g.pci_bus_id) or (not only.uuid and not only.pci_bus_id):
            match = only
    if match is None:
        if any(x.index == g.index for x in snap.gpus):
            g.index = max(x.index for x in snap.gpus) + 1
        snap.gpus.append(g)
        snap.gpus.sort(key=lambda x: x.index)
        return g
    for name in _field_names(GpuFacts):
        if name == "index":
            continue
        old, new = getattr(match, name), getattr(g, name)
        if name == "lost":
            match.lost = old or new
        elif name == "unreadable":
            for k, v in new.items():
                old.setdefault(k, v)
        elif name == "violation_ns":
            for k, v in new.items():
                old.setdefault(k, v)
        elif old in (None, [], {}) and new not in (None, [], {}):
            setattr(match, name, new)
    return match


def _field_names(cls: type) -> list[str]:
    """The field names of a fact class, in order: a ``@record``'s own list (no dataclass made), else
    ``dataclasses.fields``."""
    known = fields_of(cls)
    if known is not None:
        return [f[0] for f in known]
    import dataclasses

    return [f.name for f in dataclasses.fields(cls)]


def apply_dump(snap: Snapshot, dump: SmiDump, origin: str) -> None:
    """Add what one nvidia-smi output says to the snapshot."""
    sw = snap.software or SoftwareFacts()
    snap.software = sw
    if dump.driver_version:
        snap.driver_version = snap.driver_version or dump.driver_version
        sw.driver_version = sw.driver_version or dump.driver_version
    if dump.cuda_version:
        snap.cuda_driver_version = snap.cuda_driver_version or dump.cuda_version
    if dump.timestamp and not snap.taken_at:
        snap.taken_at = iso_time(dump.timestamp)
        if snap.taken_at is None:
            snap.notes.append(f"{origin}: nvidia-smi time stamp not understood: {dump.timestamp[:60]}")
    for e in dump.errors:
        if e not in sw.nvidia_smi_errors:
            sw.nvidia_smi_errors.append(e)
    taken = iso_time(dump.timestamp) if dump.timestamp else None
    for g in dump.gpus:
        before = _replay_sample(snap, g)
        merged = merge_gpu(snap, g, alone=len(dump.gpus) == 1)
        _replay_rate(merged, before, g.pcie_replay_count, taken)
    snap.notes.extend(f"{origin}: {n}" for n in dump.notes)
    if dump.partial:
        from gpuclinic.sources.bmc.salvage import note_partial

        for why in dump.partial:
            note_partial(snap, origin, why)
    nvml_failed = any(m in e.lower() for e in dump.errors for m in NVML_FAILURE_MARKERS)
    if dump.gpus:
        snap.nvml_available = True
    elif nvml_failed and snap.nvml_available is not True:
        snap.nvml_available = False
        snap.skip("GPUs through NVML", f"nvidia-smi in {origin}: {dump.errors[0]}")
    if dump.attached_gpus is not None:
        snap.attached_gpus = max(snap.attached_gpus or 0, dump.attached_gpus)
    if dump.attached_gpus is not None and dump.attached_gpus > len(dump.gpus):
        snap.notes.append(
            f"{origin}: nvidia-smi reported {dump.attached_gpus} attached GPUs but listed {len(dump.gpus)}"
        )


def _apply_nvlink(snap: Snapshot, dump: SmiDump, origin: str) -> None:
    """``nvidia-smi nvlink -s/-e``: links join the GPU with the same UUID, or the same nvidia-smi index.

    The output names GPUs by nvidia-smi index and UUID only (pastes often elide the UUID), so without a
    UUID the index is what ties it to a table or ``-q`` dump of the same node.
    """
    if not dump.gpus:
        raise _Unrecognised("nvidia-smi nvlink output lists no GPU")
    rest: list[GpuFacts] = []
    for g in dump.gpus:
        same = None
        if g.uuid:
            same = next((x for x in snap.gpus if x.uuid and x.uuid.lower() == g.uuid.lower()), None)
        else:
            same = next((x for x in snap.gpus if x.index == g.index), None)
        if same is None:
            rest.append(g)
            continue
        same.nvlink_all_inactive = same.nvlink_all_inactive or g.nvlink_all_inactive
        have = {link.link: link for link in same.nvlinks}
        for link in g.nvlinks:
            old = have.get(link.link)
            if old is None:
                same.nvlinks.append(link)
                continue
            for name in _field_names(type(link)):
                if getattr(old, name) is None:
                    setattr(old, name, getattr(link, name))
        same.nvlinks.sort(key=lambda x: x.link)
    dump.gpus = rest
    apply_dump(snap, dump, origin)
    snap.nvml_available = True


_GTS_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def link_facts_from_pci(snap: Snapshot) -> None:
    """Fill a GPU's PCIe generation/width from lspci's LnkSta/LnkCap when nvidia-smi did not give them."""
    for d in snap.pci_devices:
        g = snap.gpu_by_bus_id(d.bus_id)
        if g is None:
            continue
        if g.pcie_gen is None and d.current_link_speed_gts is not None:
            g.pcie_gen = _GTS_TO_GEN.get(d.current_link_speed_gts)
        if g.pcie_gen_max is None and d.max_link_speed_gts is not None:
            g.pcie_gen_max = _GTS_TO_GEN.get(d.max_link_speed_gts)
        if g.pcie_width is None:
            g.pcie_width = d.current_link_width
        if g.pcie_width_max is None:
            g.pcie_width_max = d.max_link_width


def _merge_pci(snap: Snapshot, devs: Iterable[PciDevice]) -> None:
    for d in devs:
        if not any(normalize_bus_id(x.bus_id) == d.bus_id for x in snap.pci_devices):
            snap.pci_devices.append(d)
        snap.pci_read = True


def _merge_snapshot(snap: Snapshot, other: Snapshot, origin: str) -> None:
    """Fold a captured snapshot (from a bundle or JSON) into the evidence snapshot."""
    for name in (
        "taken_at",
        "hostname",
        "driver_version",
        "nvml_version",
        "cuda_driver_version",
        "expect_gpus",
    ):
        if getattr(snap, name) is None and getattr(other, name) is not None:
            setattr(snap, name, getattr(other, name))
    if other.nvml_available is not None and snap.nvml_available is not True:
        snap.nvml_available = other.nvml_available
    for g in other.gpus:
        merge_gpu(snap, g)
    _merge_pci(snap, other.pci_devices)
    snap.pci_read = snap.pci_read or other.pci_read
    snap.kernel_events.extend(other.kernel_events)
    snap.kernel_log_read = snap.kernel_log_read or other.kernel_log_read
    snap.kernel_log_sources.extend(s for s in other.kernel_log_sources if s not in snap.kernel_log_sources)
    for part in ("software", "container", "host", "network"):
        if getattr(other, part) is not None:
            mine = getattr(snap, part)
            if mine is None or (part == "software" and mine == SoftwareFacts()):
                setattr(snap, part, getattr(other, part))
            elif part == "software":
                for e in other.software.nvidia_smi_errors if other.software else []:
                    if e not in mine.nvidia_smi_errors:
                        mine.nvidia_smi_errors.append(e)
    if other.room is not None:  # the server room (sources/bmc)
        if snap.room is None:
            snap.room = other.room
        else:
            snap.room.merge(other.room)
    for s in other.skipped:
        snap.skip(s.what, s.why)
    snap.notes.append(
        f"{origin}: captured snapshot ({other.origin}, taken {other.taken_at or 'at an unknown time'})"
    )
