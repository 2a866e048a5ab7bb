"""Long CPU-bound checks (mypy over the whole tree) started when the session starts, judged by their test.

Most of the suite waits on real servers, scrapes and time-scaled timelines, so one of CI's two cores
is idle for much of the run.  A check started here at nice 19 uses that idle time; its test then
asserts on the finished result exactly as if it had run the command itself.  Niced, it gives way
whenever a test needs both cores (timing-sensitive tests are not slowed by it).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass
class _Job:
    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    err: IO[bytes]


_jobs: dict[str, _Job] = {}


def start(key: str, argv: list[str], cwd: Path) -> None:
    """Start ``argv`` in the background under ``key`` (once per session)."""
    if key in _jobs:
        return
    nice = shutil.which("nice")
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    cmd = [nice, "-n", "19", *argv] if nice else argv
    _jobs[key] = _Job(subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err), out, err)


def result(key: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """The finished run started under ``key``, or None when none was started (the test then runs it)."""
    job = _jobs.pop(key, None)
    if job is None:
        return None
    deadline = time.monotonic() + timeout
    try:
        job.proc.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        job.proc.kill()
        job.proc.wait()
    texts = []
    for f in (job.out, job.err):
        f.seek(0)
        texts.append(f.read().decode(errors="replace"))
        f.close()
    return subprocess.CompletedProcess(job.proc.args, job.proc.returncode, texts[0], texts[1])


def stop_all() -> None:
    """End what no test collected (an interrupted session)."""
    for key in list(_jobs):
        job = _jobs.pop(key)
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()
        job.out.close()
        job.err.close()
