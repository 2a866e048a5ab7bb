"""Streaming scan of kernel-log files of any size (plain, gz, xz, bz2): libc memmem over a reused
buffer finds candidate lines; only those reach the parser, so memory stays flat."""

from __future__ import annotations

import _thread
import io
import os

from gpuclinic.sources.kernellog.grepscan import GrepFallback, grep_binary, is_plain, start_grep_candidates
from gpuclinic.sources.kernellog.keywords import (
    _CONTEXT_LINE_MARKS,
    _CONTEXT_MARKERS,
    _QUALIFY,
    CHUNK,
    CONTEXT_KEYWORDS,
    CONTEXT_LINES,
    MAX_CARRY,
    MAX_LINE_CHARS,
    SCAN_KEYWORDS,
    WINDOW,
)

# scan_path starts grep before anything else: the parser, the decompressors, ctypes and datetime load after
# (their import then overlaps grep's work instead of preceding it), typing and collections not at all.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import datetime as _dt
    from collections.abc import Generator, Iterator
    from typing import IO, Any

    from gpuclinic.facts.kernel import KernelEvent

# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------


def _decompress_errors() -> tuple[type[Exception], ...]:
    import lzma
    import zlib

    return (EOFError, OSError, lzma.LZMAError, ValueError, zlib.error)


def _open_binary(path: str) -> IO[bytes]:
    """Open a plain, gzip, xz or bzip2 file, recognised by its first bytes (not its name).

    A file that only starts like a compressed one (garbage, a truncated header) is read as plain text.
    """
    fh: IO[bytes] = open(path, "rb")
    head = fh.read(6)
    fh.seek(0)
    kind = ("gz" if head[:2] == b"\x1f\x8b" else "xz" if head[:6] == b"\xfd7zXZ\x00"
            else "bz2" if head[:3] == b"BZh" else None)
    if kind is None:
        return fh
    try:
        _decompressor(kind, fh).read(1)
    except _decompress_errors():
        fh.seek(0)
        return fh
    fh.seek(0)
    return _Tolerant(_decompressor(kind, fh), fh)  # type: ignore[return-value]


def _decompressor(kind: str, fh: IO[bytes]) -> IO[bytes]:
    if kind == "gz":
        import gzip

        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    if kind == "xz":
        import lzma

        return lzma.LZMAFile(fh, "rb")
    import bz2

    return bz2.BZ2File(fh, "rb")


class _Tolerant(io.RawIOBase):
    """A decompressing reader that ends quietly at a corrupt or truncated tail (keeps what was read)."""

    def __init__(self, inner: IO[bytes], raw: IO[bytes]) -> None:
        super().__init__()
        self._inner = inner
        self._raw = raw
        self._errors = _decompress_errors()
        self.truncated = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if self.truncated:
            return b""
        want = size if size is not None and size > 0 else 1 << 20
        parts: list[bytes] = []
        got = 0
        read1 = getattr(self._inner, "read1", self._inner.read)
        while got < want:
            try:
                b = read1(want - got)
            except self._errors:
                self.truncated = True
                break
            if not b:
                break
            parts.append(b)
            got += len(b)
        return b"".join(parts)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def _load_memmem() -> Any:
    """libc ``memmem`` through ctypes: 2-4x faster than ``bytes.find`` for short needles (SIMD).

    ``GPUCLINIC_NO_MEMMEM=1`` or a libc without it falls back to ``bytes.find``.
    """
    if os.environ.get("GPUCLINIC_NO_MEMMEM"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        fn = libc.memmem
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return fn


_MEMMEM: list[Any] = []  # loaded on first use (ctypes is not needed when grep scans)


def _memmem() -> Any:
    if not _MEMMEM:
        _MEMMEM.append(_load_memmem())
    return _MEMMEM[0]


class _Searcher:
    """Substring search over one buffer (bytes or a fixed-size bytearray), with libc memmem when available."""

    def __init__(self, buf: bytes | bytearray) -> None:
        self.buf = buf
        self._memmem = _memmem()
        self._base = 0
        if self._memmem is not None:
            import ctypes

            if isinstance(buf, bytearray):
                self._keep: Any = (ctypes.c_char * len(buf)).from_buffer(buf)  # no copy; pins the size
                self._base = ctypes.addressof(self._keep)
            else:
                self._keep = ctypes.c_char_p(buf)  # points at the bytes object's own storage: no copy
                self._base = ctypes.cast(self._keep, ctypes.c_void_p).value or 0
            if not self._base:
                self._memmem = None

    def find(self, kw: bytes, start: int, end: int) -> int:
        if self._memmem is None:
            return self.buf.find(kw, start, end)
        if end - start < len(kw):
            return -1
        r = self._memmem(self._base + start, end - start, kw, len(kw))
        return -1 if r is None else int(r) - self._base


def iter_candidate_lines(fh: IO[bytes], chunk_size: int = CHUNK) -> Iterator[str]:
    """Yield only the lines of a byte stream that may interest the parser, reading large chunks.

    Chunks are read into one reused buffer (no per-chunk allocation); keyword hits are found with a
    fast substring search (libc memmem or ``bytes.find``; no regex per line); lines after an AER
    header are included as context.  Overlong lines are windowed, so memory stays flat whatever
    the input.
    """
    ba = bytearray(chunk_size + MAX_CARRY + 1)
    mv = memoryview(ba)
    search = _Searcher(ba)
    readinto = getattr(fh, "readinto", None)
    have = 0  # bytes carried over (an unfinished line) at the front of the buffer
    owed = 0  # context lines still owed from the previous chunk
    try:
        while True:
            if readinto is not None:
                got = readinto(mv[have: have + chunk_size]) or 0
            else:
                data = fh.read(chunk_size)
                got = len(data)
                ba[have: have + got] = data
            if not got:
                break
            end = have + got
            last_nl = ba.rfind(b"\n", 0, end)
            if last_nl == -1:
                if end <= MAX_CARRY:
                    have = end
                    continue
                # one enormous line: handle what we have, keep a tail in case a keyword straddles
                yield from _region_candidates(ba, search, 0, end - WINDOW, 0)
                ba[0:WINDOW] = ba[end - WINDOW: end]
                have, owed = WINDOW, 0
                continue
            owed = yield from _region_candidates(ba, search, 0, last_nl + 1, owed)
            tail = end - (last_nl + 1)
            if tail > MAX_CARRY:
                yield from _region_candidates(ba, search, last_nl + 1, end - WINDOW, 0)
                ba[0:WINDOW] = ba[end - WINDOW: end]
                have = WINDOW
            else:
                ba[0:tail] = ba[last_nl + 1: end]
                have = tail
        if have:
            ba[have] = 0x0A
            yield from _region_candidates(ba, search, 0, have + 1, owed)
    finally:
        del search
        mv.release()


def _region_candidates(
    buf: bytearray, search: _Searcher, lo: int, n: int, owed: int = 0
) -> Generator[str, None, int]:
    """Yield the candidate lines of ``buf[lo:n]`` in order; return how many context lines are still owed."""
    starts: dict[int, int] = {}  # line start -> line end, of every line to yield
    ctx_from: list[tuple[int, int]] = [(lo, owed)] if owed else []  # (position, context lines wanted)
    for kw in SCAN_KEYWORDS:
        _keyword_lines(buf, search, kw, lo, n, starts, ctx_from)
    still_owed = _context_lines(buf, n, starts, ctx_from)
    for s in sorted(starts):
        yield _decode(bytes(buf[s: starts[s]]))
    return still_owed


def _keyword_lines(
    buf: bytearray, search: _Searcher, kw: bytes, lo: int, n: int, starts: dict[int, int],
    ctx_from: list[tuple[int, int]],
) -> None:
    """Every line of ``buf[lo:n]`` holding ``kw`` (and its qualifier, if it needs one) into ``starts``;
    where a context keyword opens a record, the lines after it into ``ctx_from``."""
    i = search.find(kw, lo, n)
    want_ctx = kw in CONTEXT_KEYWORDS
    quals = _QUALIFY.get(kw)
    while i != -1:
        s = buf.rfind(b"\n", lo, i) + 1 or lo
        e = buf.find(b"\n", i, n)
        if e == -1:
            e = n
        if e - s > MAX_LINE_CHARS:  # overlong line: window around the hit
            s = max(s, i - 200)
            e = min(e, i + WINDOW)
        if quals is not None or want_ctx:
            line = bytes(buf[s:e])
            if quals is not None and not any(q in line for q in quals):
                i = search.find(kw, e, n)  # e.g. "bandwidth" in an unrelated message
                continue
            if want_ctx and any(q in line for q in _CONTEXT_MARKERS):
                ctx_from.append((e + 1, CONTEXT_LINES))
        if starts.get(s, -1) < e:
            starts[s] = e
        i = search.find(kw, e, n)


def _context_lines(buf: bytearray, n: int, starts: dict[int, int], ctx_from: list[tuple[int, int]]) -> int:
    """The detail lines after each record start that look like its continuation, into ``starts``;
    returns how many are still owed past ``n`` (the next chunk)."""
    still_owed = 0
    for pos, count in ctx_from:
        for left in range(count, 0, -1):
            if pos >= n:
                still_owed = max(still_owed, left)
                break
            e = buf.find(b"\n", pos, n)
            if e == -1:
                e = n
            if e - pos > MAX_LINE_CHARS:
                e = pos + MAX_LINE_CHARS
            if pos not in starts:
                seg = bytes(buf[pos:e])
                if any(mk in seg for mk in _CONTEXT_LINE_MARKS):
                    starts[pos] = e
            pos = e + 1
    return still_owed


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace").rstrip("\r")


def _mtime(path: str) -> _dt.datetime | None:
    import datetime as _dt

    try:
        return _dt.datetime.fromtimestamp(os.stat(path).st_mtime)
    except OSError:
        return None


def _year_hint(path: str) -> int | None:
    import datetime as _dt

    try:
        return _dt.datetime.fromtimestamp(os.stat(path).st_mtime).year
    except OSError:
        return None


def scan_path(path: str | os.PathLike[str], *, tail_bytes: int | None = None) -> list[KernelEvent]:
    """Stream a kernel log file (plain, .gz, .xz, .bz2) and return its events.

    Memory stays flat for any size: the file is read in chunks and only candidate lines are kept.
    ``tail_bytes`` limits a plain file to its last bytes (live runs, where dmesg/journal already
    cover this boot and only recent history is wanted).  Raises OSError when the file cannot be read.
    """
    p = os.fspath(path)
    grep = grep_binary() if tail_bytes is None else None
    if grep is not None and is_plain(p):
        try:  # grep's multi-pattern search finds the same candidate lines, faster
            lines = start_grep_candidates(p, grep)
            with _GcPaused():
                return _finish(p, _parse(p, lines))
        except GrepFallback:
            pass
    with _GcPaused():
        return _finish(p, _scan_memmem(p, tail_bytes))


def _scan_memmem(p: str, tail_bytes: int | None) -> list[KernelEvent]:
    from gpuclinic.sources.kernellog.parse import KernelLogParser

    parser = KernelLogParser(origin=p, year=_year_hint(p))
    out: list[KernelEvent] = []
    with _open_binary(p) as fh:
        if tail_bytes is not None and isinstance(fh, io.BufferedReader):
            size = os.fstat(fh.fileno()).st_size
            if size > tail_bytes:
                fh.seek(size - tail_bytes)
                fh.readline()  # drop the partial first line
        for line in iter_candidate_lines(fh):
            out.extend(parser.feed(line))
    out.extend(parser.flush())
    return out


_GC_LOCK = _thread.allocate_lock()
_gc_depth = [0, False]  # scans running now; whether the collector was on when the first started


class _GcPaused:
    """No cyclic garbage collection while a scan runs (process-wide; nested and concurrent scans count).

    A scan allocates tens of thousands of acyclic objects (lines, events, their dicts, and the parser's
    import): each allocation burst triggers collections that traverse every live object (5-10 % of the
    Python side's CPU on the bench file).  Nothing a scan builds is cyclic, so pausing frees nothing later
    than refcounting does; the collector is back on when the last scan ends.
    """

    def __enter__(self) -> None:
        import gc

        with _GC_LOCK:
            if _gc_depth[0] == 0:
                _gc_depth[1] = gc.isenabled()
                gc.disable()
            _gc_depth[0] += 1

    def __exit__(self, *exc: object) -> None:
        import gc

        with _GC_LOCK:
            _gc_depth[0] -= 1
            if _gc_depth[0] == 0 and _gc_depth[1]:
                gc.enable()


def _parse(p: str, lines: Iterator[str]) -> list[KernelEvent]:
    from gpuclinic.sources.kernellog.parse import KernelLogParser

    parser = KernelLogParser(origin=p, year=_year_hint(p))
    out: list[KernelEvent] = []
    for line in lines:
        out.extend(parser.feed(line))
    out.extend(parser.flush())
    return out


def _finish(p: str, out: list[KernelEvent]) -> list[KernelEvent]:
    _fix_syslog_years(out, _mtime(p))
    mark_previous_boots(out)
    return out


def _fix_syslog_years(events: list[KernelEvent], ref: _dt.datetime | None = None) -> None:
    """Syslog stamps carry no year: none may lie after the file was last written (``ref``), and a log
    that crosses New Year gets the earlier year for the old months."""
    import datetime as _dt
    guessed = [ev for ev in events if ev.time and "time_text" in ev.detail]
    if ref is not None:
        limit = (ref + _dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S")
        for ev in guessed:
            assert ev.time is not None
            if ev.time[:19] > limit:
                ev.time = f"{int(ev.time[:4]) - 1:04d}{ev.time[4:]}"
    last_month = None
    for ev in reversed(guessed):
        assert ev.time is not None
        mo = int(ev.time[5:7])
        if last_month is not None and mo > last_month + 6:
            ev.time = f"{int(ev.time[:4]) - 1:04d}{ev.time[4:]}"
            continue
        last_month = mo


def mark_previous_boots(events: list[KernelEvent]) -> None:
    """Flag events logged before the last reboot seen in the same log (``detail["previous_boot"]``)."""
    last = max((int(ev.detail.get("boot", 0)) for ev in events), default=0)
    if last:
        for ev in events:
            if int(ev.detail.get("boot", 0)) < last:
                ev.detail["previous_boot"] = True
