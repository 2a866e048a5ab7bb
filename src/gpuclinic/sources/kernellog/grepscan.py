"""Candidate lines of big files at ``grep`` speed: GNU grep's multi-pattern fixed-string search runs as a
subprocess (no shell) and Python parses only the lines it prints.

Two uses:

* :func:`iter_grep_candidates` - the kernel-log scan's candidate lines (the same lines, in the same order,
  as the memmem scan in :mod:`.scan` yields, which stays the fallback when grep is absent, fails, the file
  is compressed, or a line is longer than the scan windows);
* :func:`iter_keyword_lines` - numbered lines holding any of many case-insensitive keywords (the literal
  needles of every fault signature), so a log too big to segment still meets every signature.

``GPUCLINIC_NO_GREP=1`` turns grep off (tests compare both paths).
"""

from __future__ import annotations

import os
from itertools import islice

from gpuclinic.sources.kernellog.keywords import (
    _CONTEXT_LINE_MARKS,
    _CONTEXT_MARKERS,
    _QUALIFY,
    CHUNK,
    CONTEXT_KEYWORDS,
    CONTEXT_LINES,
    MAX_LINE_CHARS,
    SCAN_KEYWORDS,
)

# ``scan_path`` starts grep first and prepares while it runs: nothing imported here may cost time before
# that (no re, shutil, subprocess, typing or collections at import; grep is started with posix_spawn).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Generator, Iterable, Iterator, Sequence

_MAGIC = (b"\x1f\x8b", b"\xfd7zXZ\x00", b"BZh")
_ENV = {**os.environ, "LC_ALL": "C"}  # bytes, not characters: fastest, and never an encoding error


class GrepFallback(Exception):
    """grep could not give the exact candidate lines (absent, failed, or an overlong line)."""


def grep_binary() -> str | None:
    if os.environ.get("GPUCLINIC_NO_GREP"):
        return None
    return _which("grep")


def _which(name: str) -> str | None:
    """``shutil.which`` for a plain command name (without importing shutil)."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        cand = os.path.join(d or os.curdir, name)
        if os.access(cand, os.F_OK | os.X_OK) and not os.path.isdir(cand):
            return cand
    return None


def is_plain(path: str) -> bool:
    """Not gzip/xz/bzip2 (grep reads plain bytes only)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return False
    return not any(head.startswith(m) for m in _MAGIC)


class _Spawned:
    """A child started with ``os.posix_spawn`` (its stdout a pipe, stderr /dev/null): the part of
    ``subprocess.Popen`` the scan uses, without importing subprocess (and vfork-fast)."""

    def __init__(self, argv: list[str], stdin_fd: int | None = None) -> None:
        r, w = os.pipe()  # both close-on-exec; the dup2 onto fd 1 is inherited
        try:
            actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
                (os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)
            ]
            if stdin_fd is not None:
                actions.append((os.POSIX_SPAWN_DUP2, stdin_fd, 0))
            self.pid = os.posix_spawn(argv[0], argv, _ENV, file_actions=actions)
        except OSError as e:
            os.close(r)
            raise GrepFallback(str(e)) from None
        finally:
            os.close(w)
        self.stdout = open(r, "rb", buffering=1 << 16)  # closed by _finish or _kill
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, 9)  # SIGKILL (importing signal would load enum)

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


def _run(argv: list[str]) -> subprocess.Popen[bytes] | _Spawned:
    if hasattr(os, "posix_spawn"):
        return _Spawned(argv)
    import subprocess

    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_ENV)
    except OSError as e:
        raise GrepFallback(str(e)) from None


def _finish(proc: subprocess.Popen[bytes] | _Spawned) -> None:
    """grep exits 0 (lines found) or 1 (none); anything else is a failure."""
    if proc.stdout is not None:
        proc.stdout.close()
    rc = proc.wait()
    if rc not in (0, 1):
        raise GrepFallback(f"grep exited {rc}")


def _kill(proc: subprocess.Popen[bytes] | _Spawned) -> None:
    if proc.poll() is None:
        proc.kill()
    if proc.stdout is not None:
        proc.stdout.close()
    proc.wait()


_ERE_SPECIAL = frozenset(".[]()*+?{}|^$\\")


def _ere_literal(word: str) -> str:
    """``word`` as a POSIX extended regex matching exactly it."""
    return "".join("\\" + c if c in _ERE_SPECIAL else c for c in word)


def grep_patterns() -> list[str]:
    """What grep looks for: each scan keyword, or for a qualified one (``bandwidth`` counts only with
    ``limited by``) its qualifiers, which every line it keeps holds anyway and which are rarer."""
    out: list[str] = []
    for kw in SCAN_KEYWORDS:
        for pat in _QUALIFY.get(kw, (kw,)):
            if pat.decode() not in out:
                out.append(pat.decode())
    return out


# per scan keyword: (keyword, its qualifiers or None, whether it can open an AER record)
_HIT_RULES = tuple((kw, _QUALIFY.get(kw), kw in CONTEXT_KEYWORDS) for kw in SCAN_KEYWORDS)


def _is_hit(line: bytes) -> tuple[bool, bool]:
    """(candidate, starts AER context) exactly as the memmem scan decides for a line of normal length."""
    hit = ctx = False
    for kw, quals, opens in _HIT_RULES:
        if kw not in line:
            continue
        if quals is not None and not any(q in line for q in quals):
            continue
        hit = True
        if opens and not ctx and any(q in line for q in _CONTEXT_MARKERS):
            ctx = True
    return hit, ctx


def _context(fd: int, pos: int, count: int, last: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The lines after an AER header (from byte ``pos``) that belong to its record, as the memmem scan
    picks.  ``last`` holds the block read for the previous header: the next header of the same record
    (its detail lines are headers too) usually finds its lines there, without another read."""
    block, p0 = _block(fd, pos, count, last)
    segs, cut = _segments(block, p0, count)
    return [(pos + a - p0, block[a:b]) for a, b in _marked(block, segs, cut)]


def _block(fd: int, pos: int, count: int, last: list[tuple[int, bytes]]) -> tuple[bytes, int]:
    """Bytes holding the ``count`` lines from ``pos`` (or up to the end), and where ``pos`` is in them."""
    if last:
        base, prev = last[0]
        if base <= pos < base + len(prev) and prev.count(b"\n", pos - base) >= count:
            return prev, pos - base
    most = count * (MAX_LINE_CHARS + 1) + 1
    block = os.pread(fd, min(most, 2048), pos)  # detail lines are short: read more only when they are not
    while block.count(b"\n") < count and len(block) < most:
        more = os.pread(fd, min(most - len(block), 65536), pos + len(block))
        if not more:
            break
        block += more
    last[:] = [(pos, block)]
    return block, 0


def _segments(block: bytes, p: int, count: int) -> tuple[list[tuple[int, int]], bool]:
    """The next ``count`` lines from ``p``, each cut at MAX_LINE_CHARS; whether any was cut."""
    n = len(block)
    segs: list[tuple[int, int]] = []
    cut = False
    for _ in range(count):
        if p >= n:
            break
        e = block.find(b"\n", p)
        if e == -1:
            e = n
        if e - p > MAX_LINE_CHARS:
            e, cut = p + MAX_LINE_CHARS, True
        segs.append((p, e))
        p = e + 1
    return segs, cut


def _marked(block: bytes, segs: list[tuple[int, int]], cut: bool) -> list[tuple[int, int]]:
    """The segments holding one of the AER detail-line marks."""
    marks = _CONTEXT_LINE_MARKS
    if not segs:
        return []
    if cut:  # a mark could span a cut: test each segment on its own
        return [(a, b) for a, b in segs if any(block.find(mk, a, b) != -1 for mk in marks)]
    # Marks hold no newline: a segment holds one exactly when an occurrence found over all of them starts
    # in it (a C find per mark over the span; a regex alternation of the six cost ~7 us per header).
    lo, hi = segs[0][0], segs[-1][1]
    hits: list[int] = []
    for mk in marks:
        i = block.find(mk, lo, hi)
        while i != -1:
            hits.append(i)
            i = block.find(mk, i + 1, hi)
    hits.sort()
    out: list[tuple[int, int]] = []
    k = 0
    for a, b in segs:
        while k < len(hits) and hits[k] < a:
            k += 1
        if k == len(hits):
            break
        if hits[k] < b:
            out.append((a, b))
    return out


def iter_grep_candidates(path: str, grep: str) -> Generator[str, None, None]:
    """The kernel-log candidate lines of a plain file, found by ``grep -a -b -E``.

    Raises :class:`GrepFallback` (possibly after yielding lines: the caller starts over) when the result
    could differ from the memmem scan's.
    """
    yield from start_grep_candidates(path, grep)


def start_grep_candidates(path: str, grep: str) -> Iterator[str]:
    """:func:`iter_grep_candidates`, with grep started now (the caller prepares while it runs).

    A big file is read by two greps taking turns stripe by stripe, when a second core is free
    (:mod:`.grepsplit`)."""
    # one extended regex of literal alternatives: GNU grep searches it a little faster than -F with -e per
    # word
    argv = [grep, "-a", "-b", "-E", "-e", "|".join(_ere_literal(p) for p in grep_patterns())]
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise GrepFallback(str(e)) from None
    from gpuclinic.sources.kernellog import grepsplit

    if grepsplit.usable(size):
        split = grepsplit.start(path, argv, size)
        if split is not None:
            return _candidates(path, *split)
    proc = _run([*argv, "--", path])

    def close(ok: bool) -> None:
        if ok:
            _finish(proc)
        else:
            _kill(proc)

    return _candidates(path, _records(proc), close)


def _records(proc: subprocess.Popen[bytes] | _Spawned) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of each line grep printed."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        colon = raw.find(b":")
        if colon <= 0:
            raise GrepFallback("unexpected grep output")
        yield int(raw[:colon]), raw[colon + 1 :].rstrip(b"\n")


def _candidates(
    path: str, records: Iterator[tuple[int, bytes]], close: Callable[[bool], None]
) -> Iterator[str]:
    pending: dict[int, bytes] = {}  # context lines not yet yielded, by offset
    done: set[int] = set()  # offsets of context lines already yielded
    last: list[tuple[int, bytes]] = []  # the last block read for context lines
    ok = False
    try:
        with open(path, "rb") as fh:
            for off, line in records:
                if len(line) > MAX_LINE_CHARS:
                    raise GrepFallback("overlong line")  # the memmem scan windows it
                if pending:
                    for o in sorted(k for k in pending if k < off):
                        done.add(o)
                        yield _decode(pending.pop(o))
                hit, ctx = _is_hit(line)
                if ctx:
                    for o, seg in _context(fh.fileno(), off + len(line) + 1, CONTEXT_LINES, last):
                        if o not in done and o != off:
                            pending.setdefault(o, seg)
                if off in done:
                    continue
                if hit or off in pending:
                    pending.pop(off, None)
                    done.add(off)
                    yield _decode(line)
            for o in sorted(pending):
                yield _decode(pending[o])
        ok = True
    finally:
        close(ok)


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace").rstrip("\r")


# --------------------------------------------------------------------------------------------------
# Numbered lines holding any of many keywords (case-insensitive)
# --------------------------------------------------------------------------------------------------

MAX_KEYWORD_LINES = 200_000  # a log where every line "fails" yields its first lines, not all of them


def iter_keyword_lines(
    path: str, keywords: Sequence[str], *, opener: object = None
) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for every line holding one of ``keywords`` (any case), at most
    ``MAX_KEYWORD_LINES``.  grep (compressed files decompressed into its stdin); one find pass per keyword
    over
    the decompressed stream when grep is absent or fails."""
    kws = sorted({k.lower() for k in keywords if k})
    if not kws:
        return
    anchors = _anchors(kws)
    grep = grep_binary()
    done = 0  # lines already given: a grep that fails half-way is continued by the Python scan, no repeats
    if grep is not None and opener is None:
        try:
            for item in _limit(_verified(_grep_keyword_lines(path, grep, anchors), kws)):
                done += 1
                yield item
            return
        except GrepFallback:
            pass
    yield from islice(_limit(_verified(_python_keyword_lines(path, anchors, opener), kws)), done, None)


# Substrings many keywords share: searching for these (and the keywords holding none of them) finds the
# same lines with far fewer passes; each line found is then checked for a real keyword.
# Only specific words: "gpu", "error" or "device" would make every line of a host named gpu-node-7 a
# candidate.
_ANCHOR_KEYS = ("cuda", "nccl", "nvml", "cublas", "cudnn", "nvidia", "xid", "nvrm")


def _anchors(kws: list[str]) -> list[str]:
    picked = {next((a for a in _ANCHOR_KEYS if a in k), k) for k in kws}
    return sorted(a for a in picked if not any(b != a and b in a for b in picked))


def _verified(lines: Iterable[tuple[int, str]], kws: list[str]) -> Iterator[tuple[int, str]]:
    for n, line in lines:
        low = line.lower()
        if any(k in low for k in kws):
            yield n, line


def _limit(it: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    for k, item in enumerate(it):
        if k >= MAX_KEYWORD_LINES:
            return
        yield item


def _grep_keyword_lines(path: str, grep: str, kws: list[str]) -> Iterator[tuple[int, str]]:
    """grep over the file, or over its decompressed bytes fed on stdin by a thread (gz, xz, bz2)."""
    import subprocess
    import threading

    argv = [grep, "-a", "-n", "-i", "-F"]
    for k in kws:
        argv += ["-e", k]
    feeder: threading.Thread | None = None
    proc: subprocess.Popen[bytes] | _Spawned
    if is_plain(path):
        proc = _run([*argv, "--", path])
    else:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_ENV
            )
        except OSError as e:
            raise GrepFallback(str(e)) from None
        feeder = threading.Thread(target=_feed, args=(path, proc), daemon=True)
        feeder.start()
    assert proc.stdout is not None
    ok = False
    try:
        for raw in proc.stdout:
            colon = raw.find(b":")
            if colon <= 0:
                raise GrepFallback("unexpected grep output")
            yield int(raw[:colon]), _decode(raw[colon + 1 : colon + 1 + MAX_LINE_CHARS].rstrip(b"\n"))
        ok = True
    finally:
        if ok:
            _finish(proc)
        else:
            _kill(proc)
        if feeder is not None:
            feeder.join()


def _feed(path: str, proc: subprocess.Popen[bytes]) -> None:
    """Write the decompressed file to grep's stdin (a thread: grep's output is read meanwhile)."""
    from gpuclinic.sources.kernellog.scan import _open_binary

    assert proc.stdin is not None
    try:
        with _open_binary(path) as fh:
            while True:
                chunk = fh.read(CHUNK)
                if not chunk:
                    break
                proc.stdin.write(chunk)
    except (OSError, ValueError):
        pass  # grep was stopped, or the file ended early: grep sees the end of its input
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _python_keyword_lines(path: str, kws: list[str], opener: object) -> Iterator[tuple[int, str]]:
    from gpuclinic.sources.kernellog.scan import _open_binary

    needles = [k.encode() for k in kws]
    open_ = opener if callable(opener) else _open_binary
    lineno = 1  # number of the first line of ``buf``
    carry = b""
    with open_(path) as fh:
        while True:
            data = fh.read(CHUNK)
            if not data and not carry:
                break
            buf = carry + data
            if data:
                cut = buf.rfind(b"\n") + 1
                if cut == 0 and len(buf) < 4 * CHUNK:
                    carry = buf
                    continue
                buf, carry = (buf[:cut], buf[cut:]) if cut else (buf, b"")
            else:
                carry = b""
            low = buf.lower()
            starts: set[int] = set()
            for nd in needles:  # one C-speed find pass per keyword over the chunk
                i = low.find(nd)
                while i != -1:
                    s = buf.rfind(b"\n", 0, i) + 1
                    starts.add(s)
                    e = buf.find(b"\n", i)
                    if e == -1:
                        break
                    i = low.find(nd, e + 1)
            pos, line_at = 0, lineno
            for s in sorted(starts):
                line_at += buf.count(b"\n", pos, s)
                pos = s
                e = buf.find(b"\n", s)
                e = len(buf) if e == -1 else e
                yield line_at, _decode(buf[s : min(e, s + MAX_LINE_CHARS)])
            lineno += buf.count(b"\n")
            if not data:
                break
