"""What the kernel said while a job ran: GPU events (XID, fell off the bus) and OOM-killer kills.

Two complementary paths:

* :class:`KernelWindow` (from the kernel-log subsystem) remembers where each log stood when an attempt started
and, when it ends,
  reads exactly what was written since (files by byte offset surviving rotation, ``/dev/kmsg`` by
  timestamp, else ``journalctl -k --since``).  Deterministic, so classification never races a poll.
* :class:`LiveKernelFollower` runs :func:`gpuclinic.sources.kernellog.follow.follow` in a thread so a
  fault is known - and notified - while the job is still running.

GPU lines are parsed by the kernel-log subsystem (:mod:`gpuclinic.sources.kernellog`), the same parser
``doctor``, ``explain`` and ``watch`` use.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog import parse_lines
from gpuclinic.sources.kernellog.follow import KernelWindow as KernelWindow  # re-exported: run uses it
from gpuclinic.sources.kernellog.follow import follow

# "Out of memory: Killed process 7899 (python) total-vm:...", "Memory cgroup out of memory: Killed process
# ...",
# older "Out of memory: Kill process 89746 (python) score 1031 or sacrifice child" + "Killed process 89879
# (python) ..."
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
