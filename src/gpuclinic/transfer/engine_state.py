"""The engine's shared state and the files kept beside the download: snapshot, journal, lock; verification.

Why a layer of its own: this decides what sits next to the destination (``FILE.gpuclinic-state``,
``-journal``, ``-lock``), when the part file becomes the final file (hash, fsync, rename) and what
is thrown away on a mismatch or a changed object.  The scheduler (engine_plan.py) and the
connection workers (engine_fetch.py) build on it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from gpuclinic.transfer import resume
from gpuclinic.transfer.engine_jobs import (
    JOURNAL_MIN_SIZE,
    LOCK_SUFFIX,
    EngineOptions,
    _git_sha1_hasher,
    _Job,
    _SourceFatal,
)
from gpuclinic.transfer.redact import redact, safe_url
from gpuclinic.transfer.resume import STATE_VERSION, Journal


class _EngineCore:
    """The state every engine layer shares, and what happens to a file's bytes on disk."""

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

    # ------------------------------------------------------------------ bookkeeping
    def _emit(self, what: str, job: _Job) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(what, job)

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

    def _all_finished(self) -> bool:
        live = self._live_jobs()
        return self._skip_started() >= len(self.jobs) and not live

    def _live_jobs(self) -> list[_Job]:
        self._live = [j for j in self._live if j.state not in ("done", "failed")]
        return self._live

    def _skip_started(self) -> int:
        """Move past jobs that left "new" (they leave in order); returns the first one still new."""
        while self._new_idx < len(self.jobs) and self.jobs[self._new_idx].state != "new":
            self._new_idx += 1
        return self._new_idx

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
