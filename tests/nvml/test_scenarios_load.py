"""Scenario data loads into valid snapshots and round-trips through JSON."""

from __future__ import annotations

import pytest

from gpuclinic.errors import InputError
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.scenarios import build_snapshot_dict, expected, list_scenarios, load_scenario

REQUIRED = {
    "healthy-8xh100-load",
    "fallen-off-bus",
    "hbm-row-remap-pending",
    "uncorrectable-ecc",
    "overheating",
    "power-brake",
    "pcie-x8-under-load",
    "gsp-timeout",
    "nvlink-error",
    "straggler",
}
NAMES = [n for n, _ in list_scenarios()]


def test_required_scenarios_exist_with_descriptions() -> None:
    assert REQUIRED <= set(NAMES)
    assert all(desc for _, desc in list_scenarios())


@pytest.mark.parametrize("name", NAMES)
def test_scenario_is_a_consistent_snapshot(name: str) -> None:
    snap = load_scenario(name)
    assert snap.origin == "scenario" and snap.inputs == [f"scenario:{name}"]
    assert len(snap.gpus) == 8 and [g.index for g in snap.gpus] == list(range(8))
    assert {g.pci_bus_id for g in snap.gpus} <= {d.bus_id for d in snap.pci_devices}
    for g in snap.gpus:
        if not g.lost:
            assert g.power_limit_w and g.slowdown_temp_c == 89.0 and g.memory_total_bytes == 85_520_809_984
            assert len(g.nvlinks) == 18
    for e in snap.kernel_events:
        assert (
            e.line and e.kind and (e.pci_bus_id is None or e.pci_bus_id in {g.pci_bus_id for g in snap.gpus})
        )
    assert Snapshot.from_dict(snap.to_dict()) == snap
    # the fast direct construction gives exactly what the generic decoder gives, types included
    generic = Snapshot.from_dict(build_snapshot_dict(name))
    assert generic == snap
    assert [type(g.temperature_c) for g in generic.gpus] == [type(g.temperature_c) for g in snap.gpus]
    exp = expected(name)
    assert exp["verdict"] in {"healthy", "warning", "drain"} and isinstance(exp["codes"], list)


def test_scenarios_are_independent_copies() -> None:
    a = load_scenario("healthy-8xh100-load")
    a.gpus[0].temperature_c = 120
    assert load_scenario("healthy-8xh100-load").gpus[0].temperature_c == 58


def test_unknown_scenario_lists_valid_names() -> None:
    with pytest.raises(InputError) as ei:
        load_scenario("no-such")
    assert "no-such" in str(ei.value) and "healthy-8xh100-load" in str(ei.value)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_kernel_events_are_what_the_parser_reads_from_their_lines(name: str) -> None:
    """Scenario events are stored pre-parsed (importing the parser would triple doctor's startup);
    this keeps them identical to what the kernel-log parser makes of the same lines."""
    from gpuclinic.sources.kernellog import parse_lines

    for e in load_scenario(name).kernel_events:
        got = list(parse_lines([e.line]))
        assert len(got) == 1, (e.line, got)
        g = got[0]
        assert (g.kind, g.xid, g.pci_bus_id, g.pid, g.process, g.time) == (
            e.kind,
            e.xid,
            e.pci_bus_id,
            e.pid,
            e.process,
            e.time,
        ), e.line
