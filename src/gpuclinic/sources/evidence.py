"""Saved evidence files -> snapshot, for ``doctor --from``: which files, how to open them, how to merge.

Directories expand to their files, captures (tar.gz or extracted) load whole, gzip and UTF-16 text is
decoded, a kernel log too big to hold is streamed through the grep scan, and the text of every other
file goes to :mod:`gpuclinic.sources.evidence_text` (the reader ``explain`` uses too).  Several inputs
merge into one snapshot (GPUs matched by UUID, then PCI bus id), so a customer's ``nvidia-smi -q`` and
``dmesg`` together give one diagnosis.  An input we cannot use is a one-line :class:`InputError`, unless
other inputs were usable: then it is recorded in ``snap.skipped`` and the rest is diagnosed.
"""

from __future__ import annotations

import datetime
import gzip
import os
import sys
from collections.abc import Sequence

from gpuclinic.errors import InputError
from gpuclinic.facts.evidence import InputRecord, Segment
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import bugreport, kernellog, signals, smi_nvlink
from gpuclinic.sources.evidence_text import EXPECTED, SAMPLE_BYTES, _apply_bugreport, bugreport_record

# the text reader's API, re-exported: doctor's callers and tests read texts through this module too
from gpuclinic.sources.evidence_text import add_text as add_text
from gpuclinic.sources.evidence_text import detect as detect
from gpuclinic.sources.evidence_text import finish as finish
from gpuclinic.sources.evidence_text import new_snapshot as new_snapshot
from gpuclinic.sources.evidence_text import snapshot_from_text as snapshot_from_text
from gpuclinic.sources.evidence_text import unquote as unquote
from gpuclinic.sources.kernellog.grepscan import iter_keyword_lines
from gpuclinic.sources.merge import _Unrecognised, link_facts_from_pci

MAX_DUMP_BYTES = 64 * 1024 * 1024  # nvidia-smi outputs are KBs; a 64 MB "dump" is something else
MAX_JSON_BYTES = 256 * 1024 * 1024
MAX_BUNDLE_MEMBER = 256 * 1024 * 1024
MAX_FILES = 10_000


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Files named, with directories expanded to the files below them (sorted, hidden ones skipped)."""
    out: list[str] = []
    for p in paths:
        if p == "-":
            out.append(p)  # standard input
        elif os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                if is_capture_dir(root):
                    out.append(root)  # an extracted capture is one input
                    dirs[:] = []
                    continue
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if not f.startswith("."):
                        out.append(os.path.join(root, f))
                        if len(out) > MAX_FILES:
                            raise InputError(
                                f"{p}: more than {MAX_FILES} files; point --from at the evidence files"
                            )
        else:
            out.append(p)
    return out


def _read_head(path: str) -> tuple[bytes, bool]:
    """First bytes of the (decompressed) file and whether it is gzip-compressed."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic == b"\x1f\x8b":
            try:
                with gzip.GzipFile(fileobj=fh) as gz:
                    return gz.read(SAMPLE_BYTES), True
            except (OSError, EOFError) as e:
                raise _Unrecognised(f"gzip data is corrupt ({e})") from None
        return fh.read(SAMPLE_BYTES), False


def utf16_encoding(head: bytes) -> str | None:
    """ "utf-16" when the bytes are UTF-16 text (a BOM, or NULs in every other byte of ASCII), else None."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    probe = head[:512]
    if len(probe) >= 16:
        odd_nuls = probe[1::2].count(0)
        even_nuls = probe[0::2].count(0)
        if odd_nuls > len(probe) * 0.4 and even_nuls == 0:
            return "utf-16-le"
        if even_nuls > len(probe) * 0.4 and odd_nuls == 0:
            return "utf-16-be"
    return None


def _read_all(path: str, limit: int, encoding: str) -> str:
    with open(path, "rb") as fh:
        data = fh.read(limit * 2 + 2)
    if len(data) > limit * 2:
        raise _Unrecognised(f"UTF-16 text larger than {limit // (1024 * 1024)} MB")
    return data.decode(encoding, errors="replace").lstrip("\ufeff")


def _decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _looks_binary(b: bytes) -> bool:
    if not b:
        return False
    if b"\x00" in b[:8192]:
        return True
    text = _decode(b[:8192])
    bad = text.count("\ufffd")
    return bad > max(8, len(text) // 20)


def add_file(snap: Snapshot, path: str) -> str:
    """Add one file to ``snap``; returns its kind.  Raises ``_Unrecognised``/``OSError``."""
    if os.path.isdir(path) and is_capture_dir(path):
        from gpuclinic.sources.bundle import apply_bundle_dir

        apply_bundle_dir(snap, path)
        snap.input_records.append(InputRecord(input=path, kind="capture", readers=["capture"]))
        return "capture"
    head, gz = _read_head(path)
    if _is_tar(path, head, gz):
        from gpuclinic.sources.bundle import apply_bundle

        apply_bundle(snap, path)
        snap.input_records.append(InputRecord(input=path, kind="capture", readers=["capture"]))
        return "capture"
    if not head.strip():
        raise _Unrecognised("file is empty")
    enc = utf16_encoding(head)
    if enc is not None:  # `nvidia-smi -q > out.txt` in Windows PowerShell writes UTF-16
        return _add_text_or_unrecognised(snap, _read_all(path, MAX_DUMP_BYTES, enc), path)
    if _looks_binary(head):
        raise _Unrecognised("binary data")
    sample = _decode(head)
    kind = detect(sample)
    if kind == "bugreport":
        rep = bugreport.parse_path(path)
        _apply_bugreport(snap, rep)
        snap.input_records.append(bugreport_record(rep))
        return kind
    limit = MAX_JSON_BYTES if kind == "json" else MAX_DUMP_BYTES
    big = kind == "kernel_log" and unquote(sample) is sample
    with bugreport.open_text(path) as fh:
        text = fh.read((SEGMENT_LIMIT if big else limit) + 1)
    if big and len(text) > SEGMENT_LIMIT:
        # a large log (plain or compressed): stream it through the kernel-log scan (memmem, flat memory)
        snap.kernel_events.extend(kernellog.scan_path(path))
        snap.kernel_log_read = True
        if path not in snap.kernel_log_sources:
            snap.kernel_log_sources.append(path)
        readers = ["kernellog.scan"]
        if _stream_signatures(snap, path):
            readers.append("fault signatures")
        snap.input_records.append(
            InputRecord(
                input=path,
                kind="kernel_log",
                readers=readers,
                streamed=True,
                segments=[Segment(kind="kernel_log")],
            )
        )
        return "kernel_log"
    if len(text) > limit:
        raise _Unrecognised(
            f"starts like {(kind or 'text').replace('_', ' ')} but is larger than {limit // (1024 * 1024)} MB"
        )
    return _add_text_or_unrecognised(snap, text, path, year=_mtime_year(path))


SEGMENT_LIMIT = 32 * 1024 * 1024  # larger kernel logs are streamed, not segmented


def _stream_signatures(snap: Snapshot, path: str) -> bool:
    """A streamed log still meets every fault signature: the lines holding any signature's literal needle
    (found at grep speed) go through the evidence and error signatures, with their line numbers."""
    numbered = list(iter_keyword_lines(path, signals.signature_needles()))
    if not numbered:
        return False
    # Xid lines the kernel scan already turned into events must not count twice
    parsed = {
        n
        for n, ln in numbered
        if "xid" in ln.lower() and any(ev.kind in ("xid", "sxid") for ev in kernellog.parse_lines([ln]))
    }
    got = signals.scan_lines(snap, numbered, path, parsed_xid_lines=parsed)
    got |= signals.scan_error_signatures(snap, numbered, path)
    return bool(got)


def _mtime_year(path: str) -> int | None:
    try:
        return datetime.datetime.fromtimestamp(os.stat(path).st_mtime).year
    except (OSError, ValueError, OverflowError):
        return None



def _add_text_or_unrecognised(snap: Snapshot, text: str, origin: str, *, year: int | None = None) -> str:
    try:
        return add_text(snap, text, origin, year=year)
    except InputError as e:
        raise _Unrecognised(str(e).removeprefix(f"{origin}: ").split(";")[0]) from None


def _add_stdin(snap: Snapshot) -> str:
    """``--from -``: read piped output, e.g. ``nvidia-smi -q | gpuclinic doctor --from -``."""
    data = sys.stdin.buffer.read(MAX_DUMP_BYTES + 1)
    if len(data) > MAX_DUMP_BYTES:
        raise _Unrecognised(f"more than {MAX_DUMP_BYTES // (1024 * 1024)} MB on standard input")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)[:MAX_DUMP_BYTES]
        except (OSError, EOFError) as e:
            raise _Unrecognised(f"gzip data is corrupt ({e})") from None
    if not data.strip():
        raise _Unrecognised("nothing on standard input")
    enc = utf16_encoding(data[:SAMPLE_BYTES])
    text = data.decode(enc, errors="replace").lstrip("\ufeff") if enc else _decode(data)
    if enc is None and _looks_binary(data[:SAMPLE_BYTES]):
        raise _Unrecognised("binary data")
    return _add_text_or_unrecognised(snap, text, "<stdin>")


def _is_tar(path: str, head: bytes, gz: bool) -> bool:
    # ustar magic at offset 257 of the (decompressed) first block
    return len(head) >= 262 and head[257:262] == b"ustar"


def is_capture_dir(path: str) -> bool:
    """True for an extracted capture bundle (snapshot.json + a gpuclinic.capture manifest.json)."""
    man = os.path.join(path, "manifest.json")
    if not (os.path.isfile(man) and os.path.isfile(os.path.join(path, "snapshot.json"))):
        return False
    try:
        with open(man, encoding="utf-8", errors="replace") as fh:
            return '"gpuclinic.capture/' in fh.read(4096)
    except OSError:
        return False


def _dedupe_kernel_events(snap: Snapshot) -> None:
    """The same stamped log line read twice (a dmesg file and the bug report holding it) counts once."""
    seen: set[tuple[str, str, str | None]] = set()
    out = []
    for ev in snap.kernel_events:
        if ev.time is None and ev.uptime_s is None:
            out.append(ev)  # unstamped lines may legitimately repeat
            continue
        key = (ev.kind, ev.line.strip(), ev.pci_bus_id)
        if key in seen:
            continue
        seen.add(key)
        out.append(ev)
    snap.kernel_events = out


def _names_gpus_by_index_only(path: str) -> bool:
    """True for ``nvidia-smi nvlink`` output: it joins other GPUs by index, so it is read after them."""
    if path == "-" or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return smi_nvlink.looks_like(unquote(_decode(head)))


def load_evidence(paths: Sequence[str]) -> Snapshot:
    """Build one snapshot from saved evidence files and directories (``doctor --from``)."""
    if not paths:
        raise InputError("no evidence given")
    files = expand_paths(paths)
    if not files:
        raise InputError(f"{', '.join(paths)}: no files found")
    files.sort(key=_names_gpus_by_index_only)  # stable: everything else keeps its order
    snap = new_snapshot()
    failures: list[str] = []
    for name in files:
        path = "<stdin>" if name == "-" else name
        try:
            kind = _add_stdin(snap) if name == "-" else add_file(snap, path)
        except FileNotFoundError:
            failures.append(f"{path}: no such file")
            continue
        except IsADirectoryError:
            continue
        except PermissionError:
            failures.append(f"{path}: permission denied")
            continue
        except _Unrecognised as e:
            failures.append(f"{path}: {e}; expected {EXPECTED}")
            continue
        except InputError as e:
            failures.append(str(e))
            continue
        except OSError as e:
            failures.append(f"{path}: could not read ({e.strerror or e})")
            continue
        snap.inputs.append(path)
        snap.notes.append(f"input {path}: {kind}")
    if not snap.inputs:
        raise InputError(
            failures[0]
            if len(failures) == 1
            else f"{failures[0]} (and {len(failures) - 1} more unusable input(s))"
        )
    for f in failures:
        what, _, why = f.partition(": ")
        snap.skip(f"evidence {what}", why or f)
    _dedupe_kernel_events(snap)
    finish(snap)
    link_facts_from_pci(snap)
    skipped = {s.what for s in snap.skipped}
    if snap.nvml_available is None and not snap.gpus and "GPUs through NVML" not in skipped:
        snap.skip("GPUs through NVML", "the evidence has no nvidia-smi output or capture")
    if not snap.kernel_log_read and "the kernel log" not in skipped:
        snap.skip("the kernel log", "the evidence has no kernel log")
    snap.origin = "evidence"
    return snap
