"""Following a live kernel log (/dev/kmsg, journalctl -k -f, or files surviving rotation)."""

from __future__ import annotations

import datetime as _dt
import errno
import io
import os
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources.kernellog.collect import (
    SYSLOG_FILES,
)
from gpuclinic.sources.kernellog.formats import (
    _is_candidate,
    _wants_context,
)
from gpuclinic.sources.kernellog.keywords import (
    CONTEXT_LINES,
    MAX_CARRY,
    WINDOW,
)
from gpuclinic.sources.kernellog.parse import (
    KernelLogParser,
)
from gpuclinic.sources.kernellog.scan import (
    _decode,
)

# --------------------------------------------------------------------------------------------------
# Following a live log
# --------------------------------------------------------------------------------------------------


def follow(paths: Sequence[str] | None, stop: threading.Event, from_end: bool = True,
           poll_s: float = 0.25) -> Iterator[KernelEvent]:
    """Yield events as kernel log lines are written, until ``stop`` is set.

    With ``paths`` it tails those files, surviving rotation and truncation.  Without, it reads
    ``/dev/kmsg`` if permitted, else ``journalctl -k -f``, else tails the syslog files.
    """
    if paths:
        yield from _follow_files(list(paths), stop, from_end, poll_s)
        return
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            yield from _follow_kmsg(fd, stop, from_end, poll_s)
        finally:
            os.close(fd)
        return
    if shutil.which("journalctl"):
        argv = ["journalctl", "-k", "-f", "--no-pager", "-q", "-o", "short-iso"]
        if from_end:
            argv += ["-n", "0"]
        try:
            yield from _follow_command(argv, stop, poll_s)
            return
        except OSError:
            pass
    files = [p for p in SYSLOG_FILES if os.access(p, os.R_OK)]
    if files:
        yield from _follow_files(files, stop, from_end, poll_s)


def _follow_kmsg(fd: int, stop: threading.Event, from_end: bool, poll_s: float) -> Iterator[KernelEvent]:
    if from_end:
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except OSError:
            pass
    parser = KernelLogParser(origin="/dev/kmsg")
    idle = 0.0
    while not stop.is_set():
        try:
            rec = os.read(fd, 8192)
        except BlockingIOError:
            yield from parser.flush() if idle >= 1.0 else ()
            if idle >= 1.0:
                idle = 0.0
            select.select([fd], [], [], poll_s)
            idle += poll_s
            continue
        except OSError as e:
            if e.errno == errno.EPIPE:  # records overwritten before we read them
                continue
            raise
        if not rec:
            time.sleep(poll_s)
            continue
        idle = 0.0
        # one record per read from /dev/kmsg; lines starting with a space (" DEVICE=+pci:...") are metadata
        for text in rec.decode("utf-8", "replace").splitlines():
            if text and not text.startswith(" ") and (_is_candidate(text) or parser._aer is not None):
                yield from parser.feed(text)
    yield from parser.flush()


def _follow_command(argv: list[str], stop: threading.Event, poll_s: float) -> Iterator[KernelEvent]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    parser = KernelLogParser(origin=" ".join(argv[:3]))
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = b""
    idle = 0.0
    try:
        while not stop.is_set():
            r, _, _ = select.select([fd], [], [], poll_s)
            if not r:
                idle += poll_s
                if idle >= 1.0:
                    yield from parser.flush()
                    idle = 0.0
                if proc.poll() is not None:
                    break
                continue
            data = os.read(fd, 65536)
            if not data:
                break
            idle = 0.0
            buf += data
            *lines, buf = buf.split(b"\n")
            for ln in lines:
                s = _decode(ln)
                if _is_candidate(s) or parser._aer is not None:
                    yield from parser.feed(s)
            if len(buf) > MAX_CARRY:
                buf = buf[-WINDOW:]
        yield from parser.flush()
    finally:
        proc.kill()
        proc.wait()


@dataclass
class _Tail:
    path: str
    fh: IO[bytes] | None = None
    ino: int | None = None
    buf: bytes = b""
    parser: KernelLogParser | None = None
    ctx: int = 0


def _follow_files(paths: list[str], stop: threading.Event, from_end: bool,
                  poll_s: float) -> Iterator[KernelEvent]:
    tails = [_Tail(p, parser=KernelLogParser(origin=p, year=_dt.datetime.now().year)) for p in paths]
    first = True
    idle = 0.0
    while not stop.is_set():
        got = False
        for t in tails:
            yield_from = _tail_step(t, from_end and first)
            for ev in yield_from:
                got = True
                yield ev
        first = False
        if not got:
            idle += poll_s
            if idle >= 1.0:
                for t in tails:
                    assert t.parser is not None
                    yield from t.parser.flush()
                idle = 0.0
            stop.wait(poll_s)
        else:
            idle = 0.0
    for t in tails:
        if t.fh:
            t.fh.close()
        assert t.parser is not None
        yield from t.parser.flush()


def _tail_step(t: _Tail, seek_end: bool) -> list[KernelEvent]:
    """Read what was appended to one followed file; reopen it when rotated or truncated."""
    out: list[KernelEvent] = []
    try:
        st = os.stat(t.path)
    except OSError:
        st = None
    if t.fh is not None and st is not None:
        try:
            pos = t.fh.tell()
        except (OSError, ValueError):
            pos = 0
        if st.st_ino != t.ino or st.st_size < pos:
            # rotated or truncated: finish the old file, then start the new one from its beginning
            out.extend(_tail_read(t))
            t.fh.close()
            t.fh = None
            t.buf = b""
    if t.fh is None and st is not None:
        try:
            t.fh = open(t.path, "rb")
        except OSError:
            return out
        t.ino = os.fstat(t.fh.fileno()).st_ino
        if seek_end:
            t.fh.seek(0, io.SEEK_END)
    if t.fh is not None:
        out.extend(_tail_read(t))
    return out


def _tail_read(t: _Tail) -> list[KernelEvent]:
    out: list[KernelEvent] = []
    assert t.fh is not None and t.parser is not None
    while True:
        data = t.fh.read(1 << 20)
        if not data:
            break
        t.buf += data
        if b"\n" not in t.buf:
            if len(t.buf) > MAX_CARRY:
                t.buf = t.buf[-WINDOW:]
            continue
        *lines, t.buf = t.buf.split(b"\n")
        for ln in lines:
            s = _decode(ln)
            if _is_candidate(s):
                t.ctx = CONTEXT_LINES if _wants_context(s) else t.ctx
            elif t.ctx > 0:
                t.ctx -= 1
            else:
                continue
            out.extend(t.parser.feed(s))
    return out


# --------------------------------------------------------------------------------------------------
# A window: what was written between two moments (``run`` reads it when an attempt ends)
# --------------------------------------------------------------------------------------------------


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
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            self.why_not = f"journalctl failed: {e}"
            return []
        if r.returncode != 0:
            self.why_not = f"journalctl: {(r.stderr.strip().splitlines() or ['failed'])[-1]}"
            return []
        return r.stdout.splitlines()
