"""The diagnosis model: codes as data, one XID classification, incidents with their root cause."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuclinic.checks import detectors, load_all
from gpuclinic.diagnose import diagnose
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.incidents import group
from gpuclinic.knowledge import codes as K
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.xid import all_xids, classify, runbook_for_xid
from gpuclinic.model import Family, Finding, GpuRef, Severity
from gpuclinic.sources.scenarios import load_scenario

SCENARIOS = load_data("scenarios.json")["scenarios"]
SINGLE_FAULT = sorted(n for n, s in SCENARIOS.items() if s["expect"].get("root"))


def test_every_declared_code_is_in_the_knowledge_with_one_rule() -> None:
    thresholds = load_data("gpu_thresholds.json")
    for c in load_all().values():
        for code in c.codes:
            info = K.require(code)
            assert info.runbook and info.title and info.source, code
            assert info.kind in K.KINDS, code
            for t in info.thresholds:
                assert t in thresholds, (code, t)
    for info in K.all_codes():
        for label in info.severities():
            assert label in ("info", "warning", "critical", "catalog", "signature"), (info.code, label)


def test_severity_lookup_rejects_unknown_codes_and_conditions() -> None:
    assert K.severity("thermal.throttle") == Severity.CRITICAL
    assert K.severity("thermal.throttle", "software") == Severity.WARNING
    with pytest.raises(KeyError):
        K.severity("thermal.nonexistent")
    with pytest.raises(KeyError):
        K.severity("thermal.throttle", "typo")
    assert K.info("xid.79") is not None and K.info("xid.79").code == "xid.*"  # type: ignore[union-attr]


def test_detectors_cover_every_check_once() -> None:
    seen: list[str] = []
    for d in detectors().values():
        seen += [c.name for c in d.checks]
        for c in d.checks:
            assert all(K.require(code).detector == d.name for code in c.codes[:1])
    assert sorted(seen) == sorted(load_all())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_findings_carry_a_severity_their_rule_allows(name: str) -> None:
    rep = diagnose(load_scenario(name))
    for f in rep.findings:
        allowed = K.allowed(f.code)
        if allowed is not None:
            assert f.severity in allowed, (f.code, f.severity)
        assert f.incident and any(i.id == f.incident for i in rep.incidents)


@pytest.mark.parametrize("name", SINGLE_FAULT)
def test_single_fault_scenario_is_one_incident_with_its_root_cause(name: str) -> None:
    exp = SCENARIOS[name]["expect"]
    r = subprocess.run([sys.executable, "-m", "gpuclinic", "doctor", "--scenario", name, "--json"],
                       capture_output=True, text=True, timeout=60)
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuclinic.report/2"
    bad = [i for i in d["incidents"] if i["severity"] in ("warning", "critical")]
    assert len(bad) == 1, [i["id"] for i in bad]
    inc = bad[0]
    assert inc["code"] == exp["root"]
    assert set(inc["symptoms"]) | {inc["code"]} == set(exp["codes"])
    assert inc["runbook"] and inc["first_step"] and inc["evidence"]
    assert {f["incident"] for f in d["findings"] if f["severity"] != "info"} == {inc["id"]}


def test_incident_json_has_the_contract_fields() -> None:
    d = diagnose(load_scenario("gsp-timeout")).to_dict(include_facts=False)
    for inc in d["incidents"]:
        assert list(inc) == [
            "id",
            "code",
            "severity",
            "family",
            "gpu",
            "title",
            "symptoms",
            "evidence",
            "runbook",
            "first_step",
        ]
    assert all("incident" in f for f in d["findings"])


def test_healthy_node_has_no_incident() -> None:
    rep = diagnose(load_scenario("healthy-8xh100-load"))
    assert rep.incidents == [] and rep.to_dict()["incidents"] == []


def test_fallen_off_bus_is_one_incident_filed_as_a_gpu_fault() -> None:
    rep = diagnose(load_scenario("fallen-off-bus"))
    (inc,) = [i for i in rep.incidents if i.severity == Severity.CRITICAL]
    assert inc.family == Family.GPU_FAULT and inc.gpu is not None and inc.gpu.index == 4
    assert {"xid.79", "gpu.missing", "pcie.aer_uncorrected"} <= set(inc.symptoms)


def _f(
    code: str, sev: Severity, bus: str | None = "0000:01:00.0", t: float | None = None, **data: object
) -> Finding:
    d = dict(data)
    if t is not None:
        d["first_s"] = t
    return Finding(
        code=code,
        severity=sev,
        family=Family.GPU_FAULT,
        title=code,
        gpu=GpuRef(pci_bus_id=bus) if bus else None,
        data=d,
        evidence=[f"{code} line"],
    )


def test_gsp_timeout_then_fall_roots_on_gsp_and_the_reverse_roots_on_the_fall() -> None:
    first = group(
        [
            _f("gpu.fallen_off_bus", Severity.CRITICAL, t=20.0),
            _f("gsp.error", Severity.CRITICAL, t=10.0),
            _f("xid.79", Severity.CRITICAL, t=20.0),
        ]
    )
    assert [(i.code, sorted(i.symptoms)) for i in first] == [("gsp.error", ["gpu.fallen_off_bus", "xid.79"])]
    later = group(
        [_f("gpu.fallen_off_bus", Severity.CRITICAL, t=10.0), _f("gsp.error", Severity.CRITICAL, t=20.0)]
    )
    assert [(i.code, i.symptoms) for i in later] == [("gpu.fallen_off_bus", ["gsp.error"])]


def test_other_gpus_are_not_pulled_into_an_incident() -> None:
    incs = group(
        [
            _f("gpu.fallen_off_bus", Severity.CRITICAL),
            _f("xid.79", Severity.CRITICAL, bus="0000:02:00.0"),
            _f("gpu.missing", Severity.CRITICAL, bus=None),
        ]
    )
    assert sorted((i.code, tuple(i.symptoms)) for i in incs) == [
        ("gpu.fallen_off_bus", ("gpu.missing",)),
        ("xid.79", ()),
    ]


def test_stated_cause_and_45_after_79_and_48_then_63() -> None:
    incs = group([_f("xid.45", Severity.INFO, caused_by=[79]), _f("xid.79", Severity.CRITICAL)])
    assert [(i.code, i.symptoms) for i in incs] == [("xid.79", ["xid.45"])]
    incs = group(
        [
            _f("xid.63", Severity.WARNING, t=5.0),
            _f("xid.48", Severity.CRITICAL, t=1.0),
            _f("xid.64", Severity.CRITICAL, t=6.0),
        ]
    )
    assert [(i.code, sorted(i.symptoms)) for i in incs] == [("xid.48", ["xid.63", "xid.64"])]
    incs = group(
        [
            _f("xid.149", Severity.CRITICAL),
            Finding(
                code="xid.145",
                severity=Severity.WARNING,
                family=Family.GPU_FAULT,
                title="",
                gpu=GpuRef(pci_bus_id="0000:01:00.0"),
                evidence=["NVRM: Xid (PCI:0000:01:00): 145, ... caused by previous Xid 149"],
            ),
        ]
    )
    assert [(i.code, i.symptoms) for i in incs] == [("xid.149", ["xid.145"])]


def test_heat_symptoms_fold_into_one_heat_incident() -> None:
    incs = group(
        [
            _f("thermal.throttle", Severity.CRITICAL),
            _f("thermal.throttle", Severity.WARNING),
            _f("thermal.slowdown", Severity.CRITICAL),
            _f("perf.straggler", Severity.WARNING),
        ]
    )
    assert len(incs) == 1 and incs[0].code == "thermal.slowdown"
    assert incs[0].severity == Severity.CRITICAL


def test_xid_classes_come_from_the_catalog() -> None:
    assert classify(13).application and not classify(13).fatal_to_job
    assert classify(79).needs_reboot and classify(79).fatal_to_job and classify(79).hardware
    assert classify(48).needs_reset and classify(48).fatal_to_job
    assert classify(64).needs_rma
    assert runbook_for_xid(79) == "xid.reboot" and runbook_for_xid(31) == "xid.application"
    crit = {x.xid for x in all_xids() if x.severity == Severity.CRITICAL}
    assert crit == {x.xid for x in all_xids() if classify(x.xid).fatal_to_job}


def test_xid63_pending_remap_asks_for_a_reset_when_convenient() -> None:
    """NVIDIA: an Xid 63 remap is pending until the next GPU reset (``reset gpu to activate``); work may go
    on meanwhile.  Its runbook is the pending-remap one, not "keep in service" of the hardware class."""
    from gpuclinic.knowledge.runbooks import first_step

    assert runbook_for_xid(63) == "memory.row_remap_pending"
    step = first_step("xid.63").lower()
    assert "reset" in step and "convenient" in step and "keep the gpu in service" not in step
    assert step == first_step("memory.row_remap_pending").lower()  # one text for the Xid and NVML's flag
    src = load_data("xid_classes.json")["runbook_by_xid"]["63"]["source"]
    assert "docs.nvidia.com" in src


def test_run_uses_the_same_xid_classes() -> None:
    from gpuclinic.supervise.classify import is_fatal_event

    for x in all_xids():
        ev = KernelEvent(kind="xid", line=f"NVRM: Xid (PCI:0000:01:00): {x.xid}, x", xid=x.xid)
        assert is_fatal_event(ev) == classify(x.xid).fatal_to_job


def test_watch_kernel_conditions_use_the_doctor_codes_and_severities() -> None:
    from gpuclinic.watch.kernel import condition_for

    gsp = condition_for(
        KernelEvent(kind="gsp", line="NVRM: GSP RPC timeout", pci_bus_id="0000:01:00.0"), {}, 60.0
    )
    assert gsp is not None and (gsp.code, gsp.severity) == ("gsp.error", K.severity("gsp.error"))
    x79 = condition_for(KernelEvent(kind="xid", line="Xid 79", xid=79, pci_bus_id="0000:01:00.0"), {}, 60.0)
    assert x79 is not None and x79.severity == Severity.CRITICAL


def test_report_findings_round_trip_with_incident_ids() -> None:
    rep = diagnose(load_scenario("overheating"))
    d = rep.to_dict(include_facts=False)
    again = [Finding.from_dict(f) for f in d["findings"]]
    assert [f.incident for f in again] == [f.incident for f in rep.findings]
    assert isinstance(rep.snapshot, Snapshot)


def test_a_node_wide_cause_is_not_filed_under_one_of_its_gpus() -> None:
    """Hot inlet air heats all 8 GPUs: the incident is the node's, not GPU 0's (nor `runbook --gpu 0`)."""
    rep = diagnose(load_scenario("hot-inlet"))
    inc = next(i for i in rep.incidents if i.code == "room.inlet_hot")
    assert len({s.gpu.index for s in rep.findings if s.incident == inc.id and s.gpu}) == 8
    assert inc.gpu is None, inc.gpu


def test_a_gpu_less_cause_takes_the_gpu_its_symptoms_share() -> None:
    """A node-wide cause whose every symptom is on one GPU is still that GPU's incident."""
    hot = Finding(code="room.inlet_hot", severity=Severity.CRITICAL, family=Family.HEAT, title="inlet hot")
    slow = Finding(code="thermal.slowdown", severity=Severity.CRITICAL, family=Family.HEAT, title="slowdown",
                   gpu=GpuRef(index=3, pci_bus_id="0000:5d:00.0"))
    (inc,) = group([hot, slow])
    assert inc.code == "room.inlet_hot" and inc.gpu is not None and inc.gpu.index == 3


def test_every_code_in_the_correlation_rules_is_a_known_code() -> None:
    """A rule naming a code no detector emits (a typo, a renamed code) silently never matches."""
    unknown = [
        (r["cause"], c)
        for r in load_data("correlation.json")["rules"]
        for c in [r["cause"], *r["explains"]]
        if "*" not in c and "class:" not in c and K.info(c) is None
    ]
    assert unknown == []
