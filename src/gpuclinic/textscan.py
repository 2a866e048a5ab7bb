"""The lines of a big text that hold any of many lower-case needles, found once and shared.

The segmenting reader (kernel marks, nvidia-smi error words, fault signatures) and the ``explain``
error signatures each used to lower-case a multi-megabyte log (a slow, per-character pass when the log
holds one non-ASCII character) and search it needle by needle.  Here one ``grep -F -i -n -b`` (a C
multi-pattern search, ~40 ms for 19 MB) finds every line holding any of their needles: the first caller
asks for the union, and a later call for the same text (by identity) and a subset of the needles filters
those few lines instead of scanning again.

``grep -i`` under ``LC_ALL=C`` folds ASCII letters only, exactly what ``bytes.lower()`` does: a line
holds an (ASCII) needle there iff its ``str.lower()`` does, except for the two characters whose
lower-case form is ASCII (U+0130, U+212A).  :func:`exact_fold` says when a caller that needs
``str.lower()`` semantics must take its own path.  Without grep (or ``GPUCLINIC_NO_GREP=1``) the same
lines come from ``bytes.find`` over the lower-cased bytes.
"""

from __future__ import annotations

import bisect
import itertools
import os
import subprocess
from collections.abc import Iterable
from typing import IO

from gpuclinic import multifind
from gpuclinic.bigtext import BigText, Text, as_str
from gpuclinic.grepinput import input_file as _input
from gpuclinic.grepinput import same_file as _same_file
from gpuclinic.grepinput import scratch as _scratch
from gpuclinic.grepinput import wait as _wait
from gpuclinic.oddbytes import ODD_ASCII, odd_lines
from gpuclinic.record import record

_FOLDS_TO_ASCII = ("\u0130", "\u212a")  # str.lower() turns these into ASCII letters; bytes.lower() does not


@record(frozen=True)
class LineHits:
    """``data``: the text as UTF-8 bytes; ``lines``: (0-based line of ``text.split("\\n")``, byte offset
    of its start, its bytes) for every line holding a needle, in order."""

    data: bytes
    lines: tuple[tuple[int, int, bytes], ...]
    needles: frozenset[str] = frozenset()  # what grep searched for (lower-case): ``only`` may ask for these

    def only(self, needles: Iterable[str]) -> LineHits:
        """The lines holding one of ``needles`` (lower-case): from the lines each of the searched needles is
        on (``needle_lines``: one pass of a multi-literal automaton over these lines joined, ASCII case
        folded, read as bytes one character per byte, for all the readers' questions), or that pass for
        these needles alone when one was not among them."""
        words = tuple(n.encode().decode("latin-1") for n in needles)  # (a needle as its UTF-8 bytes)
        if "" in words:
            return self
        on = needle_lines(self)
        if on is not None and all(w in on for w in words):
            keep: set[int] = set().union(*(on[w] for w in words)) if words else set()
        else:
            low, starts = joined_lower(self)
            keep = {bisect.bisect_right(starts, end) - 1 for end, _ in multifind.matches(low, words)}
        return LineHits(self.data, tuple(self.lines[k] for k in sorted(keep)))


_ON: list[tuple[LineHits, dict[str, set[int]]] | None] = [None]


def needle_lines(hits: LineHits) -> dict[str, set[int]] | None:
    """For each needle grep searched for (as its UTF-8 bytes read as Latin-1), the positions in
    ``hits.lines`` of the lines holding it: one automaton pass over the joined lines, kept for the next
    question about the same hits (by identity); None for hits that do not say what was searched."""
    if (known := _ON[0]) is not None and known[0] is hits:
        return known[1]
    if not hits.needles:
        return None
    words = tuple(sorted({n.encode().decode("latin-1") for n in hits.needles if n}))
    on: dict[str, set[int]] = {w: set() for w in words}
    low, starts = joined_lower(hits)
    for end, w in multifind.matches(low, words):
        on[w].add(bisect.bisect_right(starts, end) - 1)
    _ON[0] = (hits, on)
    return on


_JOINED: list[tuple[LineHits, str, list[int]] | None] = [None]


def joined_lower(hits: LineHits) -> tuple[str, list[int]]:
    """The lines of ``hits`` joined with newlines, ASCII lower-cased, as Latin-1 text (one character per
    byte), and each line's start in it; kept for the next call on the same hits."""
    known = _JOINED[0]
    if known is not None and known[0] is hits:
        return known[1], known[2]
    low = b"\n".join(h[2] for h in hits.lines).lower().decode("latin-1")
    starts = list(itertools.accumulate((len(h[2]) + 1 for h in hits.lines), initial=0))
    _JOINED[0] = (hits, low, starts)
    return low, starts


def exact_fold(text: str) -> bool:
    """True when ASCII case folding finds the same needles as ``text.lower()`` would."""
    return not any(c in text for c in _FOLDS_TO_ASCII)


_LAST: list[tuple[Text, frozenset[str], LineHits] | None] = [None]
_BYTES: list[tuple[Text, bytes] | None] = [None]


_LINES: list[tuple[Text, list[str]] | None] = [None]


def remember_lines(text: Text, lines: list[str]) -> None:
    """``lines`` is ``text.split("\\n")`` less its final empty string when ``text`` ends with a newline."""
    _LINES[0] = (text, lines)


def split(text: Text) -> tuple[list[str], int]:
    """``text.split("\\n")`` as (its lines but a final empty one, 1 when that empty line follows), from the
    lines a reader already split when it is that text (not to be modified; not copied to add the empty
    line: a big log's list is 230,000 entries)."""
    known = _LINES[0]
    if known is None or known[0] is not text:
        if isinstance(text, BigText) and text.data and only_newlines(text.data):
            return text.lines(True), int(text.endswith_newline())
        lines = as_str(text).split("\n")
        return (lines[:-1], 1) if not lines[-1] and len(lines) > 1 else (lines, 0)
    return known[1], int(text.endswith_newline() if isinstance(text, BigText) else text.endswith("\n"))


# the line breaks of str.splitlines() besides "\n", as UTF-8
_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
_BREAKS_NON_ASCII = tuple(c.encode() for c in ("\x85", "\u2028", "\u2029"))


def only_newlines(data: bytes) -> bool:
    """``data`` (a text's UTF-8 bytes) holds no line break of ``str.splitlines()`` but ``\n`` (\r, \f,
    \x1c, \u2028 ...).  (A search per break, not a count: ``in`` runs at ``memchr`` speed; the answer for
    the last ``data`` is kept: splitting a big log and checking its lines against grep's both ask.)"""
    known = _ONLY_NL[0]
    if known is not None and known[0] is data:
        return known[1]
    if any(b in data for b in _BREAKS):
        only = False
    else:  # (each non-ASCII break's last byte first: one memchr, before a multi-byte search)
        only = data.isascii() or not any(b[-1:] in data and b in data for b in _BREAKS_NON_ASCII)
    _ONLY_NL[0] = (data, only)
    return only


_ONLY_NL: list[tuple[bytes, bool] | None] = [None]


def splitlines(text: Text) -> list[str]:
    """``text.splitlines()``; of a text whose bytes are known (:func:`remember`) and hold no other line
    break than ``\n``, by ``split("\n")`` (a test per character for one break, not for nine)."""
    if isinstance(text, BigText):
        return text.lines(only_newlines(text.data))
    known = _BYTES[0]
    if known is None or known[0] is not text or not only_newlines(known[1]):
        return text.splitlines()
    lines = text.split("\n")
    if not lines[-1]:  # splitlines() ends at the last newline ("" -> [], "a\n" -> ["a"])
        lines.pop()
    return lines


def remember(text: Text, data: bytes) -> None:
    """``data`` is ``text`` encoded as UTF-8 (the input it was decoded from, unchanged): a later scan of
    ``text`` uses it instead of encoding the text again, and the scans :func:`start_scans_of_bytes` started
    on ``data`` become ``text``'s."""
    _BYTES[0] = (text, data)
    hits, starts = _PENDING[0], _STARTS[0]
    if hits is not None and hits.data is data and hits.text is _EARLY[0]:
        hits.text = text
    if starts is not None and starts.data is data and starts.text is _EARLY[0]:
        starts.text = text


_EARLY: list[str | None] = [None]  # the stand-in text of the scans started on bytes not yet decoded


def start_scans_of_bytes(data: bytes, needles: Iterable[str], pattern: str) -> None:
    """Start the literal and line-start scans of a big input from its bytes, before they are decoded: grep
    runs while the text is decoded and split (~25 ms more of a 19 MB log's scan off the critical path).
    :func:`remember` hands them to the decoded text; if the text is not exactly these bytes (a \\r, a NUL,
    bad UTF-8), nobody takes them over and :func:`cancel_scans` stops them."""
    stand_in = "".join(("\0", "undecoded"))  # (a new object: no text is ever this one)
    _EARLY[0] = stand_in
    starts = start_line_starts(stand_in, pattern, data)
    starts.pattern = pattern
    earlier, _STARTS[0] = _STARTS[0], starts
    if earlier is not None:
        earlier.cancel()
    start_line_hits(stand_in, needles, data)


def line_hits(text: Text, needles: Iterable[str]) -> LineHits | None:
    """The lines of ``text`` holding any of ``needles`` (ASCII letters case-insensitive; a needle with other
    characters matches them exactly); None when the text cannot be encoded as UTF-8 (lone surrogates).
    The last text's scan is reused (by identity)."""
    want = _want(needles)
    last = _LAST[0]
    if last is None or last[0] is not text or not want <= last[1]:
        pending, _PENDING[0] = _PENDING[0], None
        if pending is not None and pending.text is text and want <= pending.want:
            _finish(pending)  # the scan started early, for this text and these needles or more
        else:
            if pending is not None:
                pending.cancel()
            data = _data(text)
            if data is None:
                return None
            found = _grep(data, want)
            if found is None:
                found = _python(data, want)
            _LAST[0] = (text, want, LineHits(data, tuple(found), want))
        last = _LAST[0]
        assert last is not None
    return last[2].only(want) if want != last[1] else last[2]


def _want(needles: Iterable[str]) -> frozenset[str]:
    return frozenset(n.lower() if n.isascii() else n for n in needles if n)


class _PendingHits:
    """A literal scan started ahead (:func:`start_line_hits`): grep runs while the caller works on."""

    def __init__(
        self, text: Text, want: frozenset[str], data: bytes, proc: subprocess.Popen[bytes], out: IO[bytes]
    ) -> None:
        self.text = text
        self.want = want
        self.data = data
        self._proc = proc
        self._out = out  # grep's output (a file, not a pipe: grep never waits for a reader)

    def result(self) -> list[tuple[int, int, bytes]] | None:
        """grep's lines, as :func:`_grep` returns them (None: it failed)."""
        try:
            rc = _wait(self._proc, 60)
            if rc not in (0, 1) or not _same_file(self.data):
                return None
            self._out.seek(0)
            return _parse_hits(self._out.read())
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None
        finally:
            self.cancel()  # (a no-op for a grep that ended: it is reaped, its output file closed)

    def cancel(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._out.close()


_PENDING: list[_PendingHits | None] = [None]


def start_line_hits(text: Text, needles: Iterable[str], data: bytes | None = None) -> None:
    """Start the scan a later :func:`line_hits` of ``text`` (the same object) for these ``needles`` or
    fewer will wait for, so grep runs while the caller splits the text and loads its readers.  A no-op
    without grep; :func:`cancel_scans` stops a scan nobody asked for."""
    earlier, _PENDING[0] = _PENDING[0], None
    want = _want(needles)
    if earlier is not None and earlier.text is text and want <= earlier.want:
        _PENDING[0] = earlier  # started already (from the bytes, before the text was decoded)
        return
    if earlier is not None:
        earlier.cancel()
    data = _data(text) if data is None else data
    grep = _grep_binary()
    if data is None or grep is None or not want:
        return
    out = _scratch()
    try:
        with _input(data) as f:
            proc = subprocess.Popen(
                _grep_argv(grep, want), stdin=f, stdout=out, stderr=subprocess.DEVNULL, env=_c_env()
            )
    except (OSError, subprocess.SubprocessError):
        out.close()
        return
    _PENDING[0] = _PendingHits(text, want, data, proc, out)


def _finish(pending: _PendingHits) -> None:
    found = pending.result()
    if found is None:
        found = _python(pending.data, pending.want)
    _LAST[0] = (pending.text, pending.want, LineHits(pending.data, tuple(found), pending.want))


def cancel_scans() -> None:
    """Stop the scans started ahead that were not used (a no-op for those that were)."""
    pending, _PENDING[0] = _PENDING[0], None
    if pending is not None:
        pending.cancel()
    starts, _STARTS[0] = _STARTS[0], None
    if starts is not None:
        starts.cancel()


def contains(text: Text, literal: str) -> bool:
    """``literal in text``, from the last literal scan of ``text`` when one of its needles is part of
    ``literal``: a line holding ``literal`` holds that needle (ASCII case folded), so only the lines the
    scan found are searched, not the whole (19 MB) text."""
    last = _LAST[0]
    if last is not None and last[0] is text and literal.isascii() and "\n" not in literal:
        low = literal.lower()
        if any(n in low for n in last[1]):
            b = literal.encode()
            return any(b in body for _, _, body in last[2].lines)
    if isinstance(text, BigText):  # (valid UTF-8: a substring of the text iff its bytes are of the bytes)
        return literal.encode() in text.data
    return literal in text




def line_starts(text: Text, pattern: str) -> list[int] | None:
    """The 0-based lines of ``text`` (split at ``"\\n"``) where ``pattern`` may match at the line start: a
    superset of ``re``'s lines, for the caller to check line by line; None when ``re`` must scan itself.

    ``grep -P`` (PCRE compiled to machine code: ~10x ``re``'s speed at every line start of a 19 MB log)
    reads the bytes; on plain ASCII its ``\\s \\d \\w`` are ``re``'s, but ``re``'s are Unicode-aware and its
    ``\\s`` takes ``\\x1c``-``\\x1f``, so every line holding such a character is returned too.  None: grep or
    its ``-P`` missing or failing, a text with lone surrogates, or so many such characters that the lines
    to check would cost more than ``re``'s scan.  ``pattern`` uses only syntax both engines read alike
    (groups, classes, ``\\d \\s \\S \\w``, counted repeats, lookahead)."""
    return start_line_starts(text, pattern).result()


class PendingLines:
    """A :func:`line_starts` scan under way: grep runs while the caller does other work."""

    def __init__(
        self,
        text: Text,
        proc: subprocess.Popen[bytes] | None,
        odd: bytes | None,
        files: list[IO[bytes]],
        data: bytes = b"",
    ) -> None:
        self.text = text
        self.data = data  # what grep scanned
        self._proc = proc
        self._odd = odd  # the text's bytes when some lines hold a character grep cannot judge
        self._files = files  # grep's output and errors (files, not pipes: grep never waits for a reader)
        self.pattern: str | None = None  # when started ahead: the pattern

    def result(self) -> list[int] | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        odd: list[int] | None = []
        if self._odd is not None:  # (found while grep runs)
            last = _LAST[0]
            known = last[2].lines if last is not None and last[0] is self.text else ()
            anchors = [(k, off) for k, off, _ in known]
            odd = odd_lines(self._odd, anchors)
        try:
            if odd is None:
                proc.kill()
                proc.wait()
                return None
            try:
                rc = _wait(proc, 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return None
            out, err = self._files
            out.seek(0)
            err.seek(0)
            if rc not in (0, 1) or err.read(1) or not _same_file(self.data):
                return None  # no -P in this grep, PCRE gave up on a line (its backtracking limit), or the
                # file it read changed
            starts = [int(ln.split(b":", 1)[0]) - 1 for ln in out.read().split(b"\n")[:-1]]
        except (OSError, ValueError):
            return None
        finally:
            for f in self._files:
                f.close()
        return sorted({*starts, *odd}) if odd else starts

    def cancel(self) -> None:
        """Stop a scan whose result is not wanted (a no-op once :meth:`result` ran)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            for f in self._files:
                f.close()


_STARTS: list[PendingLines | None] = [None]  # a line-start scan started ahead, not yet asked for


def prefetch_line_starts(text: Text, pattern: str) -> None:
    """Start the scan a later :func:`start_line_starts` of ``text`` (the same object) and ``pattern``
    takes over (:func:`cancel_scans` stops it when nobody does)."""
    earlier = _STARTS[0]
    if earlier is not None and earlier.text is text and earlier.pattern == pattern:
        return  # started already (from the bytes, before the text was decoded)
    _STARTS[0] = None
    if earlier is not None:
        earlier.cancel()
    started = start_line_starts(text, pattern)
    started.pattern = pattern
    _STARTS[0] = started


def start_line_starts(text: Text, pattern: str, data: bytes | None = None) -> PendingLines:
    """Start :func:`line_starts` (``.result()`` waits for it); ``data``: the text's bytes, when known."""
    ahead = _STARTS[0]
    if ahead is not None and ahead.text is text and ahead.pattern == pattern:
        _STARTS[0] = None
        return ahead
    none = PendingLines(text, None, None, [])
    data = _data(text) if data is None else data
    if data is None:
        return none
    odd = data if not data.isascii() or any(c in data for c in ODD_ASCII) else None
    from gpuclinic.sources.kernellog.grepscan import grep_binary

    grep = grep_binary()
    if grep is None:
        return none
    # "^(?:pattern)." prints one character of each matching line: its number, not the whole line
    argv = [grep, "-a", "-n", "-o", "-P", f"^(?:{pattern}).", "-"]
    files: list[IO[bytes]] = [_scratch(), _scratch()]
    try:
        with _input(data) as f:
            proc = subprocess.Popen(argv, stdin=f, stdout=files[0], stderr=files[1], env=_c_env())
    except (OSError, subprocess.SubprocessError):
        for x in files:
            x.close()
        return none
    return PendingLines(text, proc, odd, files, data)


def _data(text: Text) -> bytes | None:
    """``text`` as UTF-8 (lone surrogates as their escaped bytes): the bytes it was decoded from or a
    scan already encoded, else encoded now (and kept for the next scan); None when it cannot be."""
    if isinstance(text, BigText):
        return text.data
    known = _BYTES[0]
    if known is not None and known[0] is text:
        return known[1]
    last = _LAST[0]
    if last is not None and last[0] is text:
        return last[2].data
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None
    _BYTES[0] = (text, data)
    return data


def _c_env() -> dict[str, str]:
    """grep reads bytes: ASCII case folding only, never an encoding error."""
    return {**os.environ, "LC_ALL": "C"}


def _grep_binary() -> str | None:
    from gpuclinic.sources.kernellog.grepscan import grep_binary

    return grep_binary()


def _grep_argv(grep: str, needles: frozenset[str]) -> list[str]:
    argv = [grep, "-a", "-F", "-i", "-n", "-b"]
    for n in sorted(needles):
        argv += ["-e", n]
    return argv


def _parse_hits(stdout: bytes) -> list[tuple[int, int, bytes]]:
    """grep -n -b's lines: (0-based line, byte offset, the line's bytes); ValueError on a malformed one."""
    out: list[tuple[int, int, bytes]] = []
    for ln in stdout.split(b"\n")[:-1] if stdout else ():
        no, off, body = ln.split(b":", 2)
        out.append((int(no) - 1, int(off), body))
    return out


def _grep(data: bytes, needles: frozenset[str]) -> list[tuple[int, int, bytes]] | None:
    grep = _grep_binary()
    if grep is None or not needles:
        return None
    try:
        with _input(data) as f:  # a file, not a pipe: one read instead of thousands of writes
            r = subprocess.run(
                _grep_argv(grep, needles), stdin=f, capture_output=True, env=_c_env(), timeout=60, check=False
            )
        if r.returncode not in (0, 1) or not _same_file(data):
            return None
        return _parse_hits(r.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _python(data: bytes, needles: frozenset[str]) -> list[tuple[int, int, bytes]]:
    low = data.lower()
    starts: set[int] = set()
    for nd in needles:
        b = nd.encode()
        i = low.find(b)
        while i >= 0:
            ls = low.rfind(b"\n", 0, i) + 1
            starts.add(ls)
            le = low.find(b"\n", i)
            if le < 0:
                break
            i = low.find(b, le + 1)
    out: list[tuple[int, int, bytes]] = []
    line = pos = 0
    for ls in sorted(starts):
        line += data.count(b"\n", pos, ls)
        pos = ls
        le = data.find(b"\n", ls)
        out.append((line, ls, data[ls : le if le >= 0 else len(data)]))
    return out


def line_spans(data: bytes, hits: list[tuple[int, int]], context: int) -> list[tuple[int, int, int]]:
    """Whole-line byte spans of ``data`` around the hit lines (``context`` lines either side), merged, in
    order, each with the 0-based line it starts at.  ``hits``: (0-based line, byte offset of its start) of
    each hit line.

    (The error signatures' candidate text: a line without a trigger cannot match, and a 19 MB training
    log is mostly "step 1234 loss ..." lines, skipped without a regex pass each.)
    """
    spans: list[tuple[int, int, int]] = []
    n = len(data)
    for line, ls in sorted(set(hits), key=lambda h: h[1]):
        s = ls
        back = 0
        for _ in range(context):
            if s == 0:
                break
            s = data.rfind(b"\n", 0, s - 1) + 1
            back += 1
        e = ls
        for _ in range(context + 1):
            j = data.find(b"\n", e)
            if j < 0:
                e = n
                break
            e = j + 1
        if spans and s <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], e), spans[-1][2])
        else:
            spans.append((s, e, line - back))
    return spans
