"""The download engine: parallel ranged chunks, adaptive connections, resume, failover, verification.

Why it is built this way (numbers in shared/research/download-anchors.md):

* On a path that caps each TCP connection, the number of connections per file is the lever
  (aria2c -x16 is ~13x one stream).  The engine starts with ``initial`` connections shared by all
  files and grows by 1.5x while the measured throughput keeps growing; it halves on 429/503 and
  honours Retry-After.
* Every mid-body error (reset, clean close, stall, timeout) is retried per chunk with backoff
  from the byte where it stopped; huggingface_hub 2.4 aborts on a reset.
* A file downloads into ``FILE.gpuclinic-part``; ``FILE.gpuclinic-state`` (JSON, replaced
  atomically every 0.5 s) records completed pieces *and* how far each in-flight chunk got, and
  ``FILE.gpuclinic-journal`` (transfer/resume.py) records each connection's progress right after
  every write, so a rerun after kill -9 re-fetches only what had not reached the part file.
  The final path only ever sees a complete, verified file (fsync + rename).
* sha256 (and the git blob sha1 for small Hub files) is computed in order over the completed
  prefix while downloading, so verification costs no extra pass in the common case.  A mismatch
  blames the sources that served the bytes and re-fetches from another mirror.
* The tail of a file is split between idle connections (work stealing), so one slow connection
  does not leave the download "stuck at 99%".
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import random
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from gpuclinic import __version__
from gpuclinic.errors import GpuclinicError
from gpuclinic.transfer import resume
from gpuclinic.transfer.redact import redact, safe_url
from gpuclinic.transfer.resume import JOURNAL_STEP, JOURNAL_SUFFIX, STATE_VERSION, Journal

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


class Engine:
    """Download a list of files with a shared pool of connections."""

    def __init__(
        self, opts: EngineOptions | None = None, on_event: Callable[[str, _Job], None] | None = None
    ) -> None:
        self.opts = opts or EngineOptions()
        self.on_event = on_event
        self.jobs: list[_Job] = []
        self.cv = threading.Condition()
        self.stop = threading.Event()
        self.target = self.opts.connections or self.opts.initial_connections
        self.max_conn = self.opts.connections or self.opts.max_connections
        self.workers: list[threading.Thread] = []
        self.total_bytes = 0
        self.freeze_until = 0.0
        self.rate_history: list[tuple[float, int]] = []
        # jobs leave "new" in order; only started, unfinished jobs are scanned (datasets have 10k+ files)
        self._new_idx = 0
        self._live: list[_Job] = []
        self.client = httpx.Client(
            http1=True,
            follow_redirects=True,
            trust_env=True,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=self.max_conn + 8),
            timeout=httpx.Timeout(
                connect=self.opts.connect_timeout, read=self.opts.stall_timeout, write=30.0, pool=None
            ),
            headers={"User-Agent": self.opts.user_agent, "Accept-Encoding": "identity"},
        )

    # ------------------------------------------------------------------ public
    def run(self, specs: list[FileSpec]) -> list[FileResult]:
        """Download everything; returns one result per spec (failed ones carry ``error``)."""
        self.jobs = [_Job(s, self.opts) for s in specs]
        self._check_space_upfront()
        saver = threading.Thread(target=self._saver, name="gpuclinic-saver", daemon=True)
        ctrl = threading.Thread(target=self._controller, name="gpuclinic-ctrl", daemon=True)
        saver.start()
        ctrl.start()
        for i in range(self.max_conn):
            t = threading.Thread(target=self._worker, args=(i,), name=f"gpuclinic-w{i}", daemon=True)
            t.start()
            self.workers.append(t)
        try:
            with self.cv:
                while not self.stop.is_set() and not self._all_finished():
                    self.cv.wait(0.2)
        except BaseException:
            self._shutdown()
            raise
        self._shutdown()
        with contextlib.suppress(Exception):
            self.client.close()
        return [self._result(j) for j in self.jobs]

    def _shutdown(self) -> None:
        """Stop workers (they stop at their next chunk), then record exactly what is on disk."""
        self.stop.set()
        with self.cv:
            self.cv.notify_all()
        deadline = time.monotonic() + 2.0
        for t in self.workers:
            t.join(max(0.0, deadline - time.monotonic()))
        self._save_all(force=True)
        for j in self.jobs:
            if j.journal is not None:
                j.journal.close()
            self._release_lock(j)
        # make the renames durable: one fsync per directory instead of one per file
        for d in {j.spec.dest.parent for j in self.jobs if j.state == "done"}:
            _fsync_dir(d)

    def progress(self) -> list[tuple[str, int, int | None, str]]:
        """(label, bytes done, size, state) per file, for progress displays."""
        return [(j.label, j.bytes_done, j.size, j.state) for j in self.jobs]

    # ------------------------------------------------------------------ helpers
    def _emit(self, what: str, job: _Job) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(what, job)

    def _result(self, j: _Job) -> FileResult:
        counts: dict[int, int] = {}
        for s in j.piece_src:
            counts[s] = counts.get(s, 0) + 1
        src = max(counts, key=lambda k: counts[k]) if counts else 0
        status = "ok" if j.state == "done" else "failed"
        return FileResult(
            path=str(j.spec.dest),
            size=j.size or 0,
            sha256=j.sha256_hex,
            seconds=round((j.finished or time.monotonic()) - j.started, 3),
            downloaded=j.downloaded,
            reused=j.reused,
            source=safe_url(j.spec.sources[src]) if j.spec.sources else "",
            status=status,
            error=None if status != "failed" else redact(j.error or "failed"),
        )

    def _check_space_upfront(self) -> None:
        need: dict[int, tuple[int, Path]] = {}
        for j in self.jobs:
            if j.size is None:
                continue
            parent = j.spec.dest.parent
            parent.mkdir(parents=True, exist_ok=True)
            have = j.part.stat().st_blocks * 512 if j.part.exists() else 0
            dev = parent.stat().st_dev
            total, p = need.get(dev, (0, parent))
            need[dev] = (total + max(0, j.size - have), p)
        for total, p in need.values():
            _check_free(p, total, self.opts.min_free_reserve)

    def _fail(self, job: _Job, msg: str) -> None:
        with self.cv:
            if job.state in ("done", "failed"):
                return
            job.state = "failed"
            job.error = redact(msg)
            job.finished = time.monotonic()
            for s in job.segments:
                s.active = False
            self.cv.notify_all()
        self._save(job, force=True)
        if job.journal is not None:
            job.journal.close()
        self._release_lock(job)
        self._emit("failed", job)

    # ------------------------------------------------------------------ scheduling
    def _next(self, wid: int) -> _Segment | None:
        with self.cv:
            while not self.stop.is_set():
                if wid < self.target:
                    seg = self._allocate()
                    if seg is not None:
                        return seg
                    if self._all_finished():
                        return None
                self.cv.wait(0.25)
        return None

    def _all_finished(self) -> bool:
        self._live = [j for j in self._live if j.state not in ("done", "failed")]
        while self._new_idx < len(self.jobs) and self.jobs[self._new_idx].state != "new":
            self._new_idx += 1
        return not self._live and self._new_idx >= len(self.jobs)

    def _live_jobs(self) -> list[_Job]:
        self._live = [j for j in self._live if j.state not in ("done", "failed")]
        return self._live

    def _allocate(self) -> _Segment | None:
        """The next request for an idle connection, in this order of preference."""
        return self._open_next() or self._speculative() or self._unassigned() or self._steal()

    def _open_next(self) -> _Segment | None:
        """1) Open a file nobody is opening (the first request doubles as the probe)."""
        while self._new_idx < len(self.jobs) and self.jobs[self._new_idx].state != "new":
            self._new_idx += 1
        for j in self.jobs[self._new_idx : self._new_idx + 1]:
            if j.state == "new":
                self._new_idx += 1
                if j not in self._live:
                    self._live.append(j)
                j.state = "opening"
                if j.size is not None and j.size > 2 * j.piece:
                    # size known (Hub metadata): no probe, every connection can start at once
                    try:
                        self._open(j, j.size, None, ranges=True, seg=None)
                    except (GpuclinicError, _SourceFatal, OSError) as e:
                        self._fail(j, f"{j.label}: {e}")
                        continue
                    if all(j.done):
                        return _Segment(j, j.size, j.size)
                    continue
                start, end = self._opening_range(j)
                j.spec_ok = j.spec_ok and start == 0 and end == -1
                return _Segment(j, start, end)
        return None

    def _speculative(self) -> _Segment | None:
        """1b) Size unknown and the probe in flight: speculative ranged requests, so that every
        connection is busy from the first round trip (aria2 and curl wait for the probe)."""
        for j in self._live_jobs():
            if j.state == "opening" and j.spec_ok and j.size is None and j.spec_next < min(8, self.target):
                k = j.spec_next
                j.spec_next += 1
                return _Segment(j, k * SPECULATIVE_CHUNK, (k + 1) * SPECULATIVE_CHUNK, speculative=True)
        return None

    def _unassigned(self) -> _Segment | None:
        """2) An unassigned run of pieces in an open file."""
        for j in self._live_jobs():
            if j.state != "open" or not j.ranges_ok:
                continue
            n = j.npieces
            try:
                a = j.assigned.index(0)
            except ValueError:
                continue
            assert j.size is not None
            seg_pieces = self._seg_pieces(j.size, j.piece)
            b = a
            while b < n and j.assigned[b] == 0 and b - a < seg_pieces and (b == a or b not in j.partial):
                j.assigned[b] = 1
                b += 1
            start = a * j.piece + j.partial.pop(a, 0)
            seg = _Segment(j, start, min(j.size, b * j.piece), valid_from=a * j.piece)
            j.segments.append(seg)
            return seg
        return None

    def _steal(self) -> _Segment | None:
        """3) Steal half of the largest in-flight tail (so one slow connection does not hold the end)."""
        best: _Segment | None = None
        best_left = 0
        for j in self._live_jobs():
            if j.state != "open" or not j.ranges_ok:
                continue
            for s in j.segments:
                if s.active and s.end - s.pos > best_left:
                    best, best_left = s, s.end - s.pos
        if best is None or best_left < STEAL_MIN_PIECES * best.job.piece:
            return None
        j = best.job
        first_free = best.pos // j.piece + 1
        last = -(-best.end // j.piece)
        if last - first_free < 1:
            return None
        cut = max((first_free + last) // 2, first_free) * j.piece
        if not best.pos < cut < best.end:
            return None
        seg = _Segment(j, cut, best.end)
        best.end = cut
        j.segments.append(seg)
        return seg

    def _opening_range(self, j: _Job) -> tuple[int, int]:
        """The first request of a file: its first missing bytes according to a saved state, else 0.

        Asking for bytes we already have would waste them after a kill -9, so peek at the state.
        """
        size = j.size
        st = resume.load(j.state_path, j.journal_path) if j.part.exists() else None
        a = st.done.find(0) if st is not None else -1
        if st is not None and a >= 0 and (size is None or size == st.size):
            psize, piece, n, partial = st.size, st.piece, st.npieces, st.partial
            if st.doc.get("etag") and j.sources:
                j.sources[0].etag = str(st.doc["etag"])
            b = a + 1
            seg_pieces = self._seg_pieces(psize, piece)
            while b < n and not st.done[b] and b not in partial and b - a < seg_pieces:
                b += 1
            return a * piece + partial.get(a, 0), min(psize, b * piece)
        if size is None:
            return 0, -1
        return 0, min(size, max(j.piece, self._seg_pieces(size, j.piece) * j.piece))

    def _seg_pieces(self, size: int, piece: int) -> int:
        """Pieces per chunk request: about three requests per connection, 1..32 MiB."""
        return max(1, min(32 * MiB, size // (max(1, self.target) * 3)) // piece)

    # ------------------------------------------------------------------ worker
    def _worker(self, wid: int) -> None:
        while not self.stop.is_set():
            seg = self._next(wid)
            if seg is None:
                return
            try:
                self._run_segment(seg)
            except GpuclinicError as e:
                self._fail(seg.job, str(e))
            except Exception as e:  # a bug must not hang the download: fail the file, loudly
                self._fail(seg.job, f"{type(e).__name__}: {e}")
            finally:
                jn = seg.job.journal
                if jn is not None and seg.pos > seg.logged:
                    with contextlib.suppress(OSError):
                        self._log(seg, jn)
                with self.cv:
                    self._retire(seg)
                    self.cv.notify_all()

    def _retire(self, seg: _Segment) -> None:
        """A segment ends: keep what it wrote (as a partial piece) and free pieces it did not reach."""
        job = seg.job
        seg.active = False
        if seg not in job.segments:
            return  # never adopted (speculative or abandoned): owns no pieces
        job.segments.remove(seg)
        if job.state != "open" or seg.end == -1 or seg.pos >= seg.end or not job.done:
            return
        i = seg.pos // job.piece
        if i < job.npieces and not job.done[i] and seg.valid_from <= i * job.piece < seg.pos:
            job.partial[i] = seg.pos - i * job.piece
        last = -(-seg.end // job.piece)
        for k in range(i, min(last, job.npieces)):
            if not job.done[k]:
                job.assigned[k] = 0

    def _run_segment(self, seg: _Segment) -> None:
        job = seg.job
        attempt = 0
        while not self.stop.is_set() and job.state in ("opening", "open"):
            if seg.end != -1 and seg.pos >= seg.end:
                break
            try:
                idx, src = job.pick_source()
            except _SourceFatal:
                self._fail(job, self._no_source_msg(job))
                return
            before = seg.pos
            try:
                self._fetch(seg, idx, src)
                if seg.end != -1 and seg.pos >= seg.end:
                    break
                raise _Retryable("connection closed early")
            except _Retryable as e:
                attempt = self._on_retryable(seg, src, e, attempt, progressed=seg.pos > before)
                if attempt < 0:
                    return
            except _SourceFatal as e:
                src.bad = True
                src.last_error = str(e)
            except _Abandon:
                return
            except _ObjectChanged:
                self._reset_job(job, "the object changed on the server")
                return
            except OSError as e:  # local disk trouble: not worth retrying
                self._fail(job, f"{job.label}: {e.strerror or e}")
                return
        if job.state == "opening" and seg.end == -1:
            return
        self._maybe_finish(job)

    def _on_retryable(
        self, seg: _Segment, src: _Source, e: _Retryable, attempt: int, *, progressed: bool
    ) -> int:
        """Count a failed try of ``seg`` (``attempt``: tries since the last progress) and wait before the
        next one; returns the new count, or -1 when the file is given up."""
        job = seg.job
        if progressed:
            attempt = 0
            job.failures = 0
        attempt += 1
        job.failures += 1
        src.last_error = str(e)
        if e.retry_after is not None or e.backoff:
            self._back_off()
        if job.state == "opening" and seg.pos == 0 and e.connect and attempt >= 4:
            src.bad = True  # nothing ever answered: do not spend a minute on a dead host
            return 0
        if attempt >= self.opts.max_retries:
            src.failing_until = time.monotonic() + 30
            if len([s for s in job.sources if not s.bad]) > 1:
                attempt = 0
            elif job.failures >= self.opts.max_retries * 3:
                self._fail(job, f"{job.label}: giving up after {job.failures} failures: {e}")
                return -1
        delay = e.retry_after if e.retry_after is not None else min(8.0, 0.2 * 2 ** min(attempt, 6))
        self.stop.wait(delay * (1 + 0.25 * random.random()))
        return attempt

    def _no_source_msg(self, job: _Job) -> str:
        errs = "; ".join(f"{safe_url(s.url)}: {s.last_error}" for s in job.sources if s.last_error)
        return f"{job.label}: download failed ({errs or 'no usable source'})"

    def _back_off(self) -> None:
        with self.cv:
            active = sum(1 for j in self._live_jobs() for s in j.segments if s.active)
            self.target = max(1, min(self.target, max(active, 2)) // 2)
            self.freeze_until = time.monotonic() + 10.0

    def _headers_for(self, job: _Job, url: str) -> dict[str, str]:
        if job.spec.headers and _origin(url) in job.spec.auth_origins:
            return dict(job.spec.headers)
        return {}

    def _fetch(self, seg: _Segment, idx: int, src: _Source) -> None:
        job = seg.job
        url = src.resolved or src.url
        headers = self._headers_for(job, url)
        if seg.end == -1:
            headers["Range"] = f"bytes={seg.pos}-"
        else:
            headers["Range"] = f"bytes={seg.pos}-{seg.end - 1}"
            seg.requested_end = seg.end
        if src.etag and not src.etag.startswith("W/") and seg.pos > 0:
            headers["If-Range"] = src.etag
        try:
            with self.client.stream("GET", url, headers=headers) as r:
                final = str(r.url)
                if final != url and not src.resolved:
                    src.resolved = final
                self._check_status(job, src, r, seg, url)
                if r.status_code == 206 and seg.end != -1 and seg.end == seg.requested_end:
                    cl = r.headers.get("content-length")
                    if cl is not None and cl.isdigit() and int(cl) != seg.end - seg.pos:
                        raise _SourceFatal(f"server sent {cl} bytes for a {seg.end - seg.pos}-byte range")
                self._stream(seg, idx, r)
        except httpx.ConnectTimeout as e:
            raise _Retryable(f"timed out ({type(e).__name__})", connect=True) from None
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out ({type(e).__name__})") from None
        except httpx.ConnectError as e:
            raise _Retryable(
                f"cannot connect: {redact(str(e)) or 'connection refused'}", connect=True
            ) from None
        except (httpx.TransportError, httpx.StreamError, ConnectionError) as e:
            raise _Retryable(f"{type(e).__name__}: {redact(str(e)) or 'connection error'}") from None

    def _check_status(self, job: _Job, src: _Source, r: httpx.Response, seg: _Segment, url: str) -> None:
        """Accept a 200/206 answer for ``seg`` (opening or adopting the file), else raise what to do."""
        code = r.status_code
        if seg.speculative and (code == 416 or code == 200):
            raise _Abandon()
        self._raise_for_status(src, r, url)
        src.fresh_failures = 0
        etag = r.headers.get("etag")
        total = self._range_total(r, seg) if code == 206 else self._whole_body_total(job, src, r, seg, etag)
        if etag and src.etag is None:
            src.etag = etag
        elif etag and src.etag and etag != src.etag:
            raise _ObjectChanged()
        with self.cv:
            if job.state == "opening":
                if seg.speculative and code != 206:
                    raise _Abandon()
                self._open(job, total if total >= 0 else None, etag, ranges=code == 206, seg=seg)
            elif job.size is not None and total >= 0 and total != job.size:
                raise _SourceFatal(f"size {total} differs from {job.size}")
            elif seg not in job.segments and job.state == "open":
                self._adopt(job, seg)
            if seg.speculative and job.state not in ("opening", "open"):
                raise _Abandon()

    @staticmethod
    def _raise_for_status(src: _Source, r: httpx.Response, url: str) -> None:
        """Anything but 200/206: retry (429/503/5xx, an expired signed redirect) or ban the source."""
        code = r.status_code
        if code in (429, 503):
            raise _Retryable(
                f"HTTP {code}", retry_after=_retry_after(r.headers.get("retry-after")), backoff=True
            )
        if code in (401, 403, 404, 410) and (url != src.url or r.history):
            # an expired signed redirect target: resolve again from the origin (at once if the
            # old target was cached, with backoff if the origin just handed out a dead one)
            if src.resolved == url:
                src.resolved = None
            if url == src.url:
                src.fresh_failures += 1
                if src.fresh_failures >= 4:
                    raise _SourceFatal(f"HTTP {code} from the redirect target {safe_url(str(r.url))}")
            raise _Retryable(
                f"HTTP {code} from redirect target (re-resolving)",
                retry_after=0.0 if url != src.url else None,
            )
        if code >= 500:
            raise _Retryable(f"HTTP {code}")
        if code not in (200, 206):
            raise _SourceFatal(f"HTTP {code} {r.reason_phrase}".strip())

    @staticmethod
    def _range_total(r: httpx.Response, seg: _Segment) -> int:
        """The file size from a 206's Content-Range, which must start where ``seg`` asked."""
        cr = r.headers.get("content-range", "")
        try:
            rng, total_s = cr.split(" ", 1)[1].split("/")
            start = int(rng.split("-")[0])
            total = int(total_s)
        except (IndexError, ValueError):
            raise _SourceFatal(f"bad Content-Range {cr!r}") from None
        if start != seg.pos:
            raise _SourceFatal(f"server answered range at {start}, asked {seg.pos}")
        return total

    def _whole_body_total(
        self, job: _Job, src: _Source, r: httpx.Response, seg: _Segment, etag: str | None
    ) -> int:
        """A 200: the whole file (-1 if its length is unknown).  As the answer to a resume request it
        means the server ignores Range; at the opening that is a fresh start from byte 0."""
        cl = r.headers.get("content-length")
        total = int(cl) if cl and cl.isdigit() else -1
        if seg.pos != 0 or job.state == "open":
            if src.etag and etag and etag != src.etag:
                raise _ObjectChanged()
            if job.state != "opening":
                raise _SourceFatal("server ignored the Range header")
            # a resume request answered with the whole file (python -m http.server, some
            # proxies): this server cannot resume, so use this body from byte 0 and say so
            seg.start = seg.pos = seg.valid_from = seg.logged = 0
            seg.end = seg.requested_end = -1
            job.restarted = True
            self._emit("restart", job)
        return total

    def _adopt(self, job: _Job, seg: _Segment) -> None:
        """A request sent before the size was known (probe or speculative) answered after the file
        was opened by another one: keep it if its pieces are still free, else drop the response."""
        assert job.size is not None
        if seg.end == -1 or seg.end > job.size:
            seg.end = (
                job.size
                if seg.end > job.size
                else min(job.size, seg.pos + self._seg_pieces(job.size, job.piece) * job.piece)
            )
            if seg.requested_end == -1 or seg.requested_end > job.size:
                seg.requested_end = job.size if seg.requested_end > job.size else seg.requested_end
        a = seg.pos // job.piece
        b = min(job.npieces, -(-seg.end // job.piece))
        if seg.pos == a * job.piece and a < b and not any(job.assigned[a:b]) and not any(job.done[a:b]):
            job.assigned[a:b] = b"\x01" * (b - a)
            seg.valid_from = seg.pos
            job.segments.append(seg)
        else:
            seg.end = seg.pos
            raise _Abandon()

    def _open(
        self, job: _Job, total: int | None, etag: str | None, *, ranges: bool, seg: _Segment | None
    ) -> None:
        """First response headers of a file arrived: size it, load resume state, plan pieces."""
        if job.size is not None and total is not None and total != job.size:
            raise _SourceFatal(f"server reports {total} bytes, expected {job.size}")
        if total is None and job.size is None:
            ranges = False
        job.size = job.size if job.size is not None else total
        job.etag = etag
        job.ranges_ok = ranges
        self._take_lock(job)
        _check_free(job.spec.dest.parent, max(0, (job.size or 0)), self.opts.min_free_reserve, job.part)
        size = job.size or 0
        if size > 32768 * job.piece:
            unit = 256 * 1024
            job.piece = -(-size // 32768 // unit) * unit
        n = job.npieces
        job.done = bytearray(n)
        job.assigned = bytearray(n)
        job.piece_src = bytearray(n)
        self._load_state(job)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0)
        job.fd = os.open(job.part, flags, 0o644)
        if os.fstat(job.fd).st_size != size:
            os.ftruncate(job.fd, size)
        job.bytes_done = sum(job.piece_range(i)[1] - job.piece_range(i)[0] for i in range(n) if job.done[i])
        job.bytes_done += sum(job.partial.values())
        job.reused = job.bytes_done
        job.saved_bytes = job.bytes_done
        job.save_step = max(64 * 1024, int(size * self.opts.save_fraction))
        if size == 0:
            job.done[0] = 1
        if seg is None:
            for i in range(n):
                if job.done[i]:
                    job.assigned[i] = 1
        elif not ranges:
            # one stream for the whole file, no resume possible
            job.done[:] = bytearray(n)
            job.assigned[:] = b"\x01" * n
            job.partial.clear()
            job.bytes_done = job.reused = 0
            seg.end = seg.requested_end = size
            job.segments.append(seg)
        else:
            self._plan_opening(job, seg, size)
        job.state = "open"
        self._start_journal(job)
        self.cv.notify_all()
        self._emit("open", job)
        if seg is not None and (size == 0 or all(job.done)):
            seg.end = seg.pos

    def _start_journal(self, job: _Job) -> None:
        """A new journal epoch: publish a snapshot holding everything reused (so older records may be
        dropped), then start the journal empty."""
        if not job.ranges_ok or (job.size or 0) < JOURNAL_MIN_SIZE or all(job.done):
            return
        job.epoch = resume.new_epoch()
        self._save(job, force=True)
        try:
            job.journal = Journal(job.journal_path, job.epoch)
        except OSError:
            job.epoch = 0  # no journal: the snapshot alone, saved more often
            self._save(job, force=True)

    def _plan_opening(self, job: _Job, seg: _Segment, size: int) -> None:
        """The ranged answer that opened ``job``: keep it for its pieces if they are still missing."""
        n = job.npieces
        if seg.end == -1:
            seg.end = min(size, self._seg_pieces(size, job.piece) * job.piece)
        if seg.end > size:
            seg.end = size
            seg.requested_end = size  # the server's answer ends at the file end anyway
        a = seg.pos // job.piece
        b = min(n, -(-seg.end // job.piece))
        keep = (
            seg.pos == a * job.piece + job.partial.get(a, 0)
            and a < b
            and not any(job.done[a:b])
            and not any(i in job.partial for i in range(a + 1, b))
        )
        if keep and size > 0:
            job.assigned[a:b] = b"\x01" * (b - a)
            job.partial.pop(a, None)
            seg.valid_from = a * job.piece
            job.segments.append(seg)
        else:
            seg.end = seg.pos  # we asked for bytes we already have: drop this response, re-plan
        for i in range(n):
            if job.done[i]:
                job.assigned[i] = 1

    def _stream(self, seg: _Segment, idx: int, r: httpx.Response) -> None:
        job = seg.job
        fd = job.fd
        assert fd is not None
        if seg.end == seg.pos:
            return
        piece = job.piece
        for chunk in r.iter_raw():
            if self.stop.is_set() or job.state not in ("open",):
                return
            end = seg.end
            n = len(chunk)
            if seg.pos + n > end:
                n = end - seg.pos
                chunk = chunk[:n]
            if n <= 0:
                if end == seg.requested_end:
                    continue  # drain the (empty) rest so the connection stays reusable
                return
            resume.write_at(fd, chunk, seg.pos)
            old = seg.pos
            seg.pos += n
            jn = job.journal
            if jn is not None and (seg.pos - seg.logged >= JOURNAL_STEP or seg.pos >= seg.end):
                self._log(seg, jn)  # after the data write: a record never claims a byte not on disk
            completed: list[int] = []
            with self.cv:
                job.downloaded += n
                job.bytes_done += n
                self.total_bytes += n
                job.dirty = True
                first = old // piece
                last = seg.pos // piece
                for i in range(first, min(last, job.npieces)):
                    s, e = job.piece_range(i)
                    if seg.pos >= e and not job.done[i]:
                        job.done[i] = 1
                        job.piece_src[i] = idx
                        completed.append(i)
                if seg.pos == job.size and not job.done[job.npieces - 1]:
                    job.done[job.npieces - 1] = 1
                    job.piece_src[job.npieces - 1] = idx
                    completed.append(job.npieces - 1)
            if completed:
                self._hash_ahead(job, block=False)
            if (
                jn is None
                and job.bytes_done - job.saved_bytes >= job.save_step
                and job.save_lock.acquire(blocking=False)
            ):
                try:  # save from the worker itself: a saver thread may wait long for the GIL
                    self._save(job)
                finally:
                    job.save_lock.release()
            if seg.pos >= seg.end and seg.end != seg.requested_end:
                return  # our tail was handed to another connection: close this response

    @staticmethod
    def _log(seg: _Segment, jn: Journal) -> None:
        """Journal that ``[seg.valid_from, seg.pos)`` is in the part file."""
        if seg.slot < 0:
            job = seg.job
            with job.lock:
                seg.slot = job.next_slot
                job.next_slot += 1
            seg.epoch = jn.epoch
        if seg.epoch == jn.epoch:  # else pieces were dropped (sha256 mismatch) after it wrote: stale
            jn.record(seg.slot, seg.valid_from, seg.pos)
        seg.logged = seg.pos

    # ------------------------------------------------------------------ verification
    def _hash_ahead(self, job: _Job, *, block: bool) -> None:
        if not job.hash_lock.acquire(blocking=block):
            return
        try:
            fd = job.fd
            if fd is None:
                return
            while job.hashed_pieces < job.npieces and job.done[job.hashed_pieces]:
                s, e = job.piece_range(job.hashed_pieces)
                data = os.pread(fd, e - s, s)
                if len(data) != e - s:
                    raise OSError("short read from the partial file")
                job.sha.update(data)
                if job.gsha is not None:
                    job.gsha.update(data)
                job.hashed_pieces += 1
        finally:
            job.hash_lock.release()

    def _maybe_finish(self, job: _Job) -> None:
        with self.cv:
            if job.state != "open" or not job.done or not all(job.done):
                return
            if any(s.active and s.pos < s.end for s in job.segments if s is not None):
                pass
            job.state = "verifying"
        try:
            self._finish(job)
        except OSError as e:
            self._fail(job, f"{job.label}: {e.strerror or e}")

    def _finish(self, job: _Job) -> None:
        self._hash_ahead(job, block=True)
        digest = job.sha.hexdigest()
        ok = True
        want = job.spec.sha256
        if want and digest != want.lower():
            ok = False
        if ok and job.spec.git_sha1 and job.gsha is not None and job.gsha.hexdigest() != job.spec.git_sha1:
            ok = False
        if not ok:
            self._blame(job, digest)
            return
        assert job.fd is not None
        os.fsync(job.fd)
        os.close(job.fd)
        job.fd = None
        if job.journal is not None:
            job.journal.close()
        with job.file_lock:
            os.replace(job.part, job.spec.dest)  # the directory is fsynced once per run (_shutdown)
            for p in (job.state_path, job.journal_path):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            for stale in job.state_path.parent.glob(job.state_path.name + ".*.tmp"):
                with contextlib.suppress(OSError):
                    stale.unlink()  # left by a process killed mid-save
        self._release_lock(job)
        job.sha256_hex = digest
        with self.cv:
            job.state = "done"
            job.finished = time.monotonic()
            self.cv.notify_all()
        self._emit("done", job)

    def _blame(self, job: _Job, digest: str) -> None:
        """Wrong bytes: drop the pieces of a suspect source and fetch them from another one."""
        job.verify_rounds += 1
        used = sorted(set(job.piece_src))
        counts = {u: job.piece_src.count(u) for u in used}
        good_left = [i for i, s in enumerate(job.sources) if not s.bad]
        if len(used) > 1:
            suspect = min(used, key=lambda u: counts[u])
        else:
            suspect = used[0]
        others = [i for i in good_left if i != suspect]
        if job.verify_rounds > len(job.sources) + 1 or (not others and job.verify_rounds > 1):
            self._discard(job)
            self._fail(
                job,
                f"{job.label}: sha256 mismatch (got {digest[:16]}..., expected "
                f"{(job.spec.sha256 or '')[:16]}...) from every source",
            )
            return
        if others:
            job.sources[suspect].bad = True
            job.sources[suspect].last_error = "served wrong bytes (sha256 mismatch)"
        if not job.ranges_ok:
            # no ranges: pieces cannot be refetched one by one (the scheduler never hands them out),
            # so start the file over with a fresh single-stream request
            with self.cv:
                self._start_over(job)
                self.cv.notify_all()
            self._emit("mismatch", job)
            return
        with self.cv:
            for i in range(job.npieces):
                if job.piece_src[i] == suspect or len(used) == 1:
                    job.done[i] = 0
                    job.assigned[i] = 0
            job.partial.clear()
            job.hashed_pieces = 0
            job.sha = hashlib.sha256()
            job.gsha = _git_sha1_hasher(job.size or 0) if job.spec.git_sha1 else None
            job.bytes_done = sum(
                job.piece_range(i)[1] - job.piece_range(i)[0] for i in range(job.npieces) if job.done[i]
            )
            if job.journal is not None:  # the older records claim the dropped pieces: void them
                job.epoch = job.journal.epoch = resume.new_epoch()
            job.state = "open"
            self.cv.notify_all()
        self._save(job, force=True)
        self._emit("mismatch", job)

    def _reset_job(self, job: _Job, why: str) -> None:
        with self.cv:
            if job.state not in ("open", "opening"):
                return
            self._start_over(job)
            job.verify_rounds += 1
            if job.verify_rounds > 3:
                job.state = "failed"
                job.error = f"{job.label}: {why}"
            self.cv.notify_all()

    def _start_over(self, job: _Job) -> None:
        """Forget everything fetched for ``job`` and queue it again (caller holds ``self.cv``)."""
        self._discard(job)
        job.state = "new"
        self._new_idx = min(self._new_idx, self.jobs.index(job))
        job.size = job.spec.size
        job.etag = None
        job.segments = []
        job.partial = {}
        job.bytes_done = 0
        job.hashed_pieces = 0
        job.sha = hashlib.sha256()
        job.gsha = None

    def _discard(self, job: _Job) -> None:
        if job.fd is not None:
            with contextlib.suppress(OSError):
                os.close(job.fd)
            job.fd = None
        if job.journal is not None:
            job.journal.close()
        job.journal, job.epoch = None, 0
        with job.file_lock:
            for p in (job.part, job.state_path, job.journal_path):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()

    # ------------------------------------------------------------------ resume state
    def _load_state(self, job: _Job) -> None:
        if job.gsha is None and job.spec.git_sha1 and job.size is not None:
            job.gsha = _git_sha1_hasher(job.size)
        if not job.part.exists():
            return
        saved = resume.load(job.state_path, job.journal_path)
        if saved is None:
            if job.state_path.exists():
                self._discard(job)  # unreadable or from another version: the part file is unusable
            return
        st = saved.doc
        same = (
            saved.size == job.size
            and saved.piece == job.piece
            and (st.get("sha256") or None) == (job.spec.sha256 or None)
            and (job.spec.sha256 or not st.get("etag") or st.get("etag") == job.etag)
            and job.part.stat().st_size == job.size
        )
        if not same:
            self._discard(job)
            return
        job.done[:] = saved.done
        job.partial = dict(saved.partial)

    def _state_doc(self, job: _Job) -> dict[str, Any]:
        n = job.npieces
        bits = bytearray(-(-n // 8))
        for i in range(n):
            if job.done[i]:
                bits[i // 8] |= 1 << (i % 8)
        partial: dict[str, int] = {}
        for s in job.segments:
            i = s.pos // job.piece
            if i < n and not job.done[i]:
                valid = s.pos - i * job.piece
                if valid > 0 and s.valid_from <= i * job.piece:
                    partial[str(i)] = valid
        for i, v in job.partial.items():
            partial.setdefault(str(i), v)
        return {
            "version": STATE_VERSION,
            "tool": "gpuclinic",
            "url": safe_url(job.spec.sources[0]) if job.spec.sources else "",
            "size": job.size,
            "etag": job.etag,
            "sha256": job.spec.sha256,
            "piece": job.piece,
            "done": base64.b64encode(bytes(bits)).decode(),
            "partial": partial,
            "journal": job.epoch or None,
            "saved_at": time.time(),
        }

    def _save(self, job: _Job, *, force: bool = False) -> None:
        if job.size is None or job.state not in ("open", "verifying", "failed") or not job.done:
            return
        with self.cv:
            if not job.dirty and not force:
                return
            doc = self._state_doc(job)
            job.dirty = False
            job.saved_bytes = job.bytes_done
            job.last_save = time.monotonic()
            job.save_seq += 1
            seq = job.save_seq
        with job.file_lock:
            # two savers may race here: the later snapshot wins, an older one (fewer pieces, or an
            # epoch voided by a sha256 mismatch) is never written over it
            if seq > job.written_seq and job.part.exists():
                resume.write_atomic(job.state_path, doc)
                job.written_seq = seq

    def _save_all(self, *, force: bool = False) -> None:
        for j in self.jobs:
            if j.state in ("open", "verifying"):
                self._save(j, force=force)

    def _saver(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            for j in self.jobs:
                if j.state != "open" or not j.dirty or j.size is None:
                    continue
                if (
                    j.journal is None and j.bytes_done - j.saved_bytes >= j.save_step
                ) or now - j.last_save >= self.opts.save_interval:
                    if j.save_lock.acquire(blocking=False):
                        try:
                            self._save(j)
                        finally:
                            j.save_lock.release()
            self.stop.wait(0.005)

    # ------------------------------------------------------------------ adaptive connections
    def _controller(self) -> None:
        if self.opts.connections:
            return
        last_change = time.monotonic()
        base_rate = 0.0
        plateau_until = 0.0
        prev_target = 0
        marks: list[tuple[float, int]] = [(last_change, 0)]
        while not self.stop.wait(0.1):
            now = time.monotonic()
            marks.append((now, self.total_bytes))
            marks = [m for m in marks if now - m[0] <= 3.0]
            if now < self.freeze_until or now < plateau_until or now - last_change < 0.6:
                continue
            win = [m for m in marks if m[0] >= last_change + 0.25]
            if len(win) < 2 or win[-1][0] - win[0][0] < 0.3:
                continue
            rate = (win[-1][1] - win[0][1]) / (win[-1][0] - win[0][0])
            with self.cv:
                live = self._live_jobs()
                busy = sum(1 for j in live for s in j.segments if s.active)
                pending = self._new_idx < len(self.jobs) or any(
                    j.state == "opening" or (j.state == "open" and 0 in j.assigned) for j in live
                )
                tail = sum(max(0, s.end - s.pos) for j in live for s in j.segments if s.active)
                if (
                    rate > base_rate * 1.12
                    and self.target < self.max_conn
                    and busy >= self.target - 1
                    and (pending or tail > 8 * MiB)
                ):
                    base_rate = rate
                    prev_target = self.target
                    self.target = min(self.max_conn, max(self.target + 1, int(self.target * 1.5)))
                    last_change = now
                    self.cv.notify_all()
                elif rate <= base_rate * 1.12:
                    # no gain from the last step (a shared link cap, a busy CPU): go back to the
                    # previous count, since more connections would only make each one slower
                    if prev_target and self.target > prev_target and not self.opts.connections:
                        self.target = prev_target
                    plateau_until = now + 10.0
                    base_rate = max(base_rate, rate)

    # ------------------------------------------------------------------ locks
    def _take_lock(self, job: _Job) -> None:
        lock = job.spec.dest.with_name(job.spec.dest.name + LOCK_SUFFIX)
        me = f"{os.getpid()}@{socket.gethostname()}"
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                try:
                    owner = lock.read_text().strip()
                except OSError:
                    owner = ""
                pid_s, _, host = owner.partition("@")
                alive = False
                if host == socket.gethostname() and pid_s.isdigit():
                    try:
                        os.kill(int(pid_s), 0)
                        alive = int(pid_s) != os.getpid()
                    except ProcessLookupError:
                        alive = False
                    except PermissionError:
                        alive = True
                if alive:
                    raise _SourceFatal(f"another download of this file is running ({owner})") from None
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()
                continue
            with os.fdopen(fd, "w") as f:
                f.write(me)
            job.lock_path = lock
            return

    def _release_lock(self, job: _Job) -> None:
        if job.lock_path is not None:
            with contextlib.suppress(FileNotFoundError):
                job.lock_path.unlink()
            job.lock_path = None


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
            f"not enough disk space in {path}: need {_human(need)} (+{_human(reserve)} reserve), "
            f"{_human(free)} free"
        )


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human(n: float) -> str:
    return _human(n)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
