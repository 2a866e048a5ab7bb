"""The segmenting reader: any text input split by content into segments, each read by every parser
that claims it, nothing dropped silently.

People paste mixtures: a shell prompt, an ``nvidia-smi`` error line, then dmesg; a table followed by
kernel lines; a Kubernetes log naming an Xid; DCGM output; JSON events.  Committing to one format per
input drops the rest (and a dead GPU can then read HEALTHY).  Here every line is classified:

* kernel-log lines in any wrapper (:func:`gpuclinic.sources.kernellog.is_kernel_line`) all go to one
  stateful kernel-log parser, wherever they sit in the input;
* nvidia-smi's error statements go to the smi error reader;
* the remaining lines keep their order and go, as one text, to the format parser ``detect`` picks
  (``-q`` text, XML, tables, CSV, nvlink, topo, lspci), so a line planted inside a dump does not cut it;
* every line is offered to the fault signatures (``sources/signals.py``), and the prose parts to the
  ``explain`` error signatures.

The :class:`~gpuclinic.facts.evidence.InputRecord` says which segments were found (kind, line range),
which readers used them, and which lines nothing claimed.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any, TypeGuard

from gpuclinic import lazyre, multifind, scanplan, textscan
from gpuclinic.bigtext import Text, as_str
from gpuclinic.errors import InputError
from gpuclinic.facts.evidence import InputRecord, Segment
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import segment_readers as R
from gpuclinic.sources import signals, sniffgates
from gpuclinic.sources.kernellog import is_kernel_line
from gpuclinic.sources.kernellog.formats import _KERNEL_MARKS, _RE_KERNEL_LINE
from gpuclinic.sources.kernellog.journal import unfold as unfold_journal
from gpuclinic.sources.linemarks import blank_lines as _blank
from gpuclinic.sources.linemarks import head_end as _head_end
from gpuclinic.sources.linemarks import quoted_lines as _quoted
from gpuclinic.sources.linemarks import quoted_lines_of as _quoted_of
from gpuclinic.sources.linemarks import rest_head as _rest_head
from gpuclinic.sources.linemarks import rest_line_at as _rest_line_at
from gpuclinic.sources.linemarks import rest_lines as _rest_lines
from gpuclinic.sources.linemarks import runs as _runs
from gpuclinic.sources.linemarks import unquote_lines as _unquote_lines

MAX_UNREAD = 200
_ERROR_RES = lazyre.compile(
    r"NVIDIA-SMI has failed|Failed to initialize NVML|No devices were found|Unable to (?:determine|detect) "
    r"the device handle|"
    r"Driver/library version mismatch|NVML library version|GPU access blocked by the operating system|"
    r"Unable to find NVIDIA driver|NVIDIA driver is not loaded|nvidia-smi: (?:command )?not found|"
    r"command not found: nvidia-smi",
    re.I,
)
_PROMPT = lazyre.compile(
    r"^\s*(?:(?:\(\S+\)\s*)?\S+@[\w.-]+(?::[^$#\s]*)?\s?[$#]|[$#]|PS [A-Z]:\\[^>]*>|>>>|\w+>)\s+\S"
)
# an `nvidia-smi -q` field whose value is an error ("        Current    : GPU access blocked by the operating
# system"): part of the dump, not an error statement of its own
_Q_VALUE = lazyre.compile(r"^\s+[A-Z][\w ./()-]{0,60}?\s:\s")
_JSON = lazyre.compile(r"^\s*\{.*\}\s*,?\s*$")
_METRIC = lazyre.compile(
    r"^(?:# (?:HELP|TYPE) "
    r"\S+|[A-Za-z_:][\w:]*(?:\{.*\})?\s+[-+]?(?:\d[\d.eE+-]*|NaN|[+-]?Inf)(?:\s+\d+)?)\s*$"
)
_SENSORS_U = lazyre.compile(
    r"^\s+(?:temp|fan|in|curr|power|energy|humidity|intrusion)\d+_\w+:\s"
)  # `sensors -u`, not metrics
_JOURNAL_FIELD = lazyre.compile(r"^_{0,2}[A-Z][A-Z0-9_]*=")
_STRUCTURED = {"smi_text", "smi_xml", "smi_table", "smi_csv", "smi_nvlink", "smi_topo", "lspci"}

ApplyRest = Callable[[Snapshot, str, str, str], None]
# a format sniffer: (sample, the sniffgates literals known to be absent from it) -> kind
Detect = Callable[[str, frozenset[str]], "str | None"]


def classify(line: str) -> str:
    """The class of one line: blank, kernel_log, smi_error, prompt, json, metrics, journal_export or other."""
    s = line.strip()
    if not s:
        return "blank"
    if is_kernel_line(line):
        return "kernel_log"
    if _ERROR_RES.search(line) and len(s) < 500 and not s.startswith("|") and not _Q_VALUE.match(line):
        return "smi_error"
    if _PROMPT.match(line):
        return "prompt"
    if _JSON.match(line):
        return "json"
    if _JOURNAL_FIELD.match(line) and "=" in s and " : " not in s:
        return "journal_export"
    if (
        _METRIC.match(s)
        and ("{" in s or s.startswith("#") or "_" in s.split()[0])
        and not _SENSORS_U.match(line)
    ):
        return "metrics"
    return "other"


# The big-input fast path of classify(): a line is "blank" or "other" unless it holds one of these
# literals or one of classify's line-start patterns matches; only those candidate lines run classify().
# Lower-case keywords of _ERROR_RES (searched with ASCII case folding); the characters that re.I or
# str.lower() also fold onto ASCII letters make the whole input take the exact per-line path.
_ERROR_KEYS = (
    "nvidia-smi",
    "nvml",
    "no devices were found",
    "unable to",
    "driver/library",
    "gpu access blocked",
    "nvidia driver",
    "command not found",
)
_FOLDS = ("\u0130", "\u0131", "\u017f", "\u212a")
_LINE_START = lazyre.compile(  # the lookahead of _LINE_STARTS, at the text's start
    "(?="
    + "|".join(
        f"(?:{p})"
        for p in (
            _RE_KERNEL_LINE.pattern[1:],
            _PROMPT.pattern[1:],
            _JSON.pattern[1:],
            _JOURNAL_FIELD.pattern[1:],
            r"\s*" + _METRIC.pattern[1:],
        )
    )
    + ")",
    re.M,
)
_LINE_STARTS = lazyre.compile("\n" + _LINE_START.pattern, re.M)
BIG = 2000  # lines: from here on, whole-text scans find the few lines worth a closer look
_DCGM_MARKS = ("Health Monitor Report", "dcgmi", "Diagnostic")


class _Index:
    """A big input as one text (its lines, before any quote markers were cut, joined with newlines: one
    more newline at its end allowed), the lines holding any literal the reader looks for (one
    multi-needle search, shared with ``explain``) and the lines whose quote markers were cut."""

    def __init__(
        self,
        lines: list[str],
        text: Text,
        hits: textscan.LineHits,
        quoted: list[int],
        pending: textscan.PendingLines | None,
    ) -> None:
        self.text = text
        self.quoted = quoted
        self.pending = pending if pending is not None and pending.text is text else None
        self.hits = hits
        self.hit_lines = [k for k, _, _ in hits.lines]
        # (the lines holding a kernel mark or smi error word, ASCII case folded: one search per needle of the
        # hit lines joined, not a lower-casing and a test per line and needle)
        self.kernel_keys = {k for k, _, _ in hits.only(_KERNEL_NEEDLES).lines}
        self.dcgm = [k for k in self.hit_lines if any(m in lines[k] for m in _DCGM_MARKS)]
        self.folds = any(f in b for _, _, b in hits.lines for f in _FOLD_BYTES)
        self._gates: tuple[list[int], list[str]] | None = None

    def absent(self, lo: int, hi: int) -> frozenset[str]:
        """The ``sniffgates`` literals no line ``lo..hi-1`` holds (ASCII case folded: grep found every line
        holding one among its hits).  The hit lines holding each are found on the first call, in one pass."""
        if self._gates is None:  # (line, literal) of each literal on each hit line, by line
            by_lower: dict[str, list[str]] = {}
            for g in sniffgates.ALL:
                by_lower.setdefault(g.lower(), []).append(g)
            on = textscan.needle_lines(self.hits)  # (gates are grep needles: no pass of theirs)
            if on is not None and all(w in on for w in by_lower):
                found = {(self.hits.lines[k][0], g) for w, gs in by_lower.items() for k in on[w] for g in gs}
            else:
                low, starts = textscan.joined_lower(self.hits)
                found = {
                    (self.hits.lines[bisect_right(starts, end) - 1][0], g)
                    for end, w in multifind.matches(low, tuple(by_lower))
                    for g in by_lower[w]
                }
            pairs = sorted(found)
            self._gates = ([k for k, _ in pairs], [g for _, g in pairs])
        at, gates = self._gates
        k = bisect_left(at, lo)
        present = set()
        while k < len(at) and at[k] < hi:
            present.add(gates[k])
            k += 1
        return _ALL_GATES.difference(present) if present else _ALL_GATES

    def lines_with(self, keys: tuple[str, ...]) -> list[int]:
        """The hit lines that may hold one of ``keys`` (ASCII case folded: a superset of the exact ones,
        which the reader re-checks): one search per key of the joined hit lines, not a test per line."""
        return [k for k, _, _ in self.hits.only(k.lower() for k in keys).lines]


_KERNEL_NEEDLES = tuple({k.lower() for k in (*_KERNEL_MARKS, *_ERROR_KEYS)})
_ALL_GATES = frozenset(sniffgates.ALL)
_FOLD_BYTES = tuple(f.encode() for f in _FOLDS)


def _needles() -> tuple[str, ...]:
    """Every literal a big input is searched for: kernel marks and smi error words (classify), the
    evidence and error signatures' needles, DCGM markers, the literals of the line readers and of the format
    sniffers (``sniffgates``: which of them a run of prose holds decides which sniffers label it)."""
    from gpuclinic.knowledge.signatures import trigger_needles

    return (
        *_KERNEL_MARKS,
        *_ERROR_KEYS,
        *signals.evidence_needles(),
        *trigger_needles(),
        *_DCGM_MARKS,
        *R.reader_keys(),
        *CONTAINS_KEYS,
        *sniffgates.ALL,
        *_FOLDS,  # (matched exactly: grep -i folds ASCII letters only)
    )


# Literals tested on a whole big text with ``textscan.contains`` (the journal records' "MESSAGE", the keys
# of explain's pasted facts): among the needles, so the answer comes from the hit lines, not another pass
# over 19 MB.
CONTAINS_KEYS = ("MESSAGE", "PyTorch version:", "torch==")


PREFETCH_CHARS = 64 * BIG  # a text this long likely has BIG lines: start its scans before splitting it


def prefetch(text: Text) -> None:
    """Start the two whole-text scans :func:`read_lines` makes of a big ``text`` (the same object, given
    as its ``text``) now, so grep runs while the caller splits the text into lines;
    ``textscan.cancel_scans()`` afterwards stops what it did not use."""
    textscan.prefetch_line_starts(text, _LINE_START.pattern)  # (first: the literal scan takes longer)
    textscan.start_line_hits(text, _needles())
    scanplan.keep(_plan())  # (the scans the next run starts before the readers load: when it changed)


def prefetch_bytes(data: bytes) -> None:
    """:func:`prefetch` of a big input's bytes before they are decoded (``textscan.start_scans_of_bytes``)."""
    textscan.start_scans_of_bytes(data, _needles(), _LINE_START.pattern)
    scanplan.keep(_plan())


def _plan() -> scanplan.Plan:
    return (PREFETCH_CHARS, _needles(), _LINE_START.pattern)


def _same_lines(data: bytes, lines: list[str]) -> bool:
    """``data`` (a text's UTF-8 bytes) split at ``\\n`` gives ``lines`` (that text's ``splitlines()``):
    true unless another line break (\\r, \\f, \\x1c, \\u2028 ...) split it too."""
    return textscan.only_newlines(data)


def _index(
    lines: list[str],
    joined: Text,
    hits: textscan.LineHits | None,
    quoted: list[int] | None = None,
    pending: textscan.PendingLines | None = None,
) -> _Index | None:
    """The whole-text index of a big input, or None (small input, or one holding a character that case
    folding maps onto ASCII: the exact per-line path).  ``joined``: the lines joined with newlines (one
    more newline at its end allowed), or the text they were before ``quoted`` lines lost their quote
    markers; ``hits``: the needle lines of that text (or of one split into the same lines), found here
    when None; ``pending``: the line-start scan of that text, when the caller started it."""
    if len(lines) < BIG:
        return None
    if hits is None:
        hits = textscan.line_hits(joined, _needles())
    if hits is None:
        return None
    ix = _Index(lines, joined, hits, quoted or [], pending)
    return None if ix.folds else ix


def classify_all(lines: list[str]) -> list[str]:
    """``[classify(ln) for ln in lines]``, linear and cheap on big inputs: whole-text literal and
    line-start scans find the few candidate lines; every other line is "blank" or "other"."""
    return _classify(lines, _index(lines, "\n".join(lines), None))[0]


def _classify(
    lines: list[str], ix: _Index | None, blank: list[int] | None = None, quoted: list[int] | None = None
) -> tuple[list[str], list[int]]:
    """The class of every line and the (0-based) lines whose class is not "other".  ``blank``: the blank
    lines found before the ``quoted`` lines lost their quote markers (those are looked at again)."""
    if ix is None:
        classes = [classify(ln) for ln in lines]
        return classes, [k for k, c in enumerate(classes) if c != "other"]
    classes = ["other"] * len(lines)
    if blank is None:
        special = set(_blank(lines))
    else:
        special = set(blank)
        for k in quoted or ():
            if lines[k].strip():
                special.discard(k)
            else:
                special.add(k)
    for k in special:  # lines that strip() to nothing
        classes[k] = "blank"
    cands = set(ix.kernel_keys)
    cands.update(ix.quoted)  # (the scans read these lines with their quote markers)
    # grep -P: the same lines, ~10x faster (started by the reader, it ran alongside the literal search)
    pending = ix.pending or textscan.start_line_starts(ix.text, _LINE_START.pattern)
    starts = pending.result()
    if starts is not None:
        cands.update(starts)
    else:
        whole = as_str(ix.text)  # (grep gave no answer: the text whole, for re's scan)
        if _LINE_START.match(whole):
            cands.add(0)
        k = pos = 0
        for m in _LINE_STARTS.finditer(whole):  # in order: count the newlines on from the last match
            k += whole.count("\n", pos, m.start() + 1)
            pos = m.start() + 1
            cands.add(k)
    cands.discard(len(lines))  # the line after a final newline
    for k in cands:
        c = classes[k] = classify(lines[k])
        if c != "other":
            special.add(k)
    return classes, sorted(special)


# What a line of each structured format looks like: prose pasted after a dump is not part of it.
_FITS = {
    "smi_table": lazyre.compile(r"^\s*[|+]|^\s*[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d .*\d{4}\s*$"),
    "smi_text": lazyre.compile(
        r"^\s+\S|^[^:]{1,60}\s:\s?|^=+\s*NVSMI LOG\s*=+|^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f:.]+\s*$"
    ),
    "smi_xml": lazyre.compile(r"^\s*(?:&nbsp;\s*)*(?:<|&lt;)"),  # (web-page pastes arrive HTML-escaped)
    "smi_csv": lazyre.compile(r","),
    "lspci": lazyre.compile(r"^\s|^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] "),
    "smi_nvlink": lazyre.compile(r"^\s|^GPU \d+:"),
}


def _trim(kind: str, lines: list[str], a: int, b: int) -> list[Segment]:
    """Split a structured run where lines stop looking like that format (a note typed after a table)."""
    fits = _FITS[kind]
    out: list[Segment] = []
    for i in range(a, b + 1):
        ln = lines[i - 1]
        if not ln.strip():
            continue
        k = kind if fits.search(ln) else "text"
        if out and out[-1].kind == k:
            out[-1].last = i
        else:
            out.append(Segment(kind=k, first=i, last=i))
    return out


# A run's label comes from its start: a format's header or first rows are there, and detecting over each
# whole run made a long training log cost one pass of every format sniffer (the rest is still read whole).
_LABEL_BYTES = 16 * 1024


def _label(lines: list[str], a: int, b: int, detect: Detect, ix: _Index | None, head: str = "") -> str:
    """The kind of the "other" run ``lines[a - 1 : b]`` (``detect``: the reader's sniffer, or one that
    gives the same structured kinds and None for the rest; ``head``: a line above the run that names its
    format, the ``nvidia-smi --query-gpu=...`` prompt of a ``csv,noheader`` paste)."""
    absent: frozenset[str] = frozenset()
    if ix is None:
        text = "\n".join(lines[a - 1 : b])
        dcgm = "Health Monitor Report" in text or "dcgmi" in text or "Diagnostic" in text
    else:  # the DCGM markers sit on lines the index found
        k = bisect_left(ix.dcgm, a - 1)
        dcgm = k < len(ix.dcgm) and ix.dcgm[k] <= b - 1
        end = _head_end(lines, _LABEL_BYTES, a - 1, b)
        text = "\n".join(lines[a - 1 : end])
        absent = ix.absent(a - 2 if head else a - 1, end)
    if dcgm:
        full = "\n".join(lines[a - 1 : b])
        if (
            (
                "Health Monitor Report" in full
                or "dcgmi" in full
                or ("Diagnostic" in full and re.search(r"^\|\s*Diagnostic\s*\|", full, re.M))
                or R.is_dcgm_json(full)  # `dcgmi diag -j`
            )
            and "NvLink Link Status" not in full
        ):  # `dcgmi nvlink --link-status` is link state: smi_nvlink reads it
            return "dcgm"
    if lines[a - 1].lstrip().startswith("Traceback (most recent call last)"):  # a run starts non-blank
        return "traceback"
    kind = detect((head + "\n" + text if head else text)[:_LABEL_BYTES], absent)
    return kind if _structured(kind) else "text"


def _command_above(lines: list[str], classes: list[str], a: int) -> str:
    """The shell prompt line right above the run starting at line ``a`` when it runs ``nvidia-smi
    --query-gpu=...`` (its columns are the run's), else ""."""
    k = a - 2
    return lines[k] if k >= 0 and classes[k] == "prompt" and "--query-gpu" in lines[k] else ""


def _structured(kind: str | None) -> TypeGuard[str]:
    """A format parser's kind, including the server-room formats (``room:ipmitool`` ...,
    sources/bmc/formats.py)."""
    return kind in _STRUCTURED or (kind or "").startswith("room:")


def read_lines(
    snap: Snapshot,
    lines: list[str],
    origin: str,
    *,
    detect: Detect,
    apply_rest: ApplyRest,
    error_signatures: bool = True,
    year: int | None = None,
    text: Text | None = None,
    sample: int | None = None,
    label: Detect | None = None,
) -> InputRecord:
    """Read one text input (already split into lines; ``text``: the input they came from, when the
    caller has it) into ``snap``; return how it was read.  ``sample``: ``detect`` looks at no more than
    this many characters; ``label``: labels the runs of prose in its stead (the same structured kinds,
    None for any other, found cheaper; given the ``sniffgates`` literals a run's head is known to lack).

    Raises ``ValueError`` when no reader could use any of it (the caller's "not recognised").
    """
    rec = InputRecord(input=origin, kind="text", lines=len(lines))
    pending = hits = None
    early: tuple[list[str], list[int]] | None = None
    if text is not None and len(lines) >= BIG:  # the line-start scan runs while the literals are searched
        pending = textscan.start_line_starts(text, _LINE_START.pattern)
        early = (lines, _blank(lines))  # (what needs no scan is done while grep still runs)
        hits = textscan.line_hits(text, _needles())
    # journal json-pretty/export/verbose and byte-array MESSAGE records (each holds "MESSAGE": one search
    # of the text, not a test per line, rules them out; of a big text, a search of its hit lines)
    if text is None or textscan.contains(text, "MESSAGE"):
        unfolded = unfold_journal(lines)
        if unfolded is not lines:  # rewritten lines: the literals found in ``text`` no longer describe them
            lines, text, hits = unfolded, None, None
            if pending is not None:
                pending.cancel()
                pending = None
    if hits is not None and not _same_lines(hits.data, lines):
        hits = None  # \r or another break split ``text`` into other lines than grep's
    elif hits is not None and text is not None:
        textscan.remember_lines(text, lines)  # explain's wrapped-line pass splits the same text
    joined = "\n".join(lines) if hits is None or text is None else text
    # (of a big text grep read: from its bytes, lines counted from grep's hit lines)
    quoted = _quoted(as_str(joined)) if hits is None else _quoted_of(hits.data, hits.lines)
    blank = early[1] if early is not None and early[0] is lines else None
    if quoted:
        lines = _unquote_lines(lines, quoted)
    # unquoting keeps every line where it was and only cuts its start: the literals found in ``joined``
    # are a superset of those in the unquoted lines, every reader re-checks its lines, and the quoted
    # lines are line-start candidates themselves (no second join of a big text)
    ix = _index(lines, joined, hits, quoted, pending)
    classes, special = _classify(lines, ix, blank, quoted)
    if pending is not None:
        pending.cancel()  # (a no-op when _classify used it)
    claimed: set[int] = set()  # 1-based line numbers some reader used
    segs: list[Segment] = []
    for c, a, b in _runs(classes, special):
        above = _command_above(lines, classes, a) if c == "other" else ""
        kind = _label(lines, a, b, label or detect, ix, above) if c == "other" else c
        segs.extend(_trim(kind, lines, a, b) if kind in _FITS else [Segment(kind=kind, first=a, last=b)])
    rec.segments = segs
    where = None if ix is None else ix.hit_lines  # lines that may hold a reader's literal
    r = R.Reading(snap, rec, lines, classes, special, origin, claimed, year)
    R.read_kernel(r)
    R.read_smi_errors(r)
    R.read_dcgm(r)
    R.read_metrics(r)
    R.read_json_driver(r, where)
    R.read_host_stats(r, where)
    R.read_k8s_nodes(r, where)
    R.read_slurm_nodes(r, where)
    R.read_net_paste(r, where if ix is None else ix.lines_with(R.NET_KEYS))
    rest_kind = _read_rest(r, ix, (detect, sample), apply_rest)
    R.read_smi_list(r, where)
    R.read_smi_dmon(r, where)
    R.read_smi_mig(r, where)
    R.read_ib_ports(r, where if ix is None else ix.lines_with(R.IB_KEYS))
    R.read_nccl_tests(r, where if ix is None else ix.lines_with(R.NCCL_TESTS_KEYS))
    R.read_dcgm_dmon(r, where)
    _read_signatures(r, ix, error_signatures)
    _unclaimed(r)
    kinds = [s.kind for s in segs if s.readers or s.kind in ("kernel_log", "smi_error")]
    main = {k for k in kinds if k not in ("prompt", "text")}
    rec.kind = (main.pop() if len(main) == 1 else "mixed") if main else (rest_kind or "text")
    return rec


def _read_rest(
    r: R.Reading, ix: _Index | None, sniff: tuple[Detect, int | None], apply_rest: ApplyRest
) -> str | None:
    """Everything else, in order, as one text for the format parsers; returns the kind read.  ``ix``: the
    big input's index."""
    snap, rec, lines, origin, claimed = r.snap, r.rec, r.lines, r.origin, r.claimed
    classes, special = r.classes, r.special
    if len(classes) == len(special):  # no "other" line
        return None
    detect, sample = sniff
    if sample is None:
        rest = _rest_lines(lines, classes, special)
        rest_kind = detect("\n".join(rest), frozenset())
    else:  # (the rest's head only: all of it is joined when it is a format's)
        head = _rest_head(lines, classes, special, sample)
        # the sniffgates literals no line up to the head's last one holds
        end = _rest_line_at(lines, classes, special, len(head))
        rest_kind = detect("\n".join(head), ix.absent(0, end) if ix is not None else frozenset())
    if not _structured(rest_kind):
        return rest_kind
    rest = _rest_lines(lines, classes, special)
    text = "\n".join(rest)
    try:
        try:
            apply_rest(snap, rest_kind, text, origin)
        except InputError:
            if rest_kind not in _FITS:
                raise
            # a line of prose inside the dump broke its syntax (a '<' in XML): read what fits the format
            fits = _FITS[rest_kind]
            apply_rest(snap, rest_kind, "\n".join(ln for ln in rest if fits.search(ln)), origin)
    except ValueError:
        return None
    for s in rec.segments:
        if _structured(s.kind) and s.first is not None and s.last is not None:
            claimed.update(range(s.first, s.last + 1))
            s.readers.append(s.kind)
    if rest_kind not in rec.readers:
        rec.readers.append(rest_kind)
    return rest_kind


def _read_signatures(r: R.Reading, ix: _Index | None, error_signatures: bool) -> None:
    """Fault signatures on every line; the explain error signatures on the prose parts."""
    snap, rec, lines, classes, origin, claimed = r.snap, r.rec, r.lines, r.classes, r.origin, r.claimed
    if ix is None:
        matched = signals.scan_lines(snap, enumerate(lines, start=1), origin)
    else:  # every line that may hold a needle is among the index's hits
        matched = signals.scan_lines(
            snap, ((k + 1, lines[k]) for k in ix.hit_lines), origin, prefiltered=True
        )
    if matched:
        claimed |= matched
        rec.readers.append("fault signatures")
    if error_signatures:  # over every line, as explain does (they stay silent on healthy dumps: tested)
        got = signals.scan_error_signatures(
            snap, [(i, ln) for i, ln in enumerate(lines, start=1) if classes[i - 1] != "blank"], origin
        )
        if got:
            claimed |= got
            matched |= got
            rec.readers.append("error signatures")
    hits = sorted(matched)
    for s in rec.segments:
        if s.first is not None and s.last is not None and "signatures" not in s.readers:
            k = bisect_left(hits, s.first)
            if k < len(hits) and hits[k] <= s.last:
                s.readers.append("signatures")


def _unclaimed(r: R.Reading) -> None:
    """What nothing claimed; ``ValueError`` when that is every non-blank line.  (The blank lines are
    among ``special``, the lines whose class is not "other": no pass over every line's class.)"""
    rec, lines, classes, special, claimed = r.rec, r.lines, r.classes, r.special, r.claimed
    nonblank = len(classes) - sum(1 for k in special if classes[k] == "blank")
    rec.unclaimed = nonblank - sum(1 for i in claimed if 0 < i <= len(classes) and classes[i - 1] != "blank")
    unread = (
        (i, ln) for i, ln in enumerate(lines, start=1) if i not in claimed and classes[i - 1] != "blank"
    )
    rec.unread = [[i, ln[:300]] for i, ln in itertools.islice(unread, MAX_UNREAD)]
    if rec.unclaimed == nonblank:
        raise ValueError("not recognised")


def summary(rec: InputRecord) -> dict[str, Any]:
    """A short dict for notes and tests."""
    return {
        "input": rec.input,
        "kind": rec.kind,
        "segments": [(s.kind, s.first, s.last) for s in rec.segments],
        "unclaimed": rec.unclaimed,
    }
