"""Process plumbing: own process group, subreaper, output pump, group kill, leftover cleanup.

The job runs in its own session/process group so one ``killpg`` reaches torchrun and all its
workers; we also become a *child subreaper* (Linux) so processes that escape the group with
``setsid`` or double-fork are re-parented to us, stay visible as our descendants and get cleaned up.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

import psutil

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Ask Linux to re-parent orphaned descendants to us (PR_SET_CHILD_SUBREAPER)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def reap_zombies() -> None:
    """Collect exit statuses of re-parented orphans (only call when no job child is running)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except OSError:
            return
        if pid == 0:
            return


def killpg(pgid: int, sig: int) -> bool:
    """Signal a whole process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class Tracker:
    """Remembers every process of the job seen (psutil objects, safe against pid reuse).

    The job's processes are our descendants (orphans come back to us as subreaper) except the
    helpers we started ourselves before the job (e.g. ``journalctl -f`` following the kernel log),
    which :meth:`reset` records so they are never counted or killed.
    """

    def __init__(self) -> None:
        self.procs: dict[int, psutil.Process] = {}
        self.pids: set[int] = set()
        self._me = psutil.Process()
        self._helpers: set[int] = set()

    def scan(self) -> None:
        try:
            kids = self._me.children(recursive=True)
        except psutil.Error:
            return
        helper_tree = set(self._helpers)
        for h in self._helpers:
            try:
                helper_tree.update(c.pid for c in psutil.Process(h).children(recursive=True))
            except psutil.Error:
                continue
        for p in kids:
            if p.pid in helper_tree:
                continue
            if p.pid not in self.procs:
                self.procs[p.pid] = p
                self.pids.add(p.pid)

    def alive(self) -> list[psutil.Process]:
        out = []
        for p in self.procs.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def reset(self) -> None:
        """Forget the previous attempt; our current children are helpers, not the job."""
        self.procs.clear()
        self.pids.clear()
        try:
            self._helpers = {p.pid for p in self._me.children(recursive=False)}
        except psutil.Error:
            self._helpers = set()


def cleanup(pgid: int, tracker: Tracker, grace_s: float) -> list[int]:
    """Terminate whatever is left of the job (group members and tracked descendants).

    SIGTERM first, SIGKILL after ``grace_s``.  Returns the pids that had to be killed.
    """
    tracker.scan()
    left = tracker.alive()
    if not left and not group_alive(pgid):
        return []
    killpg(pgid, signal.SIGTERM)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        reap_zombies()
        if not tracker.alive() and not _group_has_live(pgid):
            break
        time.sleep(0.05)
    killed = [p.pid for p in tracker.alive()]
    killpg(pgid, signal.SIGKILL)
    for p in tracker.alive():
        with contextlib.suppress(psutil.Error):
            p.kill()
    end = time.monotonic() + 2.0
    while time.monotonic() < end and tracker.alive():
        reap_zombies()
        time.sleep(0.05)
    reap_zombies()
    return killed


def _group_has_live(pgid: int) -> bool:
    """True when a non-zombie process is still in the group (zombies cannot be killed further)."""
    if not group_alive(pgid):
        return False
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


class OutputPump:
    """Copies a child's stdout/stderr as raw bytes (progress bars intact) to ours and to the log.

    Keeps the last ``tail_bytes`` of combined output for classification and the time of the last
    byte for hang detection.
    """

    def __init__(self, log: BinaryIO | None, *, echo: bool = True, tail_bytes: int = 256 * 1024) -> None:
        self.log = log
        self.echo = echo
        self.tail_bytes = tail_bytes
        self._tail = bytearray()
        self._partial: dict[int | None, bytearray] = {}  # per stream: a line not finished yet
        self._lock = threading.Lock()
        self.last_output = time.monotonic()
        self.bytes = 0
        self._threads: list[threading.Thread] = []
        self._broken: set[int] = set()

    def reset(self) -> None:
        with self._lock:
            self._tail = bytearray()
            self._partial = {}
            self.last_output = time.monotonic()

    def attach(self, fd: int, out_fd: int) -> None:
        t = threading.Thread(
            target=self._pump, args=(fd, out_fd), name=f"gpuclinic-pump-{out_fd}", daemon=True
        )
        t.start()
        self._threads.append(t)

    def _pump(self, fd: int, out_fd: int) -> None:
        try:
            while True:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.feed(data, out_fd)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)

    def feed(self, data: bytes, out_fd: int | None = None) -> None:
        with self._lock:
            self.last_output = time.monotonic()
            self.bytes += len(data)
            self._add_lines(data, out_fd)
            if self.log is not None:
                try:
                    self.log.write(data)
                    self.log.flush()
                except (OSError, ValueError):
                    self.log = None
        if self.echo and out_fd is not None and out_fd not in self._broken:
            view = memoryview(data)
            try:
                while view:
                    n = os.write(out_fd, view)
                    view = view[n:]
            except BrokenPipeError:
                self._broken.add(out_fd)  # our reader went away: keep logging, stop echoing
            except OSError:
                self._broken.add(out_fd)

    def _add_lines(self, data: bytes, stream: int | None) -> None:
        """Add ``data`` to the classification tail a whole line at a time, per stream: a traceback written
        to stderr in pieces ("ValueError", ": loss is NaN\\n") stays one line when the job's stdout prints
        "step 3" in between (the echo and the log keep the bytes in arrival order, as a terminal shows them).
        A stream's unfinished line goes in at 64 KiB (a progress bar redrawn with carriage returns)."""
        buf = self._partial.setdefault(stream, bytearray())
        buf += data
        end = buf.rfind(b"\n") + 1
        if len(buf) > 65536:
            end = len(buf)
        if end:
            self._tail += buf[:end]
            del buf[:end]
            if len(self._tail) > self.tail_bytes:
                del self._tail[: len(self._tail) - self.tail_bytes]

    def note(self, text: str) -> None:
        """A gpuclinic line for the log file only."""
        with self._lock:
            if self.log is not None:
                with contextlib.suppress(OSError, ValueError):
                    self.log.write(text.encode() + b"\n")
                    self.log.flush()

    def join(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        done = not any(t.is_alive() for t in self._threads)
        self._threads = [t for t in self._threads if t.is_alive()]
        return done

    def tail_text(self) -> str:
        """The last output, whole lines per stream, then each stream's unfinished line (a job killed in the
        middle of printing its error leaves it without a newline)."""
        with self._lock:
            pending = b"".join(bytes(b) + b"\n" for b in self._partial.values() if b)
            return (bytes(self._tail) + pending)[-self.tail_bytes :].decode("utf-8", "replace")


def on_signals(handler: Callable[[int], None], sigs: tuple[int, ...]) -> dict[int, object]:
    """Install ``handler`` for these signals (main thread only); returns the previous handlers."""
    prev: dict[int, object] = {}
    for s in sigs:
        try:
            prev[s] = signal.signal(s, lambda signum, frame: handler(signum))
        except ValueError:  # not the main thread
            pass
    return prev


def restore_signals(prev: dict[int, object]) -> None:
    for s, h in prev.items():
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(s, h)  # type: ignore[arg-type]
