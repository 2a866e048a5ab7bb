"""Request planning for the download engine: which bytes an idle connection asks for next.

Why a layer of its own: the order of preference (open the next file, speculative ranges while
the size is unknown, unassigned pieces, then stealing half of the largest tail), the sizing of
the first response and the adaptive connection count are the engine's policy; the connection
workers (engine_fetch.py) only carry out what this layer hands them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpuclinic.errors import GpuclinicError
from gpuclinic.transfer import resume
from gpuclinic.transfer.engine_jobs import (
    SPECULATIVE_CHUNK,
    STEAL_MIN_PIECES,
    MiB,
    _Abandon,
    _check_free,
    _Job,
    _Segment,
    _SourceFatal,
)
from gpuclinic.transfer.engine_state import _EngineCore


class _Planner(_EngineCore):
    """Hands segments to connections, opens files, and sets the number of connections."""

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

    def _allocate(self) -> _Segment | None:
        """The next request for an idle connection, in this order of preference."""
        return self._open_next() or self._speculative() or self._unassigned() or self._steal()

    def _open_next(self) -> _Segment | None:
        """1) Open a file nobody is opening (the first request doubles as the probe)."""
        self._skip_started()
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

    def _back_off(self) -> None:
        with self.cv:
            active = sum(1 for j in self._live_jobs() for s in j.segments if s.active)
            self.target = max(1, min(self.target, max(active, 2)) // 2)
            self.freeze_until = time.monotonic() + 10.0

    # ------------------------------------------------------------------ opening a file
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
