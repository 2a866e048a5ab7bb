"""Two greps over the two halves of a big plain log, so a machine with a second core scans it in about half
of one grep's time.

grep has no byte-range option, so the halves are cut at a line start: the second grep reads the file from
there through its own descriptor (no copy), the first reads the bytes before it spliced into a pipe by a
thread (``os.splice``: page references, no copy through Python).  The second grep's output is drained into
memory while the first's is parsed (up to ``MAX_BUFFERED`` bytes; past that it waits in its pipe), and its
byte offsets, counted from the cut, are made file offsets: the caller sees one grep's records, in file order.

Used only when it can pay: a file of at least ``SPLIT_MIN_BYTES``, two usable cores, Linux ``splice``.  A
feeder failure raises :class:`.grepscan.GrepFallback`, so the scan starts over on the memmem path rather
than miss lines.
"""

from __future__ import annotations

import os

from gpuclinic.sources.kernellog.grepscan import GrepFallback, _finish, _kill, _Spawned

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Iterator

SPLIT_MIN_BYTES = 128 << 20  # below this a second grep and its feeder cost more than they save
MAX_BUFFERED = 16 << 20  # of the second grep's output held while the first half is parsed (then it waits)
_PIPE_BYTES = 1 << 20  # the feeder's pipe (fewer, larger splices); Linux's default cap for unprivileged users
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux)


def usable(size: int) -> bool:
    if size < SPLIT_MIN_BYTES or not hasattr(os, "splice") or not hasattr(os, "posix_spawn"):
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) > 1


def cut_point(fd: int, size: int) -> int | None:
    """The first line start at or after the middle of the file (None: no newline near it)."""
    mid = size // 2
    block = os.pread(fd, 1 << 20, mid)
    nl = block.find(b"\n")
    if nl == -1 or mid + nl + 1 >= size:
        return None
    return mid + nl + 1


def start(
    path: str, argv: list[str], size: int
) -> tuple[Iterator[tuple[int, bytes]], Callable[[bool], None]] | None:
    """Start both greps (``argv`` without a file operand); (records in file order, close) or None."""
    fd = os.open(path, os.O_RDONLY)
    try:
        cut = cut_point(fd, size)
        if cut is None:
            return None
        os.lseek(fd, cut, os.SEEK_SET)
        second = _Spawned(argv, stdin_fd=fd)  # reads the file itself from the cut
    finally:
        os.close(fd)
    try:
        r, w = os.pipe()
        try:
            import fcntl

            fcntl.fcntl(w, _F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:
            pass  # a smaller pipe only means more splices
        try:
            first = _Spawned(argv, stdin_fd=r)
        finally:
            os.close(r)
    except BaseException:
        _kill(second)
        raise
    feeder = _Feeder(path, w, cut)
    drain = _Drain(second)
    feeder.start()
    drain.start()
    procs = (first, second)

    def close(ok: bool) -> None:
        if not ok:  # stop both greps first: the feeder then gets EPIPE and the drain EOF
            for p in procs:
                if p.poll() is None:
                    p.kill()
        feeder.join()
        drain.join()  # before any descriptor it reads is closed
        if ok:
            failed = []
            for p in procs:  # reap both, even when the first failed
                try:
                    _finish(p)
                except GrepFallback as e:
                    failed.append(e)
            if failed:
                raise failed[0]
            if feeder.error is not None:
                raise GrepFallback(f"feeding the first half failed: {feeder.error}")
        else:
            for p in procs:
                _kill(p)

    return _records(first, second, feeder, drain, cut), close


def _records(
    first: _Spawned, second: _Spawned, feeder: _Feeder, drain: _Drain, cut: int
) -> Iterator[tuple[int, bytes]]:
    assert first.stdout is not None and second.stdout is not None
    for raw in first.stdout:
        yield _record(raw, 0)
    feeder.join()
    if feeder.error is not None:  # the first grep saw an early end: its half may be incomplete
        raise GrepFallback(f"feeding the first half failed: {feeder.error}")
    drain.join()
    held = b"".join(drain.chunks)
    drain.chunks.clear()
    tail = b""
    if held:
        lines = held.split(b"\n")
        tail = lines.pop()  # an unfinished line: the rest is still in the pipe
        for raw in lines:
            yield _record(raw, cut)
    for raw in second.stdout:
        if tail:
            raw, tail = tail + raw, b""
        yield _record(raw, cut)
    if tail:
        yield _record(tail, cut)


def _record(raw: bytes, base: int) -> tuple[int, bytes]:
    colon = raw.find(b":")
    if colon <= 0:
        raise GrepFallback("unexpected grep output")
    return base + int(raw[:colon]), raw[colon + 1 :].rstrip(b"\n")


class _Feeder:
    """Splices bytes [0, end) of the file into the first grep's stdin, then closes it."""

    def __init__(self, path: str, w: int, end: int) -> None:
        import threading

        self.path, self.w, self.end = path, w, end
        self.error: str | None = None
        self.thread: threading.Thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self) -> None:
        self.thread.join()

    def _run(self) -> None:
        try:
            src = os.open(self.path, os.O_RDONLY)
            try:
                pos = 0
                while pos < self.end:
                    n = os.splice(src, self.w, self.end - pos, offset_src=pos)
                    if n == 0:
                        raise OSError("the file ended early")
                    pos += n
            finally:
                os.close(src)
        except OSError as e:  # EPIPE when the grep was stopped; anything else is a failed feed
            self.error = str(e) or type(e).__name__
        finally:
            os.close(self.w)


class _Drain:
    """Reads the second grep's output into memory while the first half is parsed (at most MAX_BUFFERED)."""

    def __init__(self, proc: _Spawned) -> None:
        import threading

        self.proc = proc
        self.chunks: list[bytes] = []
        self.thread: threading.Thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self) -> None:
        self.thread.join()

    def _run(self) -> None:
        out = self.proc.stdout
        assert out is not None
        held = 0
        try:
            fd = out.fileno()  # nothing was read through the buffered reader yet: the fd is in step
            while held < MAX_BUFFERED:
                b = os.read(fd, 1 << 16)
                if not b:
                    return
                self.chunks.append(b)
                held += len(b)
        except (OSError, ValueError):
            return  # closed under us (the scan was stopped)
