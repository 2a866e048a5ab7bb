"""Runbooks as data, the runbook command, and the incident-first terminal layout at 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.knowledge import codes as K
from gpuclinic.knowledge.runbooks import all_runbooks, first_step, get
from gpuclinic.model import GpuRef
from gpuclinic.render.markdown import render_markdown
from gpuclinic.render.terminal import layout
from gpuclinic.sources.scenarios import list_scenarios, load_scenario

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_every_code_has_one_runbook_with_steps_evidence_and_verification() -> None:
    ids = [rb.id for rb in all_runbooks()]
    assert len(ids) == len(set(ids))
    for c in K.all_codes():
        rb = get(c.code)
        assert rb is not None, c.code
        assert rb.steps and rb.verify and rb.evidence and rb.who in ("you", "provider", "rma"), rb.id
    for rb in all_runbooks():
        for s in rb.steps:
            assert s.do, rb.id
            if s.disruptive:
                assert s.safety, (rb.id, s.do)  # a reset/reboot says what to check first


def test_hardware_runbooks_drain_and_check_processes_before_a_reset() -> None:
    for rid in ("gpu.unresponsive", "gsp.error", "memory.ecc_uncorrectable", "xid.reset"):
        steps = get(rid).steps  # type: ignore[union-attr]
        reset = next(i for i, s in enumerate(steps) if any("nvidia-smi -r" in c for c in s.run))
        assert any("drain" in " ".join(s.run).lower() for s in steps[:reset]), rid
        assert any("--query-compute-apps" in " ".join(s.run) for s in steps[:reset]), rid
    fall = get("gpu.fallen_off_bus")
    assert fall is not None and not any("nvidia-smi -r" in c for s in fall.steps for c in s.run)


def test_xid_codes_resolve_to_their_class_runbook_and_fill_in_the_gpu() -> None:
    assert get("xid.79").id == "xid.reboot" and get("xid.13").id == "xid.application"  # type: ignore[union-attr]
    step = first_step("gsp.error", GpuRef(index=3, pci_bus_id="0000:5d:00.0", uuid="GPU-x"))
    assert "GPU 3" in step and "{index}" not in step


def test_runbook_command() -> None:
    r = _cli("runbook", "memory.row_remap_failed", "--gpu", "7")
    assert (
        r.returncode == 0
        and "Who acts: RMA" in r.stdout
        and "-i 7" in r.stdout
        and "Verify the fix" in r.stdout
    )
    md = _cli("runbook", "xid.79", "--markdown")
    assert md.returncode == 0 and md.stdout.startswith("# Xid that needs a node reboot (xid.79)")
    lst = _cli("runbook", "--list")
    assert lst.returncode == 0 and len(lst.stdout.splitlines()) == len(all_runbooks())
    bad = _cli("runbook", "no.such_code")
    assert (
        bad.returncode == 64
        and bad.stdout == ""
        and "no runbook" in bad.stderr
        and "Traceback" not in bad.stderr
    )


def test_code_table_in_the_docs_is_current() -> None:
    assert (DOCS / "diagnosis.md").read_text().endswith(K.markdown_table())


def test_every_code_is_documented() -> None:
    text = "\n".join(p.read_text() for p in DOCS.glob("*.md"))
    missing = [c.code for c in K.all_codes() if f"`{c.code}`" not in text]
    assert not missing


@pytest.mark.parametrize("name", [n for n, _ in list_scenarios()])
def test_terminal_layout_fits_80_columns_and_shows_incidents_first(name: str) -> None:
    rep = diagnose(load_scenario(name))
    lines = [t for t, _ in layout(rep, 80)]
    assert max(len(x) for x in lines) <= 80, max(lines, key=len)
    bad = [i for i in rep.incidents if i.severity.label != "info"]
    if bad:
        text = "\n".join(lines)
        assert f"gpuclinic runbook {bad[0].code}" in text
        assert text.index(bad[0].title[:30]) < text.index("explains:") if bad[0].symptoms else True


def test_plain_output_at_80_columns_via_the_cli() -> None:
    r = _cli("doctor", "--scenario", "fallen-off-bus", env={"NO_COLOR": "1", "COLUMNS": "80"})
    assert r.returncode == 2
    assert max(len(x) for x in r.stdout.splitlines()) <= 80
    assert "CRITICAL GPU 4 fell off the PCIe bus" in r.stdout
    assert r.stdout.count("CRITICAL") == 1  # one incident, its symptoms folded under it
    # the header names the scenario once and keeps "8 GPUs seen" on its line (it wrapped to "seen" alone)
    assert r.stdout.splitlines()[1].startswith("scenario fallen-off-bus · ") and "8 GPUs seen" in r.stdout


def test_markdown_lists_incidents_with_their_symptoms() -> None:
    md = render_markdown(diagnose(load_scenario("uncorrectable-ecc")))
    assert "## [CRITICAL] GPU 2 had 2 uncorrectable memory (ECC) error(s)" in md
    assert "- `xid.63` [warning]" in md and "gpuclinic runbook memory.ecc_uncorrectable --gpu 2" in md


def test_no_runbook_is_a_generated_placeholder() -> None:
    """Each runbook's own steps are written for its cause: none repeats another runbook's step with only
    the title swapped (the network runbooks once all read "<title>: run the network probe and follow its
    advice", while the real procedure sat in the detectors' own remedy text)."""
    from gpuclinic.knowledge.runbooks import _raw

    common = {str(s["do"]).strip() for s in _raw()[1].values()}
    seen: dict[str, str] = {}
    clashes = []
    for rb in all_runbooks():
        for s in rb.steps:
            if s.do in common:
                continue  # a shared step (drain, capture, reboot ...) used by name
            assert not s.do.startswith(rb.title + ":"), rb.id
            key = s.do.replace(rb.title, "<title>")
            if key in seen and seen[key] != rb.id:
                clashes.append((seen[key], rb.id, key))
            seen.setdefault(key, rb.id)
    assert clashes == []


@pytest.mark.parametrize(
    "code",
    [c.code for c in K.all_codes() if c.detector == "network" and not c.code.startswith("network.registry_")],
)
def test_network_runbooks_give_a_procedure_with_its_source(code: str) -> None:
    rb = get(code)
    assert rb is not None and len(rb.steps) >= 2, code
    assert all(s.run or "`" in s.do or s.who == "provider" or "network." in s.do for s in rb.steps[:1]), code
    assert rb.source and rb.source != "knowledge/data/endpoints.json; gpuclinic net probes", code
