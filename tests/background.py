"""Long self-contained checks started when the session starts, judged by their test.

mypy over the whole tree and the README's quick start (a venv and a pip install) take tens of seconds
of CPU and disk each and share nothing with the other tests (tests/conftest.py's BACKGROUND names them).

Most of the suite waits on real servers, scrapes and time-scaled timelines, so CI's cores are idle for
part of the run.  A check started here at nice 19 uses that idle time; its test then asserts on the
finished result exactly as if it had run the command itself.  Niced, it gives way whenever a test needs
the cores (timing-sensitive tests are not slowed by it).

The suite runs in two pytest-xdist workers (scripts/test), each collecting every test, and the test
that reads a job may run in either.  So a job lives in files, not in one process: the session's
folder (made by the controller, or by the only process without xdist, and named to its workers by
:data:`ENV`) holds one folder per job with its process group, its output and its exit status; the
first worker to :func:`claim` a job starts it, and whichever worker runs its test waits for the
status file.  The process that made the folder ends what is left and removes it at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ENV = "GPUCLINIC_TEST_BACKGROUND"

# runs the job with its output in files and writes its exit status last (atomically, by rename), so a
# reader in another process knows when it is done; the job's process group is this shell's
_WRAP = 'o=$1 e=$2 r=$3; shift 3; "$@" >"$o" 2>"$e"; echo $? >"$r.part" && mv "$r.part" "$r"'

_owner = False  # this process made the session's folder: it cleans up
_procs: list[subprocess.Popen[bytes]] = []  # the jobs this process started (kept: no ResourceWarning)


def begin_session() -> None:
    """Make the session's folder unless a parent process (xdist's controller) already did."""
    global _owner
    if os.environ.get(ENV):
        return
    os.environ[ENV] = tempfile.mkdtemp(prefix="gpuclinic-background-")
    _owner = True


def _dir(key: str) -> Path:
    root = os.environ.get(ENV)
    if not root:  # a test run without conftest's pytest_configure: no session folder yet
        begin_session()
        root = os.environ[ENV]
    return Path(root) / key


def claim(key: str) -> bool:
    """True for the one process of the session that is to start ``key`` (atomic across workers)."""
    d = _dir(key)
    d.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(d / "claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def workdir(key: str) -> Path:
    """A folder for ``key``'s job to work in, the same in every worker; removed with the session."""
    w = _dir(key) / "work"
    w.mkdir(parents=True, exist_ok=True)
    return w


def start(key: str, argv: list[str], cwd: Path, *, env: dict[str, str] | None = None) -> None:
    """Start ``argv`` in the background under ``key`` (once per session), niced, in its own process group."""
    d = _dir(key)
    d.mkdir(parents=True, exist_ok=True)
    if (d / "pid").exists():
        return
    nice = shutil.which("nice")
    cmd = [nice, "-n", "19", *argv] if nice else argv
    wrap = ["sh", "-c", _WRAP, "sh", str(d / "out"), str(d / "err"), str(d / "rc"), *cmd]
    proc = subprocess.Popen(wrap, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    _procs.append(proc)
    _autogroup_nice(proc.pid, 19)
    (d / "pid.part").write_text(str(proc.pid))
    (d / "pid.part").rename(d / "pid")


def result(key: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
    """The finished run started under ``key``, or None when none was started (the test then runs it).

    Its test is waiting now, so the job gets its normal priority back (as root; else it stays niced)."""
    d = _dir(key)
    if not (d / "pid").exists():
        return None
    pgid = int((d / "pid").read_text())
    try:
        os.setpriority(os.PRIO_PGRP, pgid, 0)
    except OSError:
        pass
    _autogroup_nice(pgid, 0)
    deadline = time.monotonic() + timeout
    while not (d / "rc").exists():
        if time.monotonic() > deadline or not _alive(pgid):
            _kill(pgid)
            break
        time.sleep(0.1)
    rc = int((d / "rc").read_text()) if (d / "rc").exists() else -9
    texts = [(d / f).read_text(errors="replace") if (d / f).exists() else "" for f in ("out", "err")]
    return subprocess.CompletedProcess(["sh", "-c", key], rc, texts[0], texts[1])


def _autogroup_nice(leader: int, nice: int) -> None:
    """The nice value of the job's scheduler autogroup (Linux with ``sched_autogroup_enabled``, as on
    Debian and Ubuntu): a job in a session of its own is an autogroup of its own, which gets the same
    CPU share as the tests' autogroup whatever its processes' nice value; so the group is niced too."""
    try:
        Path(f"/proc/{leader}/autogroup").write_text(f"{nice}\n")
    except OSError:  # no autogroups (the process nice value then applies), or not allowed
        pass


def _alive(pgid: int) -> bool:
    """Whether the job's shell still runs (it writes the status file before it ends)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, 9)
    except OSError:
        pass


def stop_all() -> None:
    """In the process that made the session's folder: end every job still running (an interrupted
    session, or one whose test was not run) and remove the folder."""
    global _owner
    root = os.environ.get(ENV)
    if not _owner or not root:
        return
    for pid in Path(root).glob("*/pid"):
        _kill(int(pid.read_text()))
    shutil.rmtree(root, ignore_errors=True)
    os.environ.pop(ENV, None)
    _owner = False
