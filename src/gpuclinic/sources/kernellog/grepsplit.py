"""Two greps over a big plain log, taking turns stripe by stripe, so a machine with a second core scans it
in about half of one grep's time while the parser keeps up.

The file is cut into stripes of about ``STRIPE_BYTES`` (64 MiB), each cut at a line start; stripes 0,
2, 4... go to the first grep, 1, 3, 5... to the second.  grep has no byte-range option, so a feeder thread
per grep splices its stripes into that grep's stdin (``os.splice``: page references, no copy through
Python), and the byte offsets grep prints, counted in its own stream, are mapped back to file offsets.  The
caller sees one grep's records in file order.

Why stripes and not halves: the parser takes the records in file order.  With halves it cannot start on
the second half's records before the first grep has finished, and it is about as slow as one grep: on a
machine where the greps and the parser share two cores its work on the second half is left for the end.
With stripes both greps stay a stripe or so ahead of it.

The grep that is not being read meanwhile writes into its stdout pipe (raised to ``_PIPE_BYTES``); when
that is full it waits: a loss of overlap, never a deadlock (each grep depends only on its own feeder).

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
    from typing import IO

SPLIT_MIN_BYTES = 128 << 20  # below this a second grep and its feeders cost more than they save
STRIPE_BYTES = 64 << 20  # the parser waits at each stripe's end for grep's next output block (~4 KiB):
# 8 MiB stripes measured slower than 32-128 MiB on two quiet cores; 64 MiB keeps 16 turns per GiB
_PIPE_BYTES = 1 << 20  # pipes in and out of each grep; Linux's default cap for unprivileged users
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux)
_NEWLINE_SEARCH = 1 << 20  # how far past a nominal stripe end a line start is looked for


def usable(size: int) -> bool:
    if size < SPLIT_MIN_BYTES or not hasattr(os, "splice") or not hasattr(os, "posix_spawn"):
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) > 1


def line_start_after(fd: int, pos: int, size: int) -> int | None:
    """The first line start after byte ``pos`` (None: none within ``_NEWLINE_SEARCH``, or at the end)."""
    at = pos
    while at < min(size, pos + _NEWLINE_SEARCH):
        block = os.pread(fd, 4096 if at == pos else 1 << 16, at)  # lines are short: a page first
        if not block:
            return None
        nl = block.find(b"\n")
        if nl != -1:
            start = at + nl + 1
            return start if start < size else None
        at += len(block)
    return None


def stripes(fd: int, size: int, stripe: int | None = None) -> list[tuple[int, int]]:
    """``[start, end)`` byte ranges covering the file, each cut at a line start (a line longer than
    ``_NEWLINE_SEARCH`` makes its stripe longer)."""
    step = stripe or STRIPE_BYTES
    out: list[tuple[int, int]] = []
    start = 0
    nominal = step
    while nominal < size:
        cut = line_start_after(fd, nominal - 1, size)  # a line starting exactly at `nominal` counts
        if cut is None:  # the end of the file, or one enormous line: its stripe goes on
            nominal += step
            continue
        if cut > start:
            out.append((start, cut))
            start = cut
        nominal = max(nominal + step, cut + 1)
    out.append((start, size))
    return out


def start(
    path: str, argv: list[str], size: int
) -> tuple[Iterator[tuple[int, bytes]], Callable[[bool], None]] | None:
    """Start both greps (``argv`` without a file operand); (records in file order, close) or None."""
    fd = os.open(path, os.O_RDONLY)
    try:
        ranges = stripes(fd, size)
    finally:
        os.close(fd)
    if len(ranges) < 2:
        return None
    procs, feeders = _spawn(path, argv, ranges)
    for f in feeders:
        f.start()

    def close(ok: bool) -> None:
        _close(procs, feeders, ok)

    return _records(procs, ranges), close


def _spawn(path: str, argv: list[str], ranges: list[tuple[int, int]]) -> tuple[list[_Spawned], list[_Feeder]]:
    """Both greps, each reading a pipe its (not yet started) feeder will fill with every other stripe."""
    import fcntl

    procs: list[_Spawned] = []
    feeders: list[_Feeder] = []
    try:
        for k in (0, 1):
            r, w = os.pipe()
            try:
                _grow(fcntl, w)
                proc = _Spawned(argv, stdin_fd=r)
            except BaseException:
                os.close(w)
                raise
            finally:
                os.close(r)
            procs.append(proc)
            assert proc.stdout is not None
            _grow(fcntl, proc.stdout.fileno())
            feeders.append(_Feeder(path, w, ranges[k::2]))
    except BaseException:
        for p in procs:
            _kill(p)
        for f in feeders:
            os.close(f.w)
        raise
    return procs, feeders


def _close(procs: list[_Spawned], feeders: list[_Feeder], ok: bool) -> None:
    """Reap both greps and join the feeders; after a full read, raise if any of them failed."""
    if not ok:  # stop both greps first: the feeders then get EPIPE
        for p in procs:
            if p.poll() is None:
                p.kill()
    for f in feeders:
        f.join()
    if not ok:
        for p in procs:
            _kill(p)
        return
    failed = []
    for p in procs:  # reap both, even when the first failed
        try:
            _finish(p)
        except GrepFallback as e:
            failed.append(e)
    if failed:
        raise failed[0]
    for f in feeders:
        if f.error is not None:  # that grep saw an early end: its stripes may be incomplete
            raise GrepFallback(f"feeding a grep failed: {f.error}")


def _grow(fcntl: object, fd: int) -> None:
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)  # type: ignore[attr-defined]
    except OSError:
        pass  # a smaller pipe only means more switches


class _Stream:
    """One grep's output: (offset in its own input stream, line) records, with one record of look-ahead."""

    def __init__(self, out: IO[bytes]) -> None:
        self.lines = iter(out)
        self.head: tuple[int, bytes] | None = None
        self.done = False

    def peek(self) -> tuple[int, bytes] | None:
        if self.head is None and not self.done:
            raw = next(self.lines, None)
            if raw is None:
                self.done = True
            else:
                colon = raw.find(b":")
                if colon <= 0:
                    raise GrepFallback("unexpected grep output")
                self.head = (int(raw[:colon]), raw[colon + 1 :].rstrip(b"\n"))
        return self.head


def _records(procs: list[_Spawned], ranges: list[tuple[int, int]]) -> Iterator[tuple[int, bytes]]:
    """Each stripe's records from the grep that read it, offsets made file offsets."""
    streams = []
    for p in procs:
        assert p.stdout is not None
        streams.append(_Stream(p.stdout))
    fed = [0, 0]  # bytes of each grep's stream before the current stripe
    for i, (lo, hi) in enumerate(ranges):
        s = streams[i & 1]
        base = fed[i & 1]
        end = base + hi - lo
        shift = lo - base
        while True:
            rec = s.peek()
            if rec is None or rec[0] >= end:
                break
            s.head = None
            yield rec[0] + shift, rec[1]
        fed[i & 1] = end
    for s in streams:
        if s.peek() is not None:
            raise GrepFallback("grep printed more than it was fed")


class _Feeder:
    """Splices byte ranges of the file, in order, into one grep's stdin, then closes it."""

    def __init__(self, path: str, w: int, ranges: list[tuple[int, int]]) -> None:
        import threading

        self.path, self.w, self.ranges = path, w, ranges
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
                for pos, end in self.ranges:
                    while pos < end:
                        n = os.splice(src, self.w, end - pos, offset_src=pos)
                        if n == 0:
                            raise OSError("the file ended early")
                        pos += n
            finally:
                os.close(src)
        except OSError as e:  # EPIPE when the grep was stopped; anything else is a failed feed
            self.error = str(e) or type(e).__name__
        finally:
            os.close(self.w)
