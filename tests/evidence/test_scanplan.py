"""explain starts a big log's two greps from the last run's plan, before the readers load (issue 14: the
19 MB log waited ~25 ms for grep); a plan that is stale or damaged costs a scan, never an answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuclinic import scanplan, textscan
from gpuclinic.explain import explain_text, read_input
from gpuclinic.sources import segments


def _log(path: Path) -> Path:
    lines = [f"step {i} loss 0.5 \u2502 tokens/s 9000" for i in range(20000)]
    lines[10] = "NCCL WARN Cuda failure 'out of memory'"
    lines[9000] = "[ 12.3] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def plan_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("GPUCLINIC_RECACHE_DIR", str(d))
    monkeypatch.setattr(scanplan, "_LOADED", [])
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return d


def _popens(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    started: list[list[str]] = []
    real = subprocess.Popen

    def counting(argv: Any, *a: Any, **kw: Any) -> Any:
        started.append(list(argv))
        return real(argv, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", counting)
    return started


def test_the_plan_a_run_used_is_written_and_the_next_run_starts_from_it(
    plan_dir: Path, tmp_path: Path
) -> None:
    log = _log(tmp_path / "train.log")
    text, origin, _ = read_input(str(log))
    explain_text(text, origin)
    assert scanplan.cached() == (segments.PREFETCH_CHARS, segments._needles(), segments._LINE_START.pattern)
    assert [p.name for p in plan_dir.iterdir()] == [scanplan._FILE]
    # a new process: its greps start before the readers are imported
    code = (
        "import sys, json\n"
        "from gpuclinic import textscan\n"
        "from gpuclinic.textinput import read_input\n"
        f"text, origin, _ = read_input({str(log)!r})\n"
        "ahead = textscan._PENDING[0] is not None and textscan._STARTS[0] is not None\n"
        "print(json.dumps([ahead, 'gpuclinic.sources.segments' in sys.modules]))\n"
    )
    env = {**os.environ, "GPUCLINIC_RECACHE_DIR": str(plan_dir)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == [True, False]


def test_a_stale_plan_costs_a_scan_not_an_answer(
    plan_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(tmp_path / "train.log")
    want = [f.code for f in explain_text(log.read_text(), str(log)).findings]
    needles = tuple(n for n in segments._needles() if n.lower() not in ("xid", "nvrm"))
    scanplan.keep((segments.PREFETCH_CHARS, needles, segments._LINE_START.pattern))  # an older checkout's
    monkeypatch.setattr(scanplan, "_LOADED", [])
    started = _popens(monkeypatch)
    text, origin, _ = read_input(str(log))
    assert len(started) == 2  # from the stale plan
    got = [f.code for f in explain_text(text, origin).findings]
    assert got == want and "xid.79" in got
    assert len(started) == 3  # the reader's own literal scan (the line-start one was the same)
    monkeypatch.setattr(scanplan, "_LOADED", [])
    assert scanplan.cached() == (segments.PREFETCH_CHARS, segments._needles(), segments._LINE_START.pattern)
    assert textscan._PENDING[0] is None and textscan._STARTS[0] is None


def test_a_damaged_plan_is_no_plan_and_nothing_is_written_when_told_not_to(
    plan_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_dir.mkdir()
    (plan_dir / scanplan._FILE).write_bytes(b"\x00garbage")
    assert scanplan.cached() is None
    monkeypatch.setattr(scanplan, "_LOADED", [])
    (plan_dir / scanplan._FILE).unlink()
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE
    scanplan.keep((1, ("a",), "b"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setenv("GPUCLINIC_RECACHE", "0")
    scanplan.keep((1, ("a",), "b"))
    assert list(plan_dir.iterdir()) == []
    monkeypatch.delenv("GPUCLINIC_RECACHE")
    scanplan.keep((1, ("a",), "b"))
    monkeypatch.setattr(scanplan, "_LOADED", [])
    assert scanplan.cached() == (1, ("a",), "b")
