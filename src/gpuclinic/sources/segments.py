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

from gpuclinic.errors import InputError
from gpuclinic.facts.evidence import InputRecord, Segment
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import dcgm_dmon, signals
from gpuclinic.sources.kernellog import is_kernel_line, parse_numbered
from gpuclinic.sources.kernellog.formats import _KERNEL_MARKS, _RE_KERNEL_LINE
from gpuclinic.sources.merge import apply_dump
from gpuclinic.sources.smi_common import SmiDump, mark_lost, scan_error_lines

MAX_UNREAD = 200
_ERROR_RES = re.compile(
    r"NVIDIA-SMI has failed|Failed to initialize NVML|No devices were found|Unable to (?:determine|detect) "
    r"the device handle|"
    r"Driver/library version mismatch|NVML library version|GPU access blocked by the operating system|"
    r"Unable to find NVIDIA driver|NVIDIA driver is not loaded|nvidia-smi: (?:command )?not found|"
    r"command not found: nvidia-smi",
    re.I,
)
_NVML_LIB = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")
_PROMPT = re.compile(
    r"^\s*(?:(?:\(\S+\)\s*)?\S+@[\w.-]+(?::[^$#\s]*)?\s?[$#]|[$#]|PS [A-Z]:\\[^>]*>|>>>|\w+>)\s+\S"
)
_QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+")
_ANY_QUOTE = re.compile(r"^\s*>", re.M)  # a superset of the lines _QUOTE may strip
_JSON = re.compile(r"^\s*\{.*\}\s*,?\s*$")
_METRIC = re.compile(
    r"^(?:# (?:HELP|TYPE) "
    r"\S+|[A-Za-z_:][\w:]*(?:\{.*\})?\s+[-+]?(?:\d[\d.eE+-]*|NaN|[+-]?Inf)(?:\s+\d+)?)\s*$"
)
_SENSORS_U = re.compile(
    r"^\s+(?:temp|fan|in|curr|power|energy|humidity|intrusion)\d+_\w+:\s"
)  # `sensors -u`, not metrics
_JOURNAL_FIELD = re.compile(r"^_{0,2}[A-Z][A-Z0-9_]*=")
_STRUCTURED = {"smi_text", "smi_xml", "smi_table", "smi_csv", "smi_nvlink", "smi_topo", "lspci"}

ApplyRest = Callable[[Snapshot, str, str, str], None]
Detect = Callable[[str], "str | None"]


def classify(line: str) -> str:
    """The class of one line: blank, kernel_log, smi_error, prompt, json, metrics, journal_export or other."""
    s = line.strip()
    if not s:
        return "blank"
    if is_kernel_line(line):
        return "kernel_log"
    if _ERROR_RES.search(line) and len(s) < 500 and not s.startswith("|"):
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
# Lower-case keywords of _ERROR_RES (searched in lower-cased text); the characters that re.I also folds
# onto ASCII letters make the whole input take the exact per-line path.
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
_LINE_STARTS = re.compile(
    "\n(?="
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

_BLANK_LINE = re.compile(r"\n(?=[^\S\n]*\n)")


def classify_all(lines: list[str], text: str | None = None, low: str | None = None) -> list[str]:
    """``[classify(ln) for ln in lines]``, linear and cheap on big inputs: whole-text literal and
    line-start scans find the few candidate lines; every other line is "blank" or "other".
    ``text``/``low``: the lines joined with newlines, and that lower-cased, when the caller has them."""
    if len(lines) < 2000:
        return [classify(ln) for ln in lines]
    text = "\n".join(lines) if text is None else text
    low = text.lower() if low is None else low
    if any(f in text for f in _FOLDS) or low.count("\n") != len(lines) - 1:
        return [classify(ln) for ln in lines]
    starts = list(itertools.accumulate((len(ln) + 1 for ln in lines), initial=0))
    cands: set[int] = set()
    for body, keys in ((text, _KERNEL_MARKS), (low, _ERROR_KEYS)):
        # lower() never shortens a character, so equal lengths mean equal offsets
        bstarts = (
            starts
            if body is text or len(low) == len(text)
            else list(itertools.accumulate((len(ln) + 1 for ln in low.split("\n")), initial=0))
        )
        for key in keys:
            i = body.find(key)
            while i != -1:
                k = bisect_right(bstarts, i) - 1
                cands.add(k)
                i = body.find(key, bstarts[k + 1])
    for m in _LINE_STARTS.finditer("\n" + text):
        cands.add(bisect_right(starts, m.start()) - 1)
    classes = ["other"] * len(lines)
    for m in _BLANK_LINE.finditer("\n" + text + "\n"):  # lines that strip() to nothing
        classes[bisect_right(starts, m.start()) - 1] = "blank"
    for k in cands:
        classes[k] = classify(lines[k])
    return classes


# What a line of each structured format looks like: prose pasted after a dump is not part of it.
_FITS = {
    "smi_table": re.compile(r"^\s*[|+]|^\s*[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d .*\d{4}\s*$"),
    "smi_text": re.compile(
        r"^\s+\S|^[^:]{1,60}\s:\s?|^=+\s*NVSMI LOG\s*=+|^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f:.]+\s*$"
    ),
    "smi_xml": re.compile(r"^\s*<"),
    "smi_csv": re.compile(r","),
    "lspci": re.compile(r"^\s|^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] "),
    "smi_nvlink": re.compile(r"^\s|^GPU \d+:"),
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


def _label(run: list[str], detect: Detect) -> str:
    text = "\n".join(run)
    if (
        "Health Monitor Report" in text
        or "dcgmi" in text
        or ("Diagnostic" in text and re.search(r"^\|\s*Diagnostic\s*\|", text, re.M))
    ) and "NvLink Link Status" not in text:  # `dcgmi nvlink --link-status` is link state: smi_nvlink reads it
        return "dcgm"
    if text.lstrip().startswith("Traceback (most recent call last)"):
        return "traceback"
    kind = detect(text[:_LABEL_BYTES])
    return kind if _structured(kind) else "text"


def _structured(kind: str | None) -> TypeGuard[str]:
    """A format parser's kind, including the server-room formats (``room:ipmitool`` ...,
    sources/bmc/formats.py)."""
    return kind in _STRUCTURED or (kind or "").startswith("room:")


def read_lines(  # noqa: C901  (split pending, issue 14)
    snap: Snapshot,
    lines: list[str],
    origin: str,
    *,
    detect: Detect,
    apply_rest: ApplyRest,
    error_signatures: bool = True,
    year: int | None = None,
) -> InputRecord:
    """Read one text input (already split into lines) into ``snap``; return how it was read.

    Raises ``ValueError`` when no reader could use any of it (the caller's "not recognised").
    """
    rec = InputRecord(input=origin, kind="text", lines=len(lines))
    # a quoted excerpt inside an unquoted paste ("> [ 12.3] NVRM: ..."): read the line without its markers
    if _ANY_QUOTE.search("\n".join(lines)):
        lines = [
            _QUOTE.sub("", ln, count=1)
            if ln.lstrip().startswith(">") and not ln.lstrip().startswith(">>>")
            else ln
            for ln in lines
        ]
    joined = low = None
    if len(lines) >= 2000:  # one join and one lower-casing, shared by the classifier and the signatures
        joined = "\n".join(lines)
        low = joined.lower()
    classes = classify_all(lines, joined, low)
    claimed: set[int] = set()  # 1-based line numbers some reader used

    # 1. segments: runs of one class (blank lines join the run they sit in)
    runs: list[tuple[str, int, int]] = []
    for i, c in enumerate(classes, start=1):
        if c == "blank":
            continue
        if (
            runs and runs[-1][0] == c
        ):  # every line since the run's last one is blank (others start or extend runs)
            runs[-1] = (c, runs[-1][1], i)
        else:
            runs.append((c, i, i))
    segs: list[Segment] = []
    for c, a, b in runs:
        kind = _label(lines[a - 1 : b], detect) if c == "other" else c
        segs.extend(_trim(kind, lines, a, b) if kind in _FITS else [Segment(kind=kind, first=a, last=b)])
    rec.segments = segs

    # 2. kernel-log lines, wherever they are, through one stateful parser (multi-line messages)
    kernel = [
        (i, ln)
        for i, ln in enumerate(lines, start=1)
        if classes[i - 1] in ("kernel_log", "journal_export")
        and (classes[i - 1] == "kernel_log" or ln.startswith("MESSAGE="))
    ]
    if kernel:
        snap.kernel_events.extend(
            parse_numbered(
                ((i, ln[8:] if ln.startswith("MESSAGE=") else ln) for i, ln in kernel), origin, year=year
            )
        )
        snap.kernel_log_read = True
        if origin not in snap.kernel_log_sources:
            snap.kernel_log_sources.append(origin)
        claimed.update(i for i, c in enumerate(classes, start=1) if c in ("kernel_log", "journal_export"))
        _reader(rec, segs, ("kernel_log", "journal_export"), "kernellog")

    # 3. nvidia-smi's error statements
    errs = [(i, ln) for i, ln in enumerate(lines, start=1) if classes[i - 1] == "smi_error"]
    if errs:
        _smi_errors(snap, [ln for _, ln in errs], origin)
        claimed.update(i for i, _ in errs)
        _reader(rec, segs, ("smi_error",), "nvidia-smi errors")

    # 4. DCGM output (dcgmi diag / health tables): the driver version and GPUs it names
    for s_ in segs:
        if s_.kind == "dcgm" and s_.first is not None and s_.last is not None:
            xids = dcgm_dmon.xid_events(lines[s_.first - 1 : s_.last], origin, s_.first)  # dmon XIDER
            snap.kernel_events.extend(xids)
            if _dcgm(snap, lines[s_.first - 1 : s_.last]) or xids:
                s_.readers.append("dcgm")
                claimed.update(range(s_.first, s_.last + 1))
                if "dcgm" not in rec.readers:
                    rec.readers.append("dcgm")

    # 4b. a driver version in JSON inventories (health agents, cluster managers): "driver_version": "580.x"
    if snap.driver_version is None:
        for i, ln in enumerate(lines, start=1):
            m = _JSON_DRIVER.search(ln) if "river" in ln else None
            if m:
                snap.driver_version = m.group(1)
                claimed.add(i)
                break

    # 5. everything else, in order, as one text for the format parsers
    rest = [(i, ln) for i, ln in enumerate(lines, start=1) if classes[i - 1] in ("other", "blank")]
    rest_kind = None
    if any(classes[i - 1] == "other" for i, _ in rest):
        text = "\n".join(ln for _, ln in rest)
        rest_kind = detect(text)
        if _structured(rest_kind):
            try:
                try:
                    apply_rest(snap, rest_kind, text, origin)
                except InputError:
                    if rest_kind not in _FITS:
                        raise
                    # a line of prose inside the dump broke its syntax (a '<' in XML): read what fits the
                    # format
                    fits = _FITS[rest_kind]
                    apply_rest(snap, rest_kind, "\n".join(ln for _, ln in rest if fits.search(ln)), origin)
            except ValueError:
                rest_kind = None
            else:
                for s in segs:
                    if _structured(s.kind) and s.first is not None and s.last is not None:
                        claimed.update(range(s.first, s.last + 1))
                        s.readers.append(s.kind)
                if rest_kind not in rec.readers:
                    rec.readers.append(rest_kind)

    # 5b. `nvidia-smi -L` (GPU 0: NAME (UUID: GPU-...)): the GPUs, when no other reader named them
    if not snap.gpus:
        listed = [(i, m) for i, ln in rest if "UUID: GPU-" in ln and (m := _SMI_L.match(ln))]
        if listed:
            from gpuclinic.facts.gpu import GpuFacts

            snap.gpus.extend(
                GpuFacts(index=int(m.group(1)), name=m.group(2).strip(), uuid=m.group(3)) for _, m in listed
            )
            claimed.update(i for i, _ in listed)
            rec.readers.append("nvidia-smi -L")

    # 6. fault signatures on every line; the explain error signatures on the prose parts
    numbered = list(enumerate(lines, start=1))
    matched = signals.scan_lines(snap, numbered, origin, lowered=low)
    if matched:
        claimed |= matched
        rec.readers.append("fault signatures")
    if error_signatures:  # over every line, as explain does (they stay silent on healthy dumps: tested)
        got = signals.scan_error_signatures(
            snap, [(i, ln) for i, ln in numbered if classes[i - 1] != "blank"], origin
        )
        if got:
            claimed |= got
            matched |= got
            rec.readers.append("error signatures")
    hits = sorted(matched)
    for s in segs:
        if s.first is not None and s.last is not None and "signatures" not in s.readers:
            k = bisect_left(hits, s.first)
            if k < len(hits) and hits[k] <= s.last:
                s.readers.append("signatures")

    # 7. what nothing claimed
    nonblank = len(classes) - classes.count("blank")
    rec.unclaimed = nonblank - sum(1 for i in claimed if 0 < i <= len(classes) and classes[i - 1] != "blank")
    unread = ((i, ln) for i, ln in numbered if i not in claimed and classes[i - 1] != "blank")
    rec.unread = [[i, ln[:300]] for i, ln in itertools.islice(unread, MAX_UNREAD)]
    if rec.unclaimed == nonblank:
        raise ValueError("not recognised")
    kinds = [s.kind for s in segs if s.readers or s.kind in ("kernel_log", "smi_error")]
    main = {k for k in kinds if k not in ("prompt", "text")}
    rec.kind = (main.pop() if len(main) == 1 else "mixed") if main else (rest_kind or "text")
    return rec


_SMI_L = re.compile(r"^\s*GPU (\d{1,3}): (.+?) \(UUID: (GPU-[0-9a-fA-F-]{36})\)\s*$")
_JSON_DRIVER = re.compile(
    r'"(?:driver_version|driverVersion|DriverVersion|nvidia_driver_version)"\s*:\s*"(\d{3}\.\d+(?:\.\d+)?)"'
)
_DCGM_DRIVER = re.compile(r"^\|\s*Driver Version Detected\s*\|\s*(\d+\.\d+(?:\.\d+)?)\s*\|", re.M)
_DCGM_IDS = re.compile(r"^\|\s*GPU Device IDs Detected\s*\|\s*([0-9a-fA-F, ]+?)\s*\|", re.M)


def _dcgm(snap: Snapshot, run: list[str]) -> bool:
    """``dcgmi diag`` metadata: the driver version and one GPU per detected device id (when nothing else
    named the GPUs).  Xids in DCGM output are read by the fault signatures."""
    from gpuclinic.facts.gpu import GpuFacts

    text = "\n".join(run)
    got = False
    m = _DCGM_DRIVER.search(text)
    if m:
        snap.driver_version = snap.driver_version or m.group(1)
        got = True
    m = _DCGM_IDS.search(text)
    if m:
        ids = [x.strip() for x in m.group(1).split(",") if x.strip()]
        if ids and not snap.gpus:
            snap.gpus.extend(GpuFacts(index=i, pci_device_id=f"0x{d.lower()}") for i, d in enumerate(ids))
        got = True
    return got


def _reader(rec: InputRecord, segs: list[Segment], kinds: tuple[str, ...], name: str) -> None:
    for s in segs:
        if s.kind in kinds and name not in s.readers:
            s.readers.append(name)
    if name not in rec.readers:
        rec.readers.append(name)


def _smi_errors(snap: Snapshot, lines: list[str], origin: str) -> None:
    errors, lost = scan_error_lines(lines)
    dump = SmiDump(kind="smi_table", errors=errors)
    mark_lost(dump.gpus, lost)
    apply_dump(snap, dump, origin)
    for ln in lines:
        m = _NVML_LIB.search(ln)
        if m and snap.software is not None and m.group(1) not in snap.software.user_lib_versions:
            snap.software.user_lib_versions.append(m.group(1))


def summary(rec: InputRecord) -> dict[str, Any]:
    """A short dict for notes and tests."""
    return {
        "input": rec.input,
        "kind": rec.kind,
        "segments": [(s.kind, s.first, s.last) for s in rec.segments],
        "unclaimed": rec.unclaimed,
    }
