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
