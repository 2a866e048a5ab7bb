"""What the kernel said while a job ran: GPU events (XID, fell off the bus) and OOM-killer kills.

Two complementary paths:

* :class:`KernelWindow` remembers where each log stood when an attempt started and, when it ends,
  reads exactly what was written since (files by byte offset surviving rotation, ``/dev/kmsg`` by
  timestamp, else ``journalctl -k --since``).  Deterministic, so classification never races a poll.
* :class:`LiveKernelFollower` runs :func:`gpuclinic.sources.kernellog.follow.follow` in a thread so a
  fault is known - and notified - while the job is still running.

GPU lines are parsed by the kernel-log subsystem (:mod:`gpuclinic.sources.kernellog`), the same parser
``doctor``, ``explain`` and ``watch`` use.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog import parse_lines
from gpuclinic.sources.kernellog.follow import follow

# "Out of memory: Killed process 7899 (python) total-vm:...", "Memory cgroup out of memory: Killed process ...",
# older "Out of memory: Kill process 89746 (python) score 1031 or sacrifice child" + "Killed process 89879 (python) ..."
_OOM_RES = (
    re.compile(r"(?:Memory cgroup out of memory|Out of memory): Killed process (\d+) \(([^)]*)\)"),
    re.compile(r"\bKilled process (\d+) \(([^)]*)\) total-vm"),
    re.compile(r"oom-kill:.*?task=([^,]+),pid=(\d+)"),
)

@dataclass(frozen=True)
class OomKill:
    pid: int
    process: str
    line: str


def find_oom_kills(lines: Iterable[str]) -> list[OomKill]:
    """OOM-killer victims named in kernel log lines (one entry per pid)."""
    out: dict[int, OomKill] = {}
    for line in lines:
        for i, rx in enumerate(_OOM_RES):
            m = rx.search(line)
            if not m:
                continue
            if i == 2:
                pid, name = int(m.group(2)), m.group(1)
            else:
                pid, name = int(m.group(1)), m.group(2)
            out.setdefault(pid, OomKill(pid, name, line.strip()))
            break
    return list(out.values())


def parse_gpu_events(lines: Sequence[str], origin: str | None = None) -> list[KernelEvent]:
    """GPU events in these lines (the kernel-log subsystem's parser: every prefix format)."""
    return list(parse_lines(lines, origin))


@dataclass
class _FileMark:
    path: str
    ino: int | None
    offset: int


class KernelWindow:
    """Reads the kernel log written between :meth:`mark` and :meth:`read`.

    ``paths`` are log files (``--kernel-log``); with none, the live kernel ring buffer is used
    (``/dev/kmsg``, else ``journalctl -k``).  ``why_not`` explains when nothing could be read.
    """

    def __init__(self, paths: Sequence[str] = ()) -> None:
        self.paths = list(paths)
        self._files: list[_FileMark] = []
        self._t_wall = 0.0
        self._t_mono = 0.0
        self.why_not: str | None = None

    def mark(self) -> None:
        self._t_wall = time.time()
        self._t_mono = time.monotonic()
        self._files = []
        for p in self.paths:
            try:
                st = os.stat(p)
                self._files.append(_FileMark(p, st.st_ino, st.st_size))
            except OSError:
                self._files.append(_FileMark(p, None, 0))  # may appear later

    def read(self) -> list[str]:
        """Lines written since :meth:`mark` (bounded to the last 20,000)."""
        lines: list[str] = []
        if self.paths:
            for fm in self._files:
                lines.extend(self._read_file(fm))
        else:
            lines = self._read_live()
        return lines[-20000:]

    def _read_file(self, fm: _FileMark) -> list[str]:
        try:
            st = os.stat(fm.path)
        except OSError as e:
            self.why_not = f"cannot read {fm.path}: {e.strerror}"
            return []
        start = fm.offset if (fm.ino == st.st_ino and st.st_size >= fm.offset) else 0  # rotated/truncated
        try:
            with open(fm.path, "rb") as f:
                f.seek(start)
                data = f.read(64 * 1024 * 1024)
        except OSError as e:
            self.why_not = f"cannot read {fm.path}: {e.strerror}"
            return []
        return data.decode("utf-8", "replace").splitlines()

    def _read_live(self) -> list[str]:
        lines = self._read_kmsg()
        if lines is not None:
            return lines
        return self._read_journal()

    def _read_kmsg(self) -> list[str] | None:
        try:
            fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
        # kmsg stamps are CLOCK_MONOTONIC-like microseconds since boot; keep a second of slack.
        since_us = int((self._t_mono - 1.0) * 1e6)
        out: list[str] = []
        try:
            while True:
                try:
                    rec = os.read(fd, 16384)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.EPIPE:  # overwritten records: skip ahead
                        continue
                    break
                if not rec:
                    break
                text = rec.decode("utf-8", "replace")
                head, _, msg = text.partition(";")
                fields = head.split(",")
                try:
                    ts = int(fields[2])
                except (IndexError, ValueError):
                    continue
                if ts < since_us:
                    continue
                first = msg.split("\n", 1)[0]
                out.append(f"[{ts / 1e6:12.6f}] {first}")
        finally:
            os.close(fd)
        return out

    def _read_journal(self) -> list[str]:
        exe = shutil.which("journalctl")
        if not exe:
            self.why_not = "no kernel log readable (/dev/kmsg not permitted, no journalctl)"
            return []
        try:
            r = subprocess.run(
                [exe, "-k", "-q", "--no-pager", "-o", "short-iso", f"--since=@{int(self._t_wall) - 1}"],
                capture_output=True, text=True, timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            self.why_not = f"journalctl failed: {e}"
            return []
        if r.returncode != 0:
            self.why_not = f"journalctl: {(r.stderr.strip().splitlines() or ['failed'])[-1]}"
            return []
        return r.stdout.splitlines()


class LiveKernelFollower:
    """Collects GPU kernel events as they are logged, via the kernel-log source's ``follow()``."""

    def __init__(self, paths: Sequence[str] = ()) -> None:
        self.paths = list(paths)
        self.events: list[tuple[float, KernelEvent]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.available = False
        self.why_not: str | None = None

    def start(self) -> LiveKernelFollower:
        self.available = True

        def loop() -> None:
            try:
                for ev in follow(self.paths or None, self._stop):
                    with self._lock:
                        self.events.append((time.time(), ev))
                    if self._stop.is_set():
                        break
            except Exception as e:  # never take the supervisor down
                self.why_not = f"kernel log follow stopped: {type(e).__name__}: {e}"

        self._thread = threading.Thread(target=loop, name="gpuclinic-kernel-follow", daemon=True)
        self._thread.start()
        return self

    def since(self, t_wall: float) -> list[KernelEvent]:
        with self._lock:
            return [ev for t, ev in self.events if t >= t_wall]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._thread.join(timeout=0.5)

