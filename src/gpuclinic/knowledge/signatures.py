"""Error signatures: recognise CUDA/NCCL/NVML/driver/framework errors in any text and say what to do.

The signatures are data (``knowledge/data/error_signatures.json``, one public source per entry).
:func:`match` is used by ``gpuclinic explain`` and by the ``run`` supervisor to classify why a job
died, so it must be fast on multi-megabyte logs: every entry has lower-case "needles" checked with
``in`` on the lower-cased text before its regexes are compiled (on first use) and run.
"""

from __future__ import annotations

import bisect
import copy
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

from gpuclinic import multifind, recache
from gpuclinic.bigtext import Text, as_str
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.rejoin import rejoined
from gpuclinic.knowledge.signature_extract import EXTRACTORS
from gpuclinic.record import field, record
from gpuclinic.regex_literal import leading_literal, leading_literals
from gpuclinic.textscan import exact_fold, line_hits, line_spans

# The report family (model.Family value) of each signature category: one mapping for explain and evidence.
CATEGORY_FAMILY: dict[str, str] = {
    "cuda_oom": "software",
    "nccl_timeout": "network",
    "nccl": "network",
    "cuda_runtime": "software",
    "driver": "software",
    "nvml": "software",
    "hardware": "gpu_fault",
    "container": "software",
    "python": "software",
    "host_oom": "host",
    "download": "network",  # model/package/repo downloads (Hugging Face, pip, git)
    "scheduler": "software",  # the job's own limits and requests (Slurm time limit, k8s GPU requests)
}
CATEGORIES = tuple(CATEGORY_FAMILY)
_SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
MAX_LINE = 400  # matched_line is cut to this many characters


@record
class SignatureMatch:
    """One recognised error in the text, with what it means and how to fix it."""

    id: str
    category: str
    title: str
    cause: str
    fix: str
    source: str
    matched_line: str
    severity: str = "warning"  # info | warning | critical
    code: str | None = None  # e.g. "cudaErrorNoKernelImageForDevice (209)"
    line_no: int = 0  # 1-based line of the first occurrence
    count: int = 1  # how many lines matched (e.g. one watchdog line per rank)
    hints: list[str] = field(default_factory=list)  # derived from numbers in the text
    data: dict[str, Any] = field(default_factory=dict)  # parsed values (sizes, ranks, versions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "category": self.category,
            "severity": self.severity,
            "title": self.title,
            "code": self.code,
            "cause": self.cause,
            "fix": self.fix,
            "source": self.source,
            "matched_line": self.matched_line,
            "line_no": self.line_no,
            "count": self.count,
            "hints": list(self.hints),
            "data": dict(self.data),
        }


@record(frozen=True)
class Signature:
    """One error signature of ``error_signatures.json``: needles, patterns, cause and fix."""

    id: str
    category: str
    severity: str
    title: str
    code: str | None
    regexes: tuple[str, ...]  # the patterns' source; compiled on first use (most never meet a needle)
    needles: tuple[str, ...]
    cause: str
    fix: str
    source: str
    supersedes: tuple[str, ...]
    extract: str | None
    covered_by: str | None  # the code another reader gives the same line (prefix if "."-ended; "a|b": any)

    @property
    def patterns(self) -> tuple[re.Pattern[str], ...]:
        return _compiled(self.regexes)

    @property
    def fast(self) -> tuple[re.Pattern[str] | None, ...]:
        """Per pattern: the same pattern without a leading "[^\\n]*", or None.  A leading "[^\\n]*" makes
        the regex engine run to the end of every line and back at every position (quadratic in the
        line length); the rest of the pattern finds the same lines in one pass."""
        return _compiled_fast(self.regexes)


_LINE_PREFIX = "[^\\n]*"


@cache
def _compiled(regexes: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(_pattern(p) for p in regexes)


@cache
def _compiled_fast(regexes: tuple[str, ...]) -> tuple[re.Pattern[str] | None, ...]:
    return tuple(_fast_pattern(p) for p in regexes)


@cache
def _pattern(regex: str) -> re.Pattern[str]:
    return recache.compile(regex)


@cache
def _fast_pattern(regex: str) -> re.Pattern[str] | None:
    n = len(_LINE_PREFIX)
    return recache.compile(regex[n:]) if regex.startswith(_LINE_PREFIX) and len(regex) > n else None


@cache
def _starts(regexes: tuple[str, ...]) -> tuple[str | None, ...]:
    """Per pattern: the literal every match of the pattern searched (``fast`` where there is one) starts
    with, or None (``regex_literal.leading_literal``)."""
    n = len(_LINE_PREFIX)
    return tuple(leading_literal(p[n:] if p.startswith(_LINE_PREFIX) and len(p) > n else p) for p in regexes)


@cache
def _alt_starts(regexes: tuple[str, ...]) -> tuple[tuple[str, ...] | None, ...]:
    """Per pattern without a leading literal: the literals one of which each of its matches (of ``fast``
    where there is one) starts with (``regex_literal.leading_literals``), or None."""
    n = len(_LINE_PREFIX)
    return tuple(
        None if lit else leading_literals(p[n:] if p.startswith(_LINE_PREFIX) and len(p) > n else p)
        for p, lit in zip(regexes, _starts(regexes), strict=True)
    )


_WORD_START = re.compile(r"\\b(\w+)(?![*+?{])")


def _literal_first(pattern: str) -> str:
    """``\\bWord...`` as ``Word(?<!\\wWord)...``: the same matches (a word character after \\b makes it
    "no word character before"), but a literal start lets the engine skip to each occurrence instead of
    trying the pattern at every position (25 ms of 80 ms over the 19 MB bench's candidate lines)."""
    m = _WORD_START.match(pattern)
    if m is None or not m.group(1).isascii():
        return pattern
    word = m.group(1)
    return f"{word}(?<!\\w{word}){pattern[m.end():]}"


@cache
def signatures() -> tuple[Signature, ...]:
    """Load the signature table once per process (each entry's regexes compile when its needles first
    meet a text: ~560 regexes are ~0.1 s, and a log holds the needles of a few)."""
    raw = load_data("error_signatures.json")["signatures"]
    out = []
    for e in raw:
        out.append(
            Signature(
                id=e["id"],
                category=e["category"],
                severity=e.get("severity", "warning"),
                title=e["title"],
                code=e.get("code"),
                regexes=tuple(_literal_first(p) for p in e["patterns"]),
                needles=tuple(n.lower() for n in e["needles"]),
                cause=e["cause"],
                fix=e["fix"],
                source=e["source"],
                supersedes=tuple(e.get("supersedes", ())),
                extract=e.get("extract"),
                covered_by=e.get("covered_by"),
            )
        )
    return tuple(out)


@cache
def covered_by() -> dict[str, str]:
    """Signature id -> the code another reader gives the same line (it then gives way, doctor and explain)."""
    return {s.id: s.covered_by for s in signatures() if s.covered_by}


# Substrings shared by many needles: when one is absent from the text, every needle containing it is too,
# so a multi-megabyte log without errors costs a dozen scans instead of one per needle.
_GROUP_KEYS = (
    "cuda",
    "nccl",
    "nvml",
    "cublas",
    "cudnn",
    "nvidia",
    "error",
    "kill",
    "memory",
    "driver",
    "device",
    "ecc",
    "xid",
    "gpu",
    "fail",
    "lib",
    "timeout",
    "timed out",
    "sigkill",
    "bus",
    "nvrm",
)


@cache
def _needle_groups() -> dict[str, str | None]:
    return {n: next((k for k in _GROUP_KEYS if k in n), None) for s in signatures() for n in s.needles}


@cache
def _triggers() -> tuple[str, ...]:
    """Substrings at least one of which every needle contains: its group key, else the needle itself."""
    return tuple(sorted({g if g is not None else n for n, g in _needle_groups().items()}))


def trigger_needles() -> tuple[str, ...]:
    """The lower-case literals every signature needle holds one of (what a line must hold to match)."""
    return _triggers()


PREFILTER_MIN = 256 * 1024  # below this, scanning the whole text is already fast
CONTEXT_LINES = 3  # kept around each candidate line: patterns and extractors may look a few lines on


def match(text: Text, *, max_count: int = 10_000) -> list[SignatureMatch]:
    """Every signature found in ``text``, worst first, then in order of first appearance.

    Generic entries are dropped when a more specific one that supersedes them matched too
    (an NCCL watchdog timeout hides the generic "NCCL error" entry).  A long text is first cut
    down to the lines that can match (``textscan.line_spans``); line numbers still refer to ``text``.  Lines a
    terminal hard-wrapped mid-word, or a table cell continued on the next row, are joined again for a second
    pass (:func:`rejoined`), so a wrapped message is still found at the line where it starts.
    """
    if not text:
        return []
    last = _LAST[0]
    if last is not None and last[0] is text and last[1] == max_count:  # explain and its checks: same text
        return [copy.deepcopy(sm) for sm in last[2]]
    found = _match_long(text, max_count) if len(text) >= PREFILTER_MIN else None
    if found is None:
        whole = as_str(text)
        found = _match(whole, whole.lower(), max_count)
    joined = rejoined(text)
    if joined:
        found = _with_rejoined(joined, found, max_count)
    _LAST[0] = (text, max_count, tuple(copy.deepcopy(sm) for sm in found))  # one atomic store
    return found


def _with_rejoined(
    joined: list[tuple[int, str]], found: list[SignatureMatch], max_count: int
) -> list[SignatureMatch]:
    """Add what only the rejoined lines show, at the line where each message starts."""
    jtext = "\n".join(t for _, t in joined)
    first_line = [n for n, _ in joined]
    extra = _match(jtext, jtext.lower(), max_count, skip={sm.id for sm in found})
    if not extra:
        return found
    for sm in extra:
        sm.line_no = first_line[sm.line_no - 1] + 1
        sm.count = 1
    both = found + extra
    by_id = {s.id: s for s in signatures()}
    hidden = {x for sm in both for x in by_id[sm.id].supersedes if x != sm.id}
    kept = [sm for sm in both if sm.id not in hidden]
    kept.sort(key=lambda sm: (-_SEVERITY_RANK.get(sm.severity, 1), sm.line_no))
    return kept


_LAST: list[tuple[Text, int, tuple[SignatureMatch, ...]] | None] = [None]  # the last call's text and matches


def _match_long(text: Text, max_count: int) -> list[SignatureMatch] | None:
    """The prefiltered match of a long text, or None when the prefilter would not save time."""
    found = line_hits(text, _triggers())  # one grep -F -i, shared with the segmenting reader
    if found is None:
        return None
    data = found.data
    spans = line_spans(data, [(line, off) for line, off, _ in found.lines], CONTEXT_LINES)
    kept = sum(e - s for s, e, _ in spans)
    if kept == 0:
        return []
    if kept < len(data) // 2:
        return _match_spans(data, spans, max_count, [b for _, _, b in found.lines])
    return None


def _match_spans(
    data: bytes, spans: list[tuple[int, int, int]], max_count: int, hit_lines: list[bytes] | None = None
) -> list[SignatureMatch]:
    """``_match`` over the candidate spans; ``hit_lines``: the bytes of the lines holding a trigger (all
    inside the spans), on which the needles are tested when that gives the same answers."""
    sub = b"".join(data[s:e] for s, e, _ in spans).decode(
        "utf-8", "surrogateescape"
    )  # whole lines: no split character
    lower, lines = _needle_text(sub, hit_lines)
    found = _match(sub, lower, max_count, trigger_lines=lines)
    # line numbers in ``sub`` -> in the whole text: each span knows its first line (from grep's -n), so
    # only the newlines inside the spans are counted, not those of the whole text
    sub_lines_before: list[int] = []
    text_lines_before: list[int] = []
    acc = 0
    for s, e, first in spans:
        text_lines_before.append(first)
        sub_lines_before.append(acc)
        acc += data.count(b"\n", s, e)
    for sm in found:
        k = bisect.bisect_right(sub_lines_before, sm.line_no - 1) - 1
        sm.line_no = text_lines_before[k] + (sm.line_no - 1 - sub_lines_before[k]) + 1
    return found


def _match(
    text: str,
    lower: str,
    max_count: int,
    skip: frozenset[str] | set[str] = frozenset(),
    *,
    trigger_lines: str | None = None,
) -> list[SignatureMatch]:
    """``lower``: the text the needles are tested on; ``trigger_lines``: ``text``'s lines that hold a
    trigger, when ``lower`` is theirs (:func:`_needle_text`)."""
    newlines: list[int] | None = None
    found: list[tuple[int, SignatureMatch]] = []
    has = _needle_test(lower)
    firsts = _Firsts(text, trigger_lines)
    for sig in signatures():
        if sig.id in skip or not any(has(n) for n in sig.needles):
            continue
        first, starts = _occurrences(sig, text, max_count, firsts)
        if first is None:
            continue
        if newlines is None:
            newlines = _newlines(text)
        lines = {bisect.bisect_left(newlines, p) for p in starts}
        line = _line_at(text, first.start())
        sm = SignatureMatch(
            id=sig.id,
            category=sig.category,
            title=sig.title,
            cause=sig.cause,
            fix=sig.fix,
            source=sig.source,
            matched_line=line[:MAX_LINE],
            severity=sig.severity,
            code=sig.code,
            line_no=bisect.bisect_left(newlines, first.start()) + 1,
            count=max(1, len(lines)),
        )
        ext = EXTRACTORS.get(sig.extract or "")
        if ext is not None:
            try:
                ext(text, first, sm)
            except Exception:  # a hint is a bonus; the match stands without it
                pass
        found.append((first.start(), sm))
    hidden: set[str] = set()
    by_id = {s.id: s for s in signatures()}
    for sid in {sm.id for _, sm in found}:
        hidden.update(x for x in by_id[sid].supersedes if x != sid)
    result = [(pos, sm) for pos, sm in found if sm.id not in hidden]
    result.sort(key=lambda t: (-_SEVERITY_RANK.get(t[1].severity, 1), t[0]))
    return [sm for _, sm in result]


def _needle_text(sub: str, hit_lines: list[bytes] | None) -> tuple[str, str | None]:
    """The lower-cased text the needles are tested on: ``sub.lower()``, or only its trigger lines' (then
    with those lines as they are).

    Every needle holds a trigger and no line break, so a needle in ``sub.lower()`` sits on a line grep
    found (ASCII case-insensitive) for its trigger: when every needle is ASCII and ``sub`` holds no
    character that ``str.lower()`` turns into ASCII, those lines alone give the same answer for each
    needle, from a fraction of the text (on the bench log, ~1/7)."""
    if hit_lines is None or not _ascii_needles() or not exact_fold(sub):
        return sub.lower(), None
    lines = b"\n".join(hit_lines).decode("utf-8", "surrogateescape")
    return lines.lower(), lines


@cache
def _ascii_needles() -> bool:
    return all(n.isascii() and "\n" not in n for s in signatures() for n in s.needles)


def _needle_test(lower: str) -> Callable[[str], bool]:
    """``has(needle)``: whether ``lower`` holds it, every needle found in one pass (``multifind``)."""
    return multifind.present(lower, _all_needles()).__contains__


@cache
def _all_needles() -> tuple[str, ...]:
    return tuple(sorted({n for s in signatures() for n in s.needles}))


def _occurrences(
    sig: Signature, text: str, max_count: int, firsts: _Firsts
) -> tuple[re.Match[str] | None, list[int]]:
    """The first match of ``sig`` in ``text`` and the start of every occurrence (up to ``max_count``).
    ``firsts``: where each leading literal looked up so far first occurs in ``text`` (-1: nowhere), shared
    by the signatures of one text (many patterns start with the same literal)."""
    first: re.Match[str] | None = None
    starts: list[int] = []
    for src, lit, alts in zip(sig.regexes, _starts(sig.regexes), _alt_starts(sig.regexes), strict=True):
        at = {a: firsts.at(a) for a in ((lit,) if lit else alts or ())}
        if at and max(at.values()) < 0:
            continue  # every match starts with it (one of them): nothing to scan for (nor to compile)
        rx, fast = _pattern(src), _fast_pattern(src)
        if fast is not None:
            # same lines as rx (a line holds rx's match iff it holds fast's); rx itself runs once,
            # from the first such line's start, for the match object the extractors and line use
            lo = None
            for m in _finditer(fast, text, at):
                ls = text.rfind("\n", 0, m.start()) + 1
                if lo is None:
                    lo = ls
                if not starts or starts[-1] != ls:
                    starts.append(ls)
                if len(starts) >= max_count:
                    break
            m0 = rx.search(text, lo) if lo is not None else None
            if m0 is not None and (first is None or m0.start() < first.start()):
                first = m0
            continue
        for m in _finditer(rx, text, at):
            if first is None or m.start() < first.start():
                first = m
            starts.append(m.start())
            if len(starts) >= max_count:
                break
    return first, starts


class _Firsts:
    """Where each leading literal first occurs in ``text`` (-1: nowhere), looked up once per text.

    A literal holding a trigger can only be on a line grep found for it: when ``trigger_lines`` (those
    lines) lack it, so does ``text``, known from a search of a seventh of it (most literals looked up are
    absent: each was a search of all of ``text``)."""

    def __init__(self, text: str, trigger_lines: str | None) -> None:
        self.text, self.lines = text, trigger_lines
        self.known: dict[str, int] = {}

    def at(self, lit: str) -> int:
        i = self.known.get(lit)
        if i is None:
            absent = self.lines is not None and _holds_trigger(lit) and lit not in self.lines
            i = self.known[lit] = -1 if absent else self.text.find(lit)
        return i


@cache
def _holds_trigger(lit: str) -> bool:
    """An ASCII literal holding a trigger (ASCII case folded, as grep found its lines)."""
    low = lit.lower()
    return lit.isascii() and any(t in low for t in _triggers())


def _finditer(rx: re.Pattern[str], text: str, at: dict[str, int]) -> Iterator[re.Match[str]]:
    """``rx.finditer(text)``, its matches all starting with one of the literals of ``at`` (each with its
    first occurrence; none: anywhere): str.find goes to each, match tries it."""
    if len(at) > 1:
        yield from _finditer_any(rx, text, at)
        return
    if not at:
        yield from rx.finditer(text)
        return
    ((lit, i),) = at.items()
    find, match = text.find, rx.match
    while i >= 0:
        m = match(text, i)
        if m is None:
            i = find(lit, i + 1)
        else:
            yield m
            i = find(lit, max(m.end(), i + 1))


def _finditer_any(rx: re.Pattern[str], text: str, at: dict[str, int]) -> Iterator[re.Match[str]]:
    """``_finditer`` for several leading literals: the next occurrence of each, tried in order."""
    nxt = dict(at)
    while live := [p for p in nxt.values() if p >= 0]:
        i = min(live)
        m = rx.match(text, i)
        start = i + 1 if m is None else max(m.end(), i + 1)
        if m is not None:
            yield m
        for a, p in nxt.items():
            if 0 <= p < start:
                nxt[a] = text.find(a, start)


def primary(text: Text) -> SignatureMatch | None:
    """The single most important match (what the run supervisor records as the cause)."""
    ms = match(text)
    return ms[0] if ms else None


def _newlines(text: str) -> list[int]:
    out: list[int] = []
    i = text.find("\n")
    while i >= 0:
        out.append(i)
        i = text.find("\n", i + 1)
    return out


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    if end < 0:
        end = len(text)
    return text[start:end].strip()


# ---------------------------------------------------------------- extractors (numbers -> hints)
