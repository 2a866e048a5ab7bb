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

This module is the public entry (``Engine.run`` and the types callers need).  The engine is built
in layers, each a base class of the next: engine_jobs.py (the records), engine_state.py (disk:
snapshot, journal, locks, verification), engine_plan.py (which bytes a connection asks for next,
how many connections), engine_fetch.py (one connection's HTTP requests).
"""

from __future__ import annotations

import contextlib
import threading
import time

from gpuclinic.transfer.engine_fetch import _Fetcher
from gpuclinic.transfer.engine_jobs import (
    JOURNAL_MIN_SIZE,
    DownloadError,
    EngineOptions,
    FileResult,
    FileSpec,
    _fsync_dir,
    _Job,
    human,
)
from gpuclinic.transfer.redact import redact, safe_url

__all__ = [
    "JOURNAL_MIN_SIZE",
    "DownloadError",
    "Engine",
    "EngineOptions",
    "FileResult",
    "FileSpec",
    "human",
]


class Engine(_Fetcher):
    """Download a list of files with a shared pool of connections."""

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
