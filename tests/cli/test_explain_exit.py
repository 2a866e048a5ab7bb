"""``explain`` as a process ends without the interpreter's teardown (``cli._exit_now``): its whole report
still reaches a file or a pipe, its exit code is the verdict's, and a reader that goes away early
(``| head``) gets no traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/kernel_log"


def _log(tmp_path: Path) -> Path:
    """A log whose report is long (many findings and evidence lines): a partial flush would show."""
    texts = [p.read_text(errors="replace") for p in sorted(FIXTURE.glob("*.log"))]
    log = tmp_path / "big.log"
    log.write_text("\n".join(f"step {i} loss 0.1" for i in range(3000)) + "\n" + "\n".join(texts))
    return log


def _untimed(report: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)?", "T", report)


def _run(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "GPUCLINIC_DEBUG"}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "gpuclinic", "explain", "--offline", *args], env=env, check=False, **kw
    )


def test_whole_report_reaches_a_file_and_the_exit_code_is_the_verdicts(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    with out.open("wb") as fh:
        r = _run("--json", str(_log(tmp_path)), stdout=fh, stderr=subprocess.PIPE)
    report = json.loads(out.read_bytes())  # complete JSON: nothing left in a buffer
    assert r.returncode == report["exit_code"] == 2 and report["verdict"] == "drain"
    assert r.stderr == b""


def test_whole_report_reaches_a_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path)
    r = _run("--markdown", str(log), capture_output=True)
    with pytest.raises(SystemExit) as done:  # the same command in this process: the interpreter stays
        main(["explain", "--offline", "--markdown", str(log)])
    assert done.value.code == r.returncode == 2
    # (the report's generation time is the only part two runs may differ in: a second may pass between them)
    assert len(r.stdout) > 8192 and _untimed(r.stdout.decode()) == _untimed(capsys.readouterr().out)


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path: Path) -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "gpuclinic", "explain", "--offline", "--json", str(_log(tmp_path))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(100)
    p.stdout.close()  # `| head -c 100`
    err = p.stderr.read()
    assert p.wait(timeout=60) == 2
    assert b"Traceback" not in err and b"Exception ignored" not in err
