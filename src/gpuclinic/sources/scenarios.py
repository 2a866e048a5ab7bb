"""Simulated nodes: one scenario catalog for ``doctor``, ``watch`` and ``run``.

Two kinds of entries share one namespace: the fault states of ``knowledge/data/scenarios.json`` (a
healthy 8x H100 SXM base plus, per scenario, overrides for some GPUs, PCI devices, NVLinks and
kernel-log events, and the codes, verdict and root cause it must produce), and the timelines of
``watch/scenarios/*.json``.  Every name works in every command: ``watch`` plays a fault state as a
timeline (healthy, then the fault at ``timeline.fault_at``, recovering at ``timeline.recover_at`` when
the fault is transient) and ``doctor``/``run`` read a timeline's faulted state (its end).
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.facts.gpu import GpuFacts, GpuProcess, NvLinkFacts, PciDevice
from gpuclinic.facts.host import HostFacts
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import ContainerFacts, SoftwareFacts
from gpuclinic.knowledge import load_data
from gpuclinic.record import fields_of

_FILE = "scenarios.json"
T = TypeVar("T")


def _data() -> dict[str, Any]:
    d = load_data(_FILE)
    assert isinstance(d, dict)
    return d


def list_scenarios() -> list[tuple[str, str]]:
    """(name, one-line description) of the fault-state scenarios, in file order."""
    return [(name, str(sc.get("description", ""))) for name, sc in _data()["scenarios"].items()]


def all_scenarios() -> list[tuple[str, str]]:
    """Every scenario name any command accepts: the fault states, then the watch timelines."""
    from gpuclinic.watch.simulate import list_watch_scenarios

    out = list_scenarios()
    have = {n for n, _ in out}
    return out + [(n, d) for n, d in list_watch_scenarios() if n not in have]


def format_list() -> str:
    """The ``--list-scenarios`` output, the same in every command."""
    return "\n".join(f"{name:22} {desc}" for name, desc in all_scenarios())


def unknown_scenario(name: str) -> InputError:
    """The one error for a name no command knows."""
    return InputError(f"unknown scenario {name!r}; valid: {', '.join(n for n, _ in all_scenarios())}",
                      exit_code=EXIT_USAGE)


def is_fault_state(name: str) -> bool:
    return name in _data()["scenarios"]


def timeline(name: str) -> dict[str, float | None]:
    """When a fault-state scenario's fault starts, ends (None: it does not recover) and how long it runs."""
    t = dict(_data().get("timeline_defaults", {}))
    t.update(_scenario(name).get("timeline", {}))
    return {"fault_at": float(t.get("fault_at", 10)), "recover_at": t.get("recover_at"),
            "duration_s": float(t.get("duration_s", 60))}


def expected(name: str) -> dict[str, Any]:
    """What the scenario must produce: ``{"verdict": ..., "codes": [...]}``."""
    return dict(_scenario(name).get("expect", {}))


def _scenario(name: str) -> dict[str, Any]:
    scs = _data()["scenarios"]
    if name not in scs:
        raise unknown_scenario(name)
    sc = scs[name]
    assert isinstance(sc, dict)
    return sc


def _base_gpus(base: dict[str, Any]) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = []
    bus_ids: list[str] = base["bus_ids"]
    switches: list[str] = base["nvswitch_ids"]
    proc = base["process"]
    for i, bus in enumerate(bus_ids):
        g: dict[str, Any] = copy.deepcopy(base["gpu"])
        g["index"] = i
        g["pci_bus_id"] = bus
        g["uuid"] = f"GPU-5b0c{i:04x}-7c2e-3f1a-9d4e-8a61c2b0{i:04x}"
        g["serial"] = f"165232200{i:04d}"
        for k, vals in base["vary"].items():
            g[k] = vals[i % len(vals)]
        g["nvlinks"] = [
            {"link": link, "active": True, "version": base["nvlink_version"],
             "remote_pci_bus_id": switches[link % len(switches)], "replay_errors": 0, "recovery_errors": 0,
             "crc_flit_errors": 0, "crc_data_errors": 0, "ecc_errors": 0}
            for link in range(base["nvlinks_per_gpu"])
        ]
        g["processes"] = [{"pid": proc["first_pid"] + i, "name": proc["name"],
                           "used_memory_bytes": proc["used_memory_bytes"], "kind": "compute"}]
        gpus.append(g)
    return gpus


_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def _pci_devices(base: dict[str, Any], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    devs: list[dict[str, Any]] = []
    half = len(base["bus_ids"]) // 2
    for i, (bus, bridge) in enumerate(zip(base["bus_ids"], base["bridge_ids"], strict=True)):
        g = gpus[i]
        devs.append({
            "bus_id": bus, "vendor_id": "0x10de", "device_id": "0x2330", "class_code": "0x030200",
            "driver": "nvidia", "numa_node": 0 if i < half else 1,
            "current_link_speed_gts": _GTS.get(g.get("pcie_gen") or 0), "max_link_speed_gts": 32.0,
            "current_link_width": g.get("pcie_width"), "max_link_width": 16, "parent_bus_id": bridge,
            "aer_corrected": {"TOTAL_ERR_COR": 0}, "aer_nonfatal": {"TOTAL_ERR_NONFATAL": 0},
            "aer_fatal": {"TOTAL_ERR_FATAL": 0},
        })
    for i, bridge in enumerate(base["bridge_ids"]):  # PCIe switch downstream ports above each GPU
        devs.append({
            "bus_id": bridge, "vendor_id": "0x1000", "device_id": "0xc030", "class_code": "0x060400",
            "driver": "pcieport", "numa_node": 0 if i < half else 1, "current_link_speed_gts": 32.0,
            "max_link_speed_gts": 32.0, "current_link_width": 16, "max_link_width": 16,
            "aer_corrected": {"TOTAL_ERR_COR": 0}, "aer_nonfatal": {"TOTAL_ERR_NONFATAL": 0},
            "aer_fatal": {"TOTAL_ERR_FATAL": 0},
        })
    for sw in base["nvswitch_ids"]:
        devs.append({"bus_id": sw, "vendor_id": "0x10de", "device_id": "0x22a3", "class_code": "0x068000",
                     "driver": "nvidia-nvswitch", "numa_node": 0})
    return devs


def build_snapshot_dict(name: str) -> dict[str, Any]:
    """The scenario as a snapshot dict (what ``Snapshot.from_dict`` reads)."""
    sc = _scenario(name)
    base = _data()["base"]
    gpus = _base_gpus(base)
    for g in gpus:
        g.update(copy.deepcopy(sc.get("all_gpus", {})))
    for idx, over in sc.get("gpus", {}).items():
        g = gpus[int(idx)]
        over = copy.deepcopy(over)
        if "replace" in over:
            # A GPU NVML could not read: identity only, plus the fields the scenario keeps.
            keep = set(over.pop("keep", [])) | {"index", "pci_bus_id", "uuid", "serial"}
            gpus[int(idx)] = g = {k: v for k, v in g.items() if k in keep}
            g.update(over.pop("replace"))
        g.update(over)
    for idx, links in sc.get("nvlinks", {}).items():
        for link, over in links.items():
            gpus[int(idx)]["nvlinks"][int(link)].update(over)
    pci = _pci_devices(base, gpus)
    for bus, over in sc.get("pci", {}).items():
        for d in pci:
            if d["bus_id"] == bus:
                d.update(over)
    snap: dict[str, Any] = copy.deepcopy(base["snapshot"])
    snap.update(
        {
            "gpus": gpus,
            "pci_devices": pci,
            "kernel_events": [
                dict(e, origin=f"scenario:{name}") for e in copy.deepcopy(sc.get("kernel_events", []))
            ],
            "inputs": [f"scenario:{name}"],
            "notes": [f"simulated node: {sc.get('description', name)}"],
        }
    )
    for key, val in base.get("facts", {}).items():  # software/container/host of a healthy node
        snap[key] = copy.deepcopy(val)
        snap[key].update(copy.deepcopy(sc.get("facts", {}).get(key, {})))
    snap.update(copy.deepcopy(sc.get("snapshot", {})))
    return snap


def _make(cls: type[T], d: dict[str, Any]) -> T:
    """Construct a fact dataclass from trusted scenario data (ints become floats where typed so).

    Direct construction instead of the generic ``Snapshot.from_dict`` keeps ``doctor --scenario``
    startup small; tests check both give the same snapshot.
    """
    floats = _FLOAT_FIELDS.get(cls)
    if floats is None:
        rf = fields_of(cls)
        assert rf is not None, f"{cls.__name__} is not a record"
        floats = _FLOAT_FIELDS[cls] = frozenset(
            name for name, tp, _, _ in rf if isinstance(tp, str) and tp.startswith("float")
        )
    kw = {
        k: (float(v) if k in floats and isinstance(v, int) and not isinstance(v, bool) else v)
        for k, v in d.items()
    }
    return cls(**kw)


_FLOAT_FIELDS: dict[type, frozenset[str]] = {}


def load_scenario(name: str) -> Snapshot:
    """A fresh :class:`Snapshot` for scenario ``name`` (a timeline: its faulted state); unknown:
    InputError."""
    if not is_fault_state(name):
        return _timeline_snapshot(name)
    d = build_snapshot_dict(name)
    gpus = []
    for g in d.pop("gpus"):
        g = dict(g)
        g["nvlinks"] = [NvLinkFacts(**x) for x in g.get("nvlinks", [])]
        g["processes"] = [GpuProcess(**x) for x in g.get("processes", [])]
        gpus.append(_make(GpuFacts, g))
    pci = [_make(PciDevice, x) for x in d.pop("pci_devices")]
    events = [_make(KernelEvent, x) for x in d.pop("kernel_events")]
    facts = {}
    if d.get("software") or d.get("host") or d.get("container") or d.get("room"):
        from gpuclinic.facts.serial import from_jsonable  # small nested facts: the generic decoder is fine

        kinds: list[tuple[str, type]] = [
            ("software", SoftwareFacts), ("container", ContainerFacts), ("host", HostFacts)
        ]
        if d.get("room") is not None:  # the room facts module loads only for a scenario that has them
            from gpuclinic.facts.room import RoomFacts

            kinds.append(("room", RoomFacts))
        for key, cls in kinds:
            if d.get(key) is not None:
                facts[key] = from_jsonable(cls, d.pop(key))
    return Snapshot(**d, **facts, gpus=gpus, pci_devices=pci, kernel_events=events)


def _timeline_snapshot(name: str) -> Snapshot:
    """A watch timeline's faulted state: its GPUs at the end of the timeline and every kernel line
    it logged."""
    from gpuclinic.sources.kernellog import parse_lines
    from gpuclinic.watch.backend import ScaledClock
    from gpuclinic.watch.simulate import ScenarioBackend, list_watch_scenarios, load_watch_scenario

    if name not in {n for n, _ in list_watch_scenarios()}:
        raise unknown_scenario(name)
    sc = load_watch_scenario(name)
    end = float(sc.duration_s or max([float(e["t"]) for e in sc.events] or [0.0]))

    class _At(ScaledClock):
        def now(self) -> float:
            return end

    be = ScenarioBackend(sc, _At(1.0))
    be.t0 = 0.0
    gpus = be.sample()
    lines = be.poll_kernel_lines()
    events = list(parse_lines(lines, f"scenario:{name}")) if lines else []
    from gpuclinic.facts.serial import from_jsonable

    facts = {
        key: from_jsonable(cls, copy.deepcopy(_data()["base"]["facts"][key]))
        for key, cls in (("software", SoftwareFacts), ("container", ContainerFacts), ("host", HostFacts))
        if key in _data()["base"].get("facts", {})
    }
    return Snapshot(
        **facts,
        origin="scenario",
        hostname=f"sim-{name}",
        driver_version=sc.driver_version,
        cuda_driver_version=sc.cuda_driver_version,
        nvml_available=True,
        gpus=gpus,
        kernel_events=list(events),
        kernel_log_read=True,
        inputs=[f"scenario:{name}"],
        notes=[f"simulated node (the faulted state of timeline {name}): {sc.description}"],
    )
