"""The download engine's data: options, file specs and results, per-file job and segment state.

Why a module of its own: the scheduler, the connection workers and the persistence code all read
and write these records; keeping them here (with the errors they raise and the disk helpers) lets
each of those layers import them without importing each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuclinic import __version__
from gpuclinic.errors import GpuclinicError
from gpuclinic.transfer.redact import redact
from gpuclinic.transfer.resume import JOURNAL_SUFFIX, Journal

MiB = 1024 * 1024
PART_SUFFIX = ".gpuclinic-part"
STATE_SUFFIX = ".gpuclinic-state"
LOCK_SUFFIX = ".gpuclinic-lock"
# Files from this size on keep a progress journal (below it a refetch costs less than the files)
JOURNAL_MIN_SIZE = 4 * MiB
# Only a tail of at least this many pieces is split between connections: the victim's response
# is closed at the cut, and what the server already sent past it (~30 KiB a steal on the bench
# link) is fetched twice; 4 pieces (1 MiB) keep that under 3 % of the stolen bytes.
STEAL_MIN_PIECES = 4


class DownloadError(GpuclinicError):
    """A download that could not complete; the message is one redacted line."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


@dataclass
class FileSpec:
    """One file to fetch.  ``sources`` are tried in order (mirrors after the primary)."""

    dest: Path
    sources: list[str]
    size: int | None = None
    sha256: str | None = None
    git_sha1: str | None = None
    label: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # sent only to the origin of sources[i]
    auth_origins: set[str] = field(default_factory=set)  # "scheme://host:port" allowed to see headers
    # per-source credentials: "scheme://host:port" -> headers for that origin only (a registry and
    # its mirrors each hold their own token; the dicts are shared and refreshed in place)
    source_headers: dict[str, dict[str, str]] = field(default_factory=dict)
    # a source answered 401: (url, its WWW-Authenticate) -> True when new credentials are in place
    # and the request is worth retrying (a registry's Bearer token renewed from the challenge's realm)
    reauth: Callable[[str, str], bool] | None = None


@dataclass
class FileResult:
    path: str
    size: int
    sha256: str | None
    seconds: float
    downloaded: int  # body bytes received in this run
    reused: int  # bytes already present from an earlier run
    source: str  # redacted URL of the source that served most bytes
    status: str  # "ok" | "skipped" | "failed"
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class EngineOptions:
    connections: int | None = None  # fixed count; None = adaptive
    initial_connections: int = 16
    max_connections: int = 64
    piece_size: int = 256 * 1024  # resume/steal granularity; grows for huge files (<= 32768 pieces)
    stall_timeout: float = 20.0  # no byte for this long => reconnect
    connect_timeout: float = 15.0
    max_retries: int = 12  # consecutive failures without progress before a source is given up
    save_fraction: float = 0.0025
    save_interval: float = 0.5
    min_free_reserve: int = 64 * MiB
    user_agent: str = f"gpuclinic/{__version__}"


class _Retryable(Exception):
    def __init__(
        self, msg: str, retry_after: float | None = None, backoff: bool = False, connect: bool = False
    ) -> None:
        super().__init__(msg)
        self.retry_after = retry_after
        self.backoff = backoff
        self.connect = connect


class _SourceFatal(Exception):
    """This source cannot serve this file (4xx, wrong size, changed object)."""


class _ObjectChanged(Exception):
    pass


class _Abandon(Exception):
    """A speculative request that turned out useless (beyond the end, or no range support)."""


SPECULATIVE_CHUNK = 4 * MiB


def _origin(url: str) -> str:
    p = urlsplit(url)
    port = p.port or {"http": 80, "https": 443}.get(p.scheme, 0)
    return f"{p.scheme}://{(p.hostname or '').lower()}:{port}"


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _git_sha1_hasher(size: int) -> Any:
    h = hashlib.sha1(b"blob %d\0" % size)
    return h


@dataclass
class _Source:
    url: str
    resolved: str | None = None
    bad: bool = False
    failing_until: float = 0.0
    last_error: str = ""
    etag: str | None = None
    fresh_failures: int = 0  # redirect targets that failed right after the origin handed them out


class _Segment:
    __slots__ = (
        "job",
        "pos",
        "end",
        "start",
        "requested_end",
        "active",
        "valid_from",
        "speculative",
        "slot",
        "logged",
        "epoch",
    )

    def __init__(
        self, job: _Job, start: int, end: int, valid_from: int | None = None, speculative: bool = False
    ) -> None:
        self.job = job
        self.speculative = speculative
        self.start = start
        self.valid_from = start if valid_from is None else valid_from  # bytes from here to pos are on disk
        self.pos = start
        self.end = end  # exclusive; may shrink when the tail is stolen
        self.requested_end = end
        self.active = True
        self.slot = -1  # its record in the progress journal, given at its first write
        self.logged = start  # pos at its last journal record
        self.epoch = 0  # the journal epoch of its records


class _Job:
    """Per-file state: pieces, in-flight segments, part/state files, hashing."""

    def __init__(self, spec: FileSpec, opts: EngineOptions) -> None:
        self.spec = spec
        self.opts = opts
        self.sources = [_Source(u) for u in spec.sources]
        self.size: int | None = spec.size
        self.etag: str | None = None
        self.lock = threading.Lock()
        self.state = "new"  # new -> opening -> open -> done | failed
        self.error: str | None = None
        self.piece = opts.piece_size
        self.done: bytearray = bytearray()
        self.assigned: bytearray = bytearray()
        self.partial: dict[int, int] = {}  # piece -> valid bytes from its start (from a previous run)
        self.piece_src: bytearray = bytearray()
        self.segments: list[_Segment] = []
        self.fd: int | None = None
        self.ranges_ok = True
        self.downloaded = 0
        self.reused = 0
        self.bytes_done = 0
        self.started = time.monotonic()
        self.finished = 0.0
        self.hash_lock = threading.Lock()
        self.file_lock = threading.Lock()  # orders state-file writes against rename/discard
        self.save_lock = threading.Lock()  # one worker saves at a time
        self.save_step = 1 << 62  # bytes between state saves, set when the size is known
        self.hashed_pieces = 0
        self.sha = hashlib.sha256()
        self.gsha: Any = None
        self.blamed: set[int] = set()
        self.verify_rounds = 0
        self.failures = 0
        self.last_save = 0.0
        self.saved_bytes = 0
        self.dirty = False
        self.lock_path: Path | None = None
        self.sha256_hex: str | None = None
        self.spec_next = 1  # next speculative chunk index while the size is still unknown
        self.spec_ok = True
        self.restarted = False  # a partial download was thrown away (the server ignored Range)
        self.journal: Journal | None = None
        self.epoch = 0  # the journal epoch the next snapshot publishes (0: no journal)
        self.next_slot = 0
        self.save_seq = 0  # snapshots built / written (see _save)
        self.written_seq = 0

    # -- paths
    @property
    def part(self) -> Path:
        return self.spec.dest.with_name(self.spec.dest.name + PART_SUFFIX)

    @property
    def state_path(self) -> Path:
        return self.spec.dest.with_name(self.spec.dest.name + STATE_SUFFIX)

    @property
    def journal_path(self) -> Path:
        return self.spec.dest.with_name(self.spec.dest.name + JOURNAL_SUFFIX)

    @property
    def npieces(self) -> int:
        assert self.size is not None
        return max(1, -(-self.size // self.piece))

    @property
    def label(self) -> str:
        return self.spec.label or self.spec.dest.name

    def piece_range(self, i: int) -> tuple[int, int]:
        assert self.size is not None
        return i * self.piece, min(self.size, (i + 1) * self.piece)

    def pick_source(self) -> tuple[int, _Source]:
        now = time.monotonic()
        good = [(i, s) for i, s in enumerate(self.sources) if not s.bad]
        if not good:
            raise _SourceFatal("no usable source left")
        ready = [(i, s) for i, s in good if s.failing_until <= now]
        return (ready or sorted(good, key=lambda t: t[1].failing_until))[0]


def _check_free(path: Path, need: int, reserve: int, part: Path | None = None) -> None:
    """Refuse to start when the filesystem cannot hold the rest of the file (plus a reserve)."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return
    if part is not None and part.exists():
        with contextlib.suppress(OSError):
            need -= part.stat().st_blocks * 512
    override = os.environ.get("GPUCLINIC_FAKE_FREE_BYTES")  # tests: simulate a full disk
    if override and override.isdigit():
        free = int(override)
    if need > 0 and need + reserve > free:
        raise GpuclinicError(  # the input is fine; this machine cannot hold it: could not run
            f"not enough disk space in {path}: need {human(need)} (+{human(reserve)} reserve), "
            f"{human(free)} free"
        )


def human(n: float) -> str:
    """A byte count for people: ``512 B``, ``1.5 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
