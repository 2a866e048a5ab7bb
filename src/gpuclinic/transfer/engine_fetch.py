"""The download engine's connection worker: one ranged GET at a time, retried until its segment is on disk.

Why a layer of its own: HTTP is handled only here (status codes, Content-Range, If-Range,
expired signed redirects, Retry-After, mid-body errors) and turned into the engine's own
outcomes (retry, ban the source, abandon, the object changed); the bytes go to the part file and
the progress journal in write order.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable

import httpx

from gpuclinic.errors import GpuclinicError
from gpuclinic.transfer import resume
from gpuclinic.transfer.engine_jobs import (
    _Abandon,
    _Job,
    _ObjectChanged,
    _origin,
    _retry_after,
    _Retryable,
    _Segment,
    _Source,
    _SourceFatal,
)
from gpuclinic.transfer.engine_plan import _Planner
from gpuclinic.transfer.redact import redact, safe_url
from gpuclinic.transfer.resume import JOURNAL_STEP, Journal


class _Fetcher(_Planner):
    """Runs segments over the shared HTTP client and writes their bytes."""

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

    def _headers_for(self, job: _Job, url: str) -> dict[str, str]:
        origin = _origin(url)
        if origin in job.spec.source_headers:
            return dict(job.spec.source_headers[origin])
        if job.spec.headers and origin in job.spec.auth_origins:
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
        self._raise_for_status(src, r, url, job.spec.reauth)
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
    def _raise_for_status(
        src: _Source, r: httpx.Response, url: str, reauth: Callable[[str, str], bool] | None = None
    ) -> None:
        """Anything but 200/206: retry (429/503/5xx, an expired signed redirect, a 401 after new
        credentials) or ban the source."""
        code = r.status_code
        if code == 401 and reauth is not None and url == src.url and not r.history:
            # the hook bounds the renewals (many connections share one); the retry budget bounds the rest
            if reauth(url, r.headers.get("www-authenticate", "")):
                raise _Retryable("HTTP 401 (credentials renewed, retrying)")
            raise _SourceFatal("HTTP 401 Unauthorized")
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
