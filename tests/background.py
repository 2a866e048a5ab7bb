"""Long self-contained checks started when the session starts, judged by their test.

mypy over the whole tree and the README's quick start (a venv and a pip install) take tens of seconds
of CPU and disk each and share nothing with the other tests (tests/conftest.py's BACKGROUND names them).

Most of the suite waits on real servers, scrapes and time-scaled timelines, so one of CI's two cores
is idle for much of the run.  A check started here at nice 19 uses that idle time; its test then
asserts on the finished result exactly as if it had run the command itself.  Niced, it gives way
whenever a test needs both cores (timing-sensitive tests are not slowed by it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass
class _Job:
    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    err: IO[bytes]
    cleanup: Path | None


_jobs: dict[str, _Job] = {}


def start(key: str, argv: list[str], cwd: Path, *, env: dict[str, str] | None = None,
          cleanup: Path | None = None) -> None:
    """Start ``argv`` in the background under ``key`` (once per session), in its own process group;
    ``cleanup`` (a temporary folder it works in) is removed once its result was read."""
    if key in _jobs:
        return
    nice = shutil.which("nice")
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    cmd = [nice, "-n", "19", *argv] if nice else argv
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)
    _jobs[key] = _Job(proc, out, err, cleanup)


def result(key: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """The finished run started under ``key``, or None when none was started (the test then runs it).

    Its test is waiting now, so the job gets its normal priority back (as root; else it stays niced)."""
    job = _jobs.pop(key, None)
    if job is None:
        return None
    try:
        os.setpriority(os.PRIO_PGRP, job.proc.pid, 0)
    except OSError:
        pass
    try:
        job.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill(job)
    texts = []
    for f in (job.out, job.err):
        f.seek(0)
        texts.append(f.read().decode(errors="replace"))
        f.close()
    if job.cleanup:
        shutil.rmtree(job.cleanup, ignore_errors=True)
    return subprocess.CompletedProcess(job.proc.args, job.proc.returncode, texts[0], texts[1])


def _kill(job: _Job) -> None:
    try:
        os.killpg(job.proc.pid, 9)
    except OSError:
        pass
    job.proc.wait()


def stop_all() -> None:
    """End what no test collected (an interrupted session)."""
    for key in list(_jobs):
        job = _jobs.pop(key)
        if job.proc.poll() is None:
            _kill(job)
        job.out.close()
        job.err.close()
        if job.cleanup:
            shutil.rmtree(job.cleanup, ignore_errors=True)
