"""What a rerun may reuse of an interrupted download: the state snapshot plus the progress journal.

Why two files.  ``FILE.gpuclinic-state`` is a JSON snapshot (piece bitmap, partial pieces, size,
ETag), replaced atomically; rebuilding and renaming it costs ~0.3 ms, so it cannot follow every
write of a fast download, and whatever was written since the last snapshot used to be fetched
again after a kill -9 (~1 MiB at 80 MiB/s).  ``FILE.gpuclinic-journal`` closes that gap cheaply:
one 24-byte record (epoch, first valid byte, end of the bytes written) per request, rewritten in
place with one ``pwrite`` right after the data ``pwrite`` it describes.  A record therefore never
claims a byte that is not in the part file (both live in the page cache, which a kill -9 keeps).
It lags the part file by less than ``JOURNAL_STEP`` per connection (reads smaller than that are
recorded together), or by one read in the rare case that the interpreter switches threads between
the two writes.

Both writes go through ``write_at``, which keeps the GIL: with ``os.pwrite`` each write releases
it, and with 30+ busy connection threads the writer waited milliseconds to get it back between
the data and its record, so at a kill -9 a third of the connections had a chunk (32 KiB on the
bench link) on disk but not in the journal.

A record counts only if its epoch equals the snapshot's ``"journal"`` field.  Every run (and every
sha256 mismatch that throws pieces away) starts a new epoch by writing a snapshot that already
holds all older claims, so the rename that publishes the snapshot also voids the older records.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import json
import os
import random
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOURNAL_SUFFIX = ".gpuclinic-journal"
STATE_VERSION = 1
JOURNAL_STEP = 16 * 1024  # at most this much of a connection's writes is not yet in the journal
_REC = struct.Struct("<QQQ")  # epoch, valid_from, end (exclusive)


def _libc_pwrite() -> Callable[[int, bytes, int, int], int] | None:
    """libc's pwrite called through ``ctypes.PyDLL``, i.e. without releasing the GIL."""
    try:
        lib = ctypes.PyDLL(None, use_errno=True)
        fn = getattr(lib, "pwrite64", None) or lib.pwrite
    except (OSError, AttributeError, TypeError):  # no libc to call (e.g. Windows): os.pwrite
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int64]
    fn.restype = ctypes.c_ssize_t
    return fn


_PWRITE = _libc_pwrite()


def write_at(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``; no other thread runs meanwhile (see the module doc)."""
    view = memoryview(data)
    while view:
        if _PWRITE is None or not isinstance(data, bytes):
            n = os.pwrite(fd, view, offset)
        else:
            n = _PWRITE(fd, view.tobytes() if len(view) != len(data) else data, len(view), offset)
            if n < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                raise OSError(err, os.strerror(err))
        if n == 0:
            raise OSError(errno.EIO, "short write to the partial file")
        view, offset = view[n:], offset + n


def new_epoch() -> int:
    return random.getrandbits(63) | 1  # never 0: a zeroed record never matches


class Journal:
    """The progress journal of one file; ``record`` is called by many workers, one slot each."""

    def __init__(self, path: Path, epoch: int) -> None:
        self.path = path
        self.epoch = epoch
        self._lock = threading.Lock()  # a record never races the close (the fd number could be reused)
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def record(self, slot: int, valid_from: int, end: int) -> None:
        with self._lock:
            if self._fd is not None:
                write_at(self._fd, _REC.pack(self.epoch, valid_from, end), slot * _REC.size)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None


def read_claims(path: Path, epoch: int) -> list[tuple[int, int]]:
    """The byte ranges ``[valid_from, end)`` the journal says are in the part file."""
    try:
        raw = path.read_bytes()
    except OSError:
        return []
    out = []
    for off in range(0, len(raw) - _REC.size + 1, _REC.size):
        e, a, b = _REC.unpack_from(raw, off)
        if e == epoch and a < b:
            out.append((a, b))
    return out


@dataclass
class Saved:
    """A parsed snapshot with the journal's claims merged in."""

    doc: dict[str, Any]
    size: int
    piece: int
    done: bytearray  # one byte per piece
    partial: dict[int, int]  # piece -> valid bytes from its start

    @property
    def npieces(self) -> int:
        return max(1, -(-self.size // self.piece))

    def piece_len(self, i: int) -> int:
        return min(self.size, (i + 1) * self.piece) - i * self.piece

    def recorded(self) -> int:
        """Bytes of the file this state says are on disk."""
        return sum(self.piece_len(i) for i in range(self.npieces) if self.done[i]) + sum(
            self.partial.values()
        )


def load(state_path: Path, journal_path: Path) -> Saved | None:
    """The snapshot at ``state_path`` plus the matching journal records; None if absent or malformed."""
    try:
        doc = json.loads(state_path.read_text())
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
            return None
        size, piece = int(doc["size"]), int(doc["piece"])
        if size < 0 or piece <= 0:
            return None
        s = Saved(doc, size, piece, bytearray(max(1, -(-size // piece))), {})
        bits = base64.b64decode(doc["done"])
        for i in range(s.npieces):
            if bits[i // 8] >> (i % 8) & 1:
                s.done[i] = 1
        for k, v in doc.get("partial", {}).items():
            i, valid = int(k), int(v)
            if 0 <= i < s.npieces and not s.done[i] and 0 < valid < s.piece_len(i):
                s.partial[i] = valid
        epoch = doc.get("journal")
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    if isinstance(epoch, int) and epoch:
        for a, b in read_claims(journal_path, epoch):
            merge(s, a, min(b, size))
    return s


def merge(s: Saved, a: int, b: int) -> None:
    """Add the claim that bytes ``[a, b)`` are on disk: whole pieces become done, the piece holding
    ``b`` becomes partial when the claim covers it from its start."""
    first = -(-a // s.piece)  # the first piece starting inside the claim
    for i in range(first, s.npieces):
        start = i * s.piece
        if start >= b:
            break
        if start + s.piece_len(i) <= b:
            s.done[i] = 1
            s.partial.pop(i, None)
        elif not s.done[i]:
            s.partial[i] = max(s.partial.get(i, 0), b - start)
    # a claim starting inside a piece extends that piece's recorded prefix when they touch
    i = a // s.piece
    if a % s.piece and i < s.npieces and not s.done[i] and s.partial.get(i, 0) >= a - i * s.piece:
        end = min(b, i * s.piece + s.piece_len(i))
        if end - i * s.piece >= s.piece_len(i):
            s.done[i] = 1
            s.partial.pop(i, None)
        else:
            s.partial[i] = max(s.partial[i], end - i * s.piece)


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Replace ``path`` with ``doc`` in one rename (a reader sees the old or the new file)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
