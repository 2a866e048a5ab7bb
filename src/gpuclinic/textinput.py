"""A text input for ``explain`` (a file, or stdin): bytes of any kind -> one text, capped in size, with a
one-line error for what is not text.  A big plain-text file's grep scans start here, before it is decoded."""

from __future__ import annotations

import io
import os
import stat
import sys
from typing import BinaryIO

from gpuclinic import bigtext, grepinput, scanplan, textscan
from gpuclinic.bigtext import BigText, Text
from gpuclinic.errors import InputError

MAX_INPUT = 64 * 1024 * 1024  # bytes read from a file or stdin (logs beyond this are cut, with a note)
HEAD_KEEP = 1024 * 1024  # of a longer input: this much of its start, the rest from its end


def decode(data: bytes) -> str:
    """Bytes of any kind -> text: gunzip if gzip, UTF-8 (UTF-16 with BOM) with replacement, NULs dropped."""
    if data[:2] == b"\x1f\x8b":
        import gzip  # (only a compressed input pays for its import)

        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                data = gz.read(MAX_INPUT)
        except (OSError, EOFError, gzip.BadGzipFile):
            pass
    sample = data[2:402]
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") and sample.count(b"\x00") * 3 >= len(
        sample
    ):  # UTF-16 text (PowerShell)
        text = data.decode("utf-16", "replace")
        return text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
    else:
        if b"\x00" not in data and b"\r" not in data:  # the text is exactly these bytes: keep them for the
            textscan.remember(text, data)  # whole-text search (saves encoding a big log again)
            return text
    if b"\x00" in data:  # (searched in the bytes: a byte scan is cheaper than a pass over the text)
        text = text.replace("\x00", "")
    if b"\r" in data:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def read_input(path: str | None, stdin: BinaryIO | None = None) -> tuple[Text, str, bool]:
    """(text, origin, truncated) from a file or ``-``/None for stdin; a big plain UTF-8 text comes as a
    :class:`~gpuclinic.bigtext.BigText` (its lines without one 38 MB string)."""
    if path in (None, "-"):
        src = stdin if stdin is not None else sys.stdin.buffer
        data, truncated = _read_capped(src)
        origin = "<stdin>"
    else:
        assert path is not None
        try:
            with open(path, "rb") as fh:
                before = os.fstat(fh.fileno())
                data, truncated = _read_capped(fh)
            if stat.S_ISREG(before.st_mode) and len(data) == before.st_size and not truncated:
                grepinput.remember_file(data, path, grepinput.file_ident(before))
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory; give a file or - for stdin") from None
        except FileNotFoundError:
            raise InputError(f"{path}: no such file") from None
        except PermissionError:
            raise InputError(
                f"{path}: permission denied (try sudo, or pipe it: sudo cat {path} | gpuclinic explain -)"
            ) from None
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
        origin = path
    text = _scan_ahead(data) or decode(data)
    if not text or _isspace(text):  # (not strip(): that copies a big log)
        raise InputError(f"{origin}: empty input; paste the error text or give a log file")
    if _looks_binary(text):
        raise InputError(f"{origin}: binary data, not text; give a log, a traceback or nvidia-smi output")
    return text, origin, truncated


def _scan_ahead(data: bytes) -> BigText | None:
    """Start the segmenting reader's two grep scans of a big plain-text input before it is decoded (they
    become the decoded text's when it is exactly these bytes: ``textscan.remember``), from the last run's
    plan (``scanplan``) before the readers load, else from the readers; that text when it is exactly these
    bytes (valid UTF-8, no NUL, no carriage return), as a :class:`BigText`."""
    if data[:2] in (b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff"):
        return None
    plan = scanplan.cached()
    if plan is not None:
        if len(data) < plan[0]:
            return None
        textscan.start_scans_of_bytes(data, plan[1], plan[2])
    else:
        from gpuclinic.sources import segments

        if len(data) < segments.PREFETCH_CHARS:
            return None
        segments.prefetch_bytes(data)
    if b"\x00" in data or b"\r" in data:
        return None
    text = bigtext.from_bytes(data)
    if text is not None:
        textscan.remember(text, data)
    return text


def _isspace(text: Text) -> bool:
    return text.isspace() if isinstance(text, str) else all(p.isspace() for p in text.pieces)


def _read_capped(fh: BinaryIO) -> tuple[bytes, bool]:
    """At most MAX_INPUT bytes: all of it, or for a longer log its start (environment headers)
    and its end (the crash that ended a run is the last thing it printed)."""
    want = _read_size(fh)
    data = fh.read(want)
    if len(data) == want <= MAX_INPUT:  # a file that grew since its size was taken
        data += fh.read(MAX_INPUT + 1 - want)
    if len(data) <= MAX_INPUT:
        return data, False
    if data[:2] == b"\x1f\x8b":
        return data[:MAX_INPUT], True  # compressed: a head and a tail would not decompress
    keep = MAX_INPUT - HEAD_KEEP
    try:
        size = os.fstat(fh.fileno()).st_size
        regular = stat.S_ISREG(os.fstat(fh.fileno()).st_mode)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        regular = False
    if regular and size > MAX_INPUT:
        fh.seek(size - keep)
        tail = bytearray(fh.read(keep))
    else:  # a pipe: stream through, keeping the last `keep` bytes
        tail = bytearray(data[HEAD_KEEP:])
        while chunk := fh.read(1 << 22):
            tail += chunk
            if len(tail) > keep + (8 << 20):
                del tail[: len(tail) - keep]
        del tail[: max(0, len(tail) - keep)]
    nl = tail.find(b"\n")
    if 0 <= nl < 65536:
        del tail[: nl + 1]  # start at a whole line
    return data[:HEAD_KEEP] + b"\n[... gpuclinic: middle of the input left out ...]\n" + bytes(tail), True


def _read_size(fh: BinaryIO) -> int:
    """How much the first read asks for: a regular file's size and one byte (that byte says whether it
    grew past ``MAX_INPUT``), capped at ``MAX_INPUT + 1``.  ``read(MAX_INPUT + 1)`` of a 19 MB log
    allocated 64 MiB and shrank it afterwards: ~12 ms of page faults and copying."""
    try:
        st = os.fstat(fh.fileno())
        if stat.S_ISREG(st.st_mode):
            return min(max(st.st_size - fh.tell(), 0) + 1, MAX_INPUT + 1)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
    return MAX_INPUT + 1


def _looks_binary(text: Text) -> bool:
    """Mostly control characters or undecodable bytes: a model file or core dump, not a log."""
    sample = bigtext.head(text, 8192)
    bad = sum(1 for c in sample if c == "\ufffd" or (c < " " and c not in "\n\t\f\x1b"))
    return bad * 10 > len(sample)
