"""One definition of each thing every command shows: the runbook pointer and remedy text, a GPU's identity
key.  These scan the source, so a second copy written in another command fails here, not in review."""

from __future__ import annotations

import ast
from pathlib import Path

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
