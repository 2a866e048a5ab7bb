"""One definition of each thing every command shows: the runbook pointer and remedy text, a GPU's identity
key.  These scan the source, so a second copy written in another command fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuclinic.knowledge.runbooks import first_step, remedy, runbook_command
from gpuclinic.model import GpuRef

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuclinic"


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(p.relative_to(SRC)), ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(SRC.rglob("*.py"))
    ]


def _fstring_builds_pointer(node: ast.JoinedStr) -> bool:
    """An f-string with ``gpuclinic runbook {...}`` in it: a runbook pointer put together by hand."""
    for a, b in zip(node.values, node.values[1:], strict=False):
        if isinstance(a, ast.Constant) and isinstance(b, ast.FormattedValue):
            if str(a.value).rstrip().endswith("gpuclinic runbook"):
                return True
    return False


def test_the_runbook_pointer_is_built_in_one_place() -> None:
    where = sorted(
        name
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr) and _fstring_builds_pointer(node)
    )
    assert where == ["knowledge/runbooks.py"], where


def test_the_remedy_sentence_is_written_in_one_place() -> None:
    """``All steps: ...`` (the tail of every remedy watch, run and the alerts send) is runbooks.remedy's."""
    where = sorted(
        {
            name
            for name, tree in _modules()
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "All steps:" in node.value
        }
    )
    assert where == ["knowledge/runbooks.py"], where


def test_pointer_and_remedy_for_one_gpu() -> None:
    gpu = GpuRef(index=3, pci_bus_id="0000:17:00.0", uuid="GPU-abc")
    assert runbook_command("xid.79", gpu) == "gpuclinic runbook xid.79 --gpu 3"
    assert runbook_command("xid.79", None, markdown=True) == "gpuclinic runbook xid.79 --markdown"
    step = first_step("gpu.fallen_off_bus", gpu)
    assert step and remedy("gpu.fallen_off_bus", gpu) == (
        f"{step} All steps: `gpuclinic runbook gpu.fallen_off_bus --gpu 3`."
    )
    # an incident's own first step (a signature's fix) is kept, with the same pointer
    assert remedy("error.cuda_oom", None, "Lower the batch size.") == (
        "Lower the batch size. All steps: `gpuclinic runbook error.cuda_oom`."
    )


def test_gpu_identity_key_is_defined_once() -> None:
    defs = sorted(
        name
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "gpu_key"
    )
    assert defs == ["checks/_baseline.py"], defs


def _code_of(call: ast.Call) -> str | None:
    """The finding code a ``Finding(code=...)`` or ``finding(code, ...)`` call gives: a literal, or the
    literal start of an f-string."""
    kw = next((k for k in call.keywords if k.arg == "code"), None)
    value = kw.value if kw is not None else call.args[0] if call.args else None
    if isinstance(value, ast.Constant):
        return str(value.value)
    if isinstance(value, ast.JoinedStr) and isinstance(value.values[0], ast.Constant):
        return str(value.values[0].value) + "*"
    return None


def test_detectors_write_no_remedy_of_a_runbook_code() -> None:
    """A detector may word a remedy only for a code whose fix it computes from knowledge data
    (codes.json ``remedy_computed``) or a signature's fix (``error.*``); every other code's remedy is its
    runbook's first step, set by ``checks.run_checks``."""
    from gpuclinic.knowledge.codes import info, remedy_computed

    bad = []
    for name, tree in _modules():
        if not name.startswith("checks/"):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and any(k.arg == "remedy" for k in node.keywords)):
                continue
            code = _code_of(node)
            if code is None:  # a code passed in, its text from data (signatures): finding_remedy decides
                assert name in ("checks/signals.py", "checks/room.py"), (name, node.lineno)
                continue
            probe = code.rstrip("*") + ("x" if code.endswith(".*") or code.endswith("*") else "")
            i = info(probe)
            if i is None or not (i.default == "signature" or remedy_computed(probe)):
                bad.append(f"{name}:{node.lineno} {code}")
    assert bad == [], bad


def test_every_code_has_a_runbook_with_a_first_step() -> None:
    from gpuclinic.knowledge.codes import all_codes

    assert [c.code for c in all_codes() if not first_step(c.code)] == []


def test_doctor_remedy_is_the_runbook_first_step_in_every_scenario() -> None:
    """What doctor, watch and run show for a finding is its runbook's first step (derived by one function,
    ``runbooks.finding_remedy``), on every simulated node."""
    from gpuclinic.diagnose import diagnose
    from gpuclinic.knowledge import load_data
    from gpuclinic.knowledge.codes import info, remedy_computed
    from gpuclinic.sources.scenarios import load_scenario

    seen = 0
    for name in sorted(load_data("scenarios.json")["scenarios"]):
        rep = diagnose(load_scenario(name))
        roots = {(i.code, i.id) for i in rep.incidents}
        for f in rep.findings:
            i = info(f.code)
            own = i is None or i.default == "signature" or remedy_computed(f.code)
            if (f.code, f.incident) not in roots or own:
                continue
            assert f.remedy == first_step(f.code, f.gpu), (name, f.code)
            seen += 1
    assert seen >= 10


def test_host_thresholds_are_data_read_by_name() -> None:
    """The host and container checks and run's OOM hint read their thresholds from host_thresholds.json
    (each with its source), not from constants of their own; every entry there is read."""
    from gpuclinic.knowledge import load_data

    data = {k: v for k, v in load_data("host_thresholds.json").items() if not k.startswith("_")}
    assert all(v.get("source") and isinstance(v.get("value"), (int, float)) for v in data.values())
    text = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py"))
    assert [k for k in data if not k.startswith("psi_") and f'"{k}"' not in text] == []
    from gpuclinic.checks.host import PSI

    assert {f"psi_{p.replace('.', '_')}_avg10_pct" for p in PSI} == {k for k in data if k.startswith("psi_")}
    for mod in ("checks/host.py", "checks/container.py"):
        tree = ast.parse((SRC / mod).read_text(encoding="utf-8"))
        consts = [
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, (int, float)) and not isinstance(node.value.value, bool)
            for t in node.targets
            if isinstance(t, ast.Name)
        ]
        assert consts == [], (mod, consts)


def test_evidence_signatures_word_no_remedy_of_a_runbook_code() -> None:
    """A signature's remedy text would be a second copy of its code's runbook (and never shown)."""
    from gpuclinic.knowledge import load_data
    from gpuclinic.knowledge.codes import remedy_computed

    sigs = load_data("evidence_signatures.json")["signatures"]
    assert [s["id"] for s in sigs if s.get("remedy") and not remedy_computed(s["code"])] == []


def test_watch_words_no_remedy_of_its_own() -> None:
    """Every watch condition's remedy comes from the runbooks (``runbooks.remedy``), none is a literal."""
    bad = [
        f"{name}:{node.lineno}"
        for name, tree in _modules()
        if name.startswith("watch/")
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg == "remedy"
        and isinstance(node.value, (ast.Constant, ast.JoinedStr, ast.BinOp))
    ]
    assert bad == [], bad


def test_code_literals_outside_the_detectors_are_in_codes_json() -> None:
    """A finding code written as a literal in watch, run, k8s, fleet, the renderers or the alert rules
    must name a code of codes.json (``require``), so a renamed code cannot leave a stale second copy."""
    import re

    from gpuclinic.knowledge.codes import info

    pat = re.compile(r"^(gpu|memory|thermal|power|pcie|nvlink|xid|gsp|room|host|driver|perf|watch|network|"
                     r"container|cuda|k8s|dcgm|persistenced|os|software|explain|run)\.[a-z0-9_.*]+$")
    skip = {"room.js", "room.css", "memory.max", "memory.current", "memory.events", "memory.full.avg10",
            "memory.usage_in_bytes", "memory.limit_in_bytes", "xid.generic", "xid.fallen_off_bus", "gpu.lost"}
    bad = []
    for name, tree in _modules():
        if name.startswith(("checks/", "knowledge/", "sources/", "accept/", "facts/", "explain")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and pat.match(node.value):
                if node.value not in skip and info(node.value.replace("<n>", "1")) is None:
                    bad.append(f"{name}:{node.lineno} {node.value}")
    assert bad == [], bad


def test_signatures_give_way_by_one_table() -> None:
    """Which error signature gives way to which reader's finding is the data's ``covered_by`` (was two
    id lists, in explain and in the evidence signals); every code named there has a reader that says
    whether it read the line."""
    from gpuclinic.facts.snapshot import Snapshot
    from gpuclinic.knowledge.signatures import covered_by
    from gpuclinic.sources import signals

    table = covered_by()
    assert {"xid.generic", "nvrm.rm_init_failed", "gpu.lost"} <= set(table)
    for code in set(table.values()):
        assert signals._read_elsewhere(Snapshot(), code) is False, code
    with pytest.raises(KeyError):
        signals._read_elsewhere(Snapshot(), "no.such.code")
    for path in ("explain.py", "sources/signals.py"):
        text = (Path(__file__).resolve().parents[2] / "src" / "gpuclinic" / path).read_text()
        assert '"nvrm.rm_init_failed"' not in text and '"xid.generic"' not in text, path
