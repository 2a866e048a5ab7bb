"""The snapshot: every fact the sources read about one machine at one moment.

Checks are pure functions of a snapshot, so the same checks run on a live server, on saved evidence
(``doctor --from``), on a capture from another machine, and on simulated scenarios.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gpuclinic.model import Skipped
from gpuclinic.record import field, record

if TYPE_CHECKING:  # imported by _resolve_fact_types when a snapshot is decoded (see there)
    from gpuclinic.facts.evidence import InputRecord, Signal
    from gpuclinic.facts.gpu import GpuFacts, PciDevice
    from gpuclinic.facts.host import HostFacts
    from gpuclinic.facts.kernel import KernelEvent
    from gpuclinic.facts.network import NetworkFacts
    from gpuclinic.facts.room import RoomFacts
    from gpuclinic.facts.software import ContainerFacts, SoftwareFacts

SNAPSHOT_SCHEMA = "gpuclinic.snapshot/1"


@record
class Snapshot:
    """All facts about one machine at one moment; the only input of the checks."""

    origin: str = "live"  # live | evidence | scenario | capture
    taken_at: str | None = None  # ISO 8601
    hostname: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: str | None = None  # "12.4"
    nvml_available: bool | None = None  # None: not attempted (e.g. from evidence without smi dumps)
    gpus: list[GpuFacts] = field(default_factory=list)
    attached_gpus: int | None = None  # evidence: "Attached GPUs : N" (a paste may show fewer GPU blocks)
    pci_devices: list[PciDevice] = field(default_factory=list)
    pci_read: bool = False  # True when the PCI bus was enumerated (so "absent from PCI" means something)
    kernel_events: list[KernelEvent] = field(default_factory=list)
    kernel_log_read: bool = False  # True when at least one kernel log was scanned
    kernel_log_sources: list[str] = field(default_factory=list)
    software: SoftwareFacts | None = None
    container: ContainerFacts | None = None
    host: HostFacts | None = None
    network: NetworkFacts | None = None
    room: RoomFacts | None = None  # BMC/hwmon: inlet air, fans, PSUs, SEL (sources/bmc)
    expect_gpus: int | None = None
    skipped: list[Skipped] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # files or sources it was built from
    input_records: list[InputRecord] = field(default_factory=list)  # evidence: how each input was read
    signals: list[Signal] = field(default_factory=list)  # evidence: known fault signatures seen in it
    notes: list[str] = field(default_factory=list)

    def skip(self, what: str, why: str) -> None:
        """Record that ``what`` could not be checked, once."""
        s = Skipped(what, why)
        if s not in self.skipped:
            self.skipped.append(s)

    def gpu_by_bus_id(self, bus_id: str | None) -> GpuFacts | None:
        if not bus_id:
            return None
        key = normalize_bus_id(bus_id)
        for g in self.gpus:
            if g.pci_bus_id and normalize_bus_id(g.pci_bus_id) == key:
                return g
        return None

    def to_dict(self) -> dict[str, Any]:
        from gpuclinic.facts.serial import to_jsonable

        d = to_jsonable(self)
        assert isinstance(d, dict)
        d["schema"] = SNAPSHOT_SCHEMA
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Snapshot:
        from gpuclinic.facts.serial import from_jsonable

        _resolve_fact_types()
        snap = from_jsonable(cls, {k: v for k, v in d.items() if k != "schema"})
        assert isinstance(snap, Snapshot)
        return snap

    def to_json(self) -> str:
        import json

        return json.dumps(self.to_dict(), indent=1, sort_keys=False)


def _resolve_fact_types() -> None:
    """Bind the field types named in Snapshot's annotations, for the type-hint driven decoder.

    Not imported at module level: a snapshot holds network, room or evidence facts only when those
    sources ran, and each fact module costs start-up (its dataclasses) in every command that makes
    a snapshot.  Decoding (``from_dict``) needs them all resolved.
    """
    import importlib

    g = globals()
    for mod, names in _FACT_TYPES.items():
        m = importlib.import_module(f"gpuclinic.facts.{mod}")
        for name in names.split():
            g.setdefault(name, getattr(m, name))


# the names under TYPE_CHECKING above, by module
_FACT_TYPES = {
    "evidence": "InputRecord Signal",
    "gpu": "GpuFacts PciDevice",
    "host": "HostFacts",
    "kernel": "KernelEvent",
    "network": "NetworkFacts",
    "room": "RoomFacts",
    "software": "ContainerFacts SoftwareFacts",
}


@lru_cache(maxsize=4096)
def normalize_bus_id(bus_id: str) -> str:
    """Normalise PCI addresses from every format seen to ``dddd:bb:dd.f`` (lower case).

    NVML gives ``00000000:3B:00.0``, kernel Xid lines ``0000:3b:00`` (no function), nvidia-smi
    ``00000000:3B:00.0``, sysfs ``0000:3b:00.0``.  Memoised: grouping a log's findings into incidents
    compares the same few addresses thousands of times.
    """
    s = bus_id.strip().lower()
    if s.startswith("pci:"):
        s = s[4:]
    parts = s.split(":")
    if len(parts) == 2:  # "bb:dd.f"
        parts = ["0000", *parts]
    if len(parts) != 3:
        return s
    dom, bus, devfn = parts
    dom = dom[-4:].rjust(4, "0")
    if "." not in devfn:
        devfn = devfn + ".0"
    dev, fn = devfn.split(".", 1)
    return f"{dom}:{bus.rjust(2, '0')}:{dev.rjust(2, '0')}.{fn or '0'}"
