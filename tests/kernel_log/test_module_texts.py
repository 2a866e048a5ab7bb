"""The cause and fix of each kernel-module load problem are data (knowledge/data/driver_module.json), one
entry per problem the kernel-log reader names, each with a source."""

from __future__ import annotations

from gpuclinic.checks.driver_log import _module_text
from gpuclinic.knowledge import load_data
from gpuclinic.sources.kernellog.patterns import _MODULE_PATTERNS


def test_every_problem_the_reader_names_has_its_text_and_source() -> None:
    data = load_data("driver_module.json")
    judged = {sub for _, sub, sev in _MODULE_PATTERNS if sev in ("critical", "warning")}
    assert judged <= set(data["problems"]), judged - set(data["problems"])
    for sub, e in data["problems"].items():
        assert e["what"] and e["fix"] and e["source"], sub
        assert _module_text(sub) == (e["what"], e["fix"])
    assert _module_text("no-such-problem") == (data["unknown"]["what"], data["unknown"]["fix"])


def test_probe_not_called_is_the_cause_and_one_finding() -> None:
    """A 2011 kernel log (ironhide#41): "probe routine was not called" then "No NVIDIA graphics adapter
    probed!". The second follows from the first: one critical finding titled by the cause (another driver
    holds the GPU), and the nouveau error signature gives way to it in doctor and explain alike."""
    from pathlib import Path

    from gpuclinic.diagnose import diagnose
    from gpuclinic.explain import explain_text
    from gpuclinic.sources.evidence import load_evidence

    f = (
        Path(__file__).resolve().parents[1]
        / "fixtures/realworld/corpus/probe_not_called_nouveau_2011_ironhide_41.txt"
    )
    for rep in (diagnose(load_evidence([str(f)])), explain_text(f.read_text(), f.name)):
        bad = [x for x in rep.findings if x.severity.name in ("WARNING", "CRITICAL")]
        assert [x.code for x in bad] == ["driver.kernel_module"], [x.code for x in bad]
        assert "another driver claimed the GPU" in bad[0].title
        assert any("probe routine was not called" in e for e in bad[0].evidence)
        assert any("No NVIDIA graphics adapter probed" in e for e in bad[0].evidence)
