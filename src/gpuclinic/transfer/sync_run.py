"""``gpuclinic sync``, running part: parallel rsync streams, big files as verified block ranges, final
checksums.

Why this shape: rsync stays the tool for many files (quick check, partial files, permissions,
symlinks); we only decide which files go over which of N ssh connections.  A file larger than a
fair share of the work cannot be balanced, and rsync cannot send part of a file, so big files go
as block ranges: ``dd`` on the server writes (or reads) 8 MiB-aligned runs of ``FILE.gpuclinic-part``
over parallel ssh streams.  Resume needs no state file: the part file is compared block by block
(sha256 on both sides, one round trip) and only missing or wrong blocks are sent again.  The part
file becomes the real name only after its sha256 matches the source (atomic ``mv``/rename).  At the
end every small file is hashed on both sides too; a mismatch is repaired once with
``rsync --checksum``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.transfer.sync import (
    BLOCK,
    MiB,
    Ssh,
    SyncError,
    Task,
    q,
    range_tasks,
)
from gpuclinic.transfer.sync_plan import (
    RSYNC_PARTIAL,
    BigFile,
    Plan,
    SyncOptions,
    _h,
    close_workdir,
    make_plan,
)
from gpuclinic.transfer.sync_probe import StreamMeter, choose_compression, choose_streams, diagnose_ssh, rules


@dataclass
class SyncResult:
    plan: Plan
    seconds: float
    sent: int  # bytes of file data moved by this run (approximate for rsync streams)
    verified: int  # files whose sha256 matched on both sides
    repaired: list[str] = field(default_factory=list)
    transfer_s: float = 0.0  # the data phase alone (no probe, no verification)
    deleted: int = 0  # --delete: destination entries removed

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.plan.to_dict(),
            "seconds": round(self.seconds, 3),
            "transfer_seconds": round(self.transfer_s, 3),
            "sent": self.sent,
            "verified": self.verified,
            "repaired": self.repaired,
            "deleted": self.deleted,
        }


class Runner:
    """Runs the tasks on ``streams`` worker threads; each task checks its own bytes (sha256) as soon as
    it is done, so verification overlaps the other streams instead of adding a pass at the end."""

    def __init__(self, plan: Plan, ssh: Ssh, opts: SyncOptions) -> None:
        self.plan, self.ssh, self.opts = plan, ssh, opts
        self.sent = 0
        self.verified = 0
        self.repaired: list[str] = []
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.tmp = plan.workdir or tempfile.mkdtemp(prefix="gpuclinic-sync-")
        self.regular = {e.name for e in plan.entries if e.kind == "f"}
        self.sizes = {e.name: e.size for e in plan.entries}
        self.local = threading.local()  # .control: this worker's ssh control socket
        self.verifier = ThreadPoolExecutor(
            max_workers=max(1, plan.streams, opts.max_streams), thread_name_prefix="gpuclinic-verify"
        )
        # a task's follow-up (wait for its checks, repair): apart from the checks it waits on
        self.settler = ThreadPoolExecutor(
            max_workers=max(1, plan.streams, opts.max_streams), thread_name_prefix="gpuclinic-settle"
        )
        self.settling: list[Future[None]] = []
        self.big = {b.entry.name: b for b in plan.big}
        self.queue: queue.Queue[Task] = queue.Queue()
        self.workers: list[threading.Thread] = []
        self.target = plan.streams  # workers numbered at or above this retire after their current task
        self.done = False
        self.busy = 0  # workers inside a task

    def log(self, msg: str) -> None:
        if not self.opts.quiet:
            print(f"gpuclinic sync: {msg}", file=sys.stderr, flush=True)

    def run(self) -> SyncResult:
        t0 = time.monotonic()
        p = self.plan
        stop = threading.Event()
        try:
            for t in p.tasks:
                self.queue.put(t)
            self._grow(min(p.streams, max(1, len(p.tasks))))
            adapter = threading.Thread(target=self._adapt, args=(stop,), daemon=True)
            if p.adaptive and p.probe and len(p.tasks) > p.streams:
                adapter.start()
            while True:  # the adapter may add workers while we wait
                with self.lock:
                    ws = list(self.workers)
                for w in ws:
                    w.join()
                with self.lock:
                    if len(self.workers) == len(ws):
                        self.done = True
                        break
            stop.set()
            if adapter.is_alive():
                adapter.join()
            for f in self.settling:
                f.result()
            if self.errors:
                raise SyncError(
                    f"{self.errors[0]}"
                    + (f" (+{len(self.errors) - 1} more)" if len(self.errors) > 1 else "")
                    + "; rerun the same command to resume"
                )
            self._finish_big()
            deleted = self._delete()
            self._settle_probe()
            dt = time.monotonic() - t0
            self.log(f"{_h(self.sent)} sent and verified in {dt:.1f} s ({_h(self.sent / max(dt, 1e-6))}/s)")
            return SyncResult(p, dt, self.sent, self.verified, self.repaired, dt, deleted)
        finally:
            stop.set()
            self.settler.shutdown(wait=True)
            self.verifier.shutdown(wait=True)
            close_workdir(self.ssh, self.tmp)

    def _grow(self, n: int) -> None:
        """Run ``n`` workers (workers at or above the target stop after their current task)."""
        with self.lock:
            self.target = n
            if self.done:
                return
            for i in range(len(self.workers), n):
                w = threading.Thread(target=self._worker, args=(self.queue, i), daemon=True)
                self.workers.append(w)
                w.start()

    def _adapt(self, stop: threading.Event) -> None:
        """Settle the stream count on the transfer itself: the probe measured one stream; the total of
        the streams now running, read from their ssh masters' byte counters, says whether more
        connections add up (a per-connection cap: grow) or share one limit (the link).  Never cut: the
        counters are the sender's, and while socket buffers fill they read high, then settle; a cut on
        such a sample would cost a capped path half its streams, a needless growth only CPU."""
        p, pr = self.plan, self.plan.probe
        assert pr is not None
        r = rules()["streams"]
        meter = StreamMeter(self.ssh, self.tmp, p.direction)
        for _ in range(int(r["adapt_rounds"])):
            if stop.wait(float(r["adapt_warmup_s"])):
                return
            a, ta = meter.sample(), time.monotonic()
            if stop.wait(float(r["adapt_window_s"])):
                return
            total = StreamMeter.rate(a, meter.sample(), time.monotonic() - ta)
            if total is None:
                p.stream_reason += "; no byte counters of the ssh connections here, so kept"
                return
            n = self.target
            if self.queue.qsize() + self.busy < n:  # streams ran out of work: the sample says nothing
                return
            pr.multi_stream, pr.multi_n = total, n
            want, why = choose_streams(pr, self.opts.max_streams)
            if want < n:  # the connections are open already: fewer would only leave gaps, and a sample
                want, why = n, f"{why}; kept the {n} open"  # taken while buffers fill is no reason to cut
            p.streams, p.stream_reason = want, f"{why} (measured on the transfer)"
            if self.opts.compress == "auto":
                p.compress, p.compress_reason = choose_compression(pr, want, total)
            p.notes = diagnose_ssh(self.ssh.config(), pr)
            self.log(f"{n} streams move {_h(total)}/s, one alone {_h(pr.one_stream)}/s: {want} streams")
            self._grow(want)
            if want <= n:
                return

    def _settle_probe(self) -> None:
        """The RTT echo may end after the transfer started (it is off the critical path): with it in,
        the ssh findings are made again."""
        for t in self.plan.openers.values():
            if t.ident is not None:
                t.join(30)
        if self.plan.probe:
            self.plan.notes = diagnose_ssh(self.ssh.config(), self.plan.probe)

    def _delete(self) -> int:
        """``--delete``, after everything else arrived and checked out (as ``rsync --delete-after``)."""
        p = self.plan
        names = [n for n in p.deletes or [] if n and not n.startswith("/") and ".." not in n.split("/")]
        if not names:
            return 0
        if p.direction == "push":
            data = b"\0".join(n.encode("utf-8", "surrogateescape") for n in names) + b"\0"
            self.ssh.run(
                f"cd {q(p.dst.path)} && xargs -0 rm -rf --",
                input=data,
                timeout=3600,
                control=os.path.join(self.tmp, "cm0"),
            )
        else:
            for n in names:
                path = os.path.join(p.dst.path, n)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
        self.log(f"deleted {len(names)} destination entries not in the source")
        return len(names)

    def _worker(self, tasks: queue.Queue[Task], i: int) -> None:
        self.local.control = os.path.join(self.tmp, f"cm{i}")
        opener = self.plan.openers.get(self.local.control)
        if opener is not None:  # the planner opened this stream's connection: use it once it is up
            opener.join(60)
        while i < self.target:
            try:
                t = tasks.get_nowait()
            except queue.Empty:
                return
            with self.lock:
                self.busy += 1
            try:
                self._run_task(t)
            finally:
                with self.lock:
                    self.busy -= 1

    def _settle_later(self, settle: Callable[[], None]) -> None:
        """A task's checks are waited for, and what differs is repaired, beside the stream's next task
        (the stream does not idle on its last check: that gap would show in the tail); the run
        waits for all of them before it ends.  Errors are kept for the end, as a task's are."""
        with self.lock:
            self.settling.append(self.settler.submit(self._retried, settle, 3))

    def _run_task(self, t: Task) -> None:
        """One task, retried (a cut connection, a server that restarted)."""
        self._retried(lambda: self._rsync_task(t) if t.kind == "rsync" else self._range_task(t), 5)

    def _retried(self, step: Callable[[], None], attempts: int) -> None:
        """Run ``step`` up to ``attempts`` times with a growing pause; the last error is kept for the end."""
        err = ""
        for attempt in range(attempts):
            try:
                step()
                return
            except SyncError as e:
                err = str(e)
                self.log(f"retrying: {err}")
                time.sleep(min(8.0, 0.5 * 2**attempt))
        with self.lock:
            self.errors.append(err)

    # ------------------------------------------------------------------ many files: rsync
    def _endpoints(self) -> tuple[str, str]:
        p = self.plan
        if p.direction == "push":
            return p.src_root.rstrip("/") + "/", f"{p.host}:{p.dst.path.rstrip('/')}/"
        return f"{p.host}:{p.src_root.rstrip('/')}/", p.dst.path.rstrip("/") + "/"

    def _rsync(self, names: list[str], *, checksum: bool = False, control: str | None = None) -> None:
        fd, listfile = tempfile.mkstemp(dir=self.tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0".join(n.encode("utf-8", "surrogateescape") for n in names) + b"\0")
        src, dst = self._endpoints()
        cmd = [
            "rsync",
            "-a",
            f"--partial-dir={RSYNC_PARTIAL}",
            "-e",
            self.ssh.rsh(control=control or self.local.control),
            "--from0",
            f"--files-from={listfile}",
        ]
        if self.plan.compress:
            cmd.append("-z")
        if checksum:
            cmd.append("--checksum")
        r = subprocess.run([*cmd, src, dst], capture_output=True, text=True)
        with contextlib.suppress(OSError):
            os.unlink(listfile)
        if r.returncode != 0:
            err = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            raise SyncError(f"rsync stream ({len(names)} files): {err}")

    def _rsync_task(self, t: Task) -> None:
        """The task's files in a few batches; each batch is hashed on both sides while the stream sends
        the next batch or task, so only the last batch's check is left when the data is through (one
        rsync per task would save rsync starts, but a task that ends late would leave the check of
        all its bytes after the last byte: 2.3 s against 0.4-0.7 s in a run under load)."""
        sizes = self.sizes
        step = max(16 * MiB, t.size // 6)
        batches: list[list[str]] = [[]]
        acc = 0
        for n in t.names:
            if acc >= step and batches[-1]:
                batches.append([])
                acc = 0
            batches[-1].append(n)
            acc += sizes.get(n, 0)
        control = self.local.control
        checks: list[tuple[list[str], Future[list[str]]]] = []
        for b in batches:
            self._rsync(b)
            with self.lock:
                self.sent += sum(sizes.get(n, 0) for n in b)
            if self.opts.verify:
                names = [n for n in b if n in self.regular]
                checks.append((names, self.verifier.submit(self._compare_files, names, control)))

        def settle() -> None:
            bad: list[str] = []
            for names, c in checks:
                try:
                    bad += c.result()
                except SyncError:  # the check's session failed: check again
                    bad += self._compare_files(names, control)
            if bad:
                self.log(f"{len(bad)} file(s) differ after the transfer; resending them with --checksum")
                self._rsync(bad, checksum=True, control=control)
                still = self._compare_files(bad, control)
                if still:
                    raise SyncError(f"{still[0]}: sha256 still differs after a --checksum resend")
                with self.lock:
                    self.repaired += bad

        self._settle_later(settle)

    def _compare_files(self, names: list[str], control: str) -> list[str]:
        """sha256 of ``names`` on both sides (the server's in one ssh round trip); the names that differ."""
        if not names:
            return []
        p = self.plan
        remote_root = p.dst.path if p.direction == "push" else p.src_root
        local_root = p.src_root if p.direction == "push" else p.dst.path
        data = b"\0".join(n.encode("utf-8", "surrogateescape") for n in names) + b"\0"
        ours: dict[str, str] = {}
        # our side hashes while the server does (hashlib lets go of the GIL): the last batch's check is
        # all that is left when the data is through, so its time is the run's tail
        local = threading.Thread(target=_hash_all, args=(local_root, names, ours), daemon=True)
        local.start()
        try:
            out = self.ssh.run(
                f"cd {q(remote_root)} && xargs -0 sha256sum --", input=data, timeout=3600, control=control
            )
        finally:
            local.join()
        theirs: dict[str, str] = {}
        for line in out.decode("utf-8", "surrogateescape").splitlines():
            h, _, name = line.partition("  ")
            if h.startswith("\\"):
                h, name = h[1:], name.replace("\\\\", "\\")
            theirs[name] = h
        bad = [n for n in names if n not in ours or theirs.get(n) != ours[n]]
        with self.lock:
            self.verified += len(names) - len(bad)
        return bad

    # ------------------------------------------------------------------ big files: block ranges
    def _range_task(self, t: Task) -> None:
        """Sub-runs of 16 blocks; each is hashed on both sides while the next one is sent."""
        bf = self.big[t.name]
        control = self.local.control
        checks: list[tuple[int, int, Future[list[int]]]] = []
        for k in range(t.first_block, t.first_block + t.nblocks, 16):
            n = min(16, t.first_block + t.nblocks - k)
            sub = _sub_range(t.name, bf.entry.size, k, n)
            self._send_range(bf, sub)
            with self.lock:
                self.sent += sub.size
            checks.append((k, n, self.verifier.submit(self._check_range, bf, k, n, control)))

        def settle() -> None:
            bad: list[int] = []
            for k, n, c in checks:
                try:
                    bad += c.result()
                except SyncError:  # the check's session failed: check again
                    bad += self._check_range(bf, k, n, control)
            for _ in range(2):
                if not bad:
                    return
                self.log(f"{t.name}: {len(bad)} block(s) differ, sending them again")
                for sub in range_tasks(t.name, bf.entry.size, bad, 1):
                    self._send_range(bf, sub, control)
                bad = [
                    b
                    for sub in range_tasks(t.name, bf.entry.size, bad, 1)
                    for b in self._check_range(bf, sub.first_block, sub.nblocks, control)
                ]
            if bad:
                raise SyncError(f"{t.name}: block {bad[0]} still differs after two resends")

        self._settle_later(settle)

    def _send_range(self, bf: BigFile, t: Task, control: str | None = None) -> None:
        control = control or self.local.control
        off = t.first_block * BLOCK
        n = t.size
        cdd = f"bs={BLOCK} iflag=fullblock status=none"
        if self.plan.direction == "push":
            cmd = self.ssh.cmd(
                f"dd of={q(bf.part)} seek={t.first_block} conv=notrunc {cdd}",
                compress=self.plan.compress,
                control=control,
            )
            p = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            assert p.stdin is not None and p.stderr is not None
            try:
                with open(bf.src, "rb") as f:
                    f.seek(off)
                    left = n
                    while left > 0:
                        buf = f.read(min(MiB, left))
                        if not buf:
                            raise SyncError(f"{bf.entry.name}: source shrank while sending")
                        p.stdin.write(buf)
                        left -= len(buf)
                p.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            err = p.stderr.read().decode(errors="replace")
            if p.wait() != 0:
                raise SyncError(
                    f"{bf.entry.name}: range stream failed: "
                    f"{(err.strip().splitlines() or ['ssh exited'])[-1]}"
                )
            return
        cmd = self.ssh.cmd(
            f"dd if={q(bf.src)} skip={t.first_block} count={t.nblocks} {cdd}",
            compress=self.plan.compress,
            control=control,
        )
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout is not None and p.stderr is not None
        got = 0
        fd = os.open(bf.part, os.O_WRONLY)
        try:
            while got < n:
                buf = os.read(p.stdout.fileno(), MiB)
                if not buf:
                    break
                os.pwrite(fd, buf, off + got)
                got += len(buf)
        finally:
            os.close(fd)
        err = p.stderr.read().decode(errors="replace")
        if p.wait() != 0 or got != n:
            raise SyncError(
                f"{bf.entry.name}: range stream got {got} of {n} bytes: "
                f"{(err.strip().splitlines() or ['cut'])[-1]}"
            )

    def _check_range(self, bf: BigFile, first: int, count: int, control: str) -> list[int]:
        """Block numbers in [first, first+count) whose sha256 differs between source and part file."""
        remote_file = bf.part if self.plan.direction == "push" else bf.src
        out = self.ssh.run(
            f"dd if={q(remote_file)} bs={BLOCK} skip={first} count={count} status=none | "
            f"split -b {BLOCK} --filter=sha256sum -",
            timeout=3600,
            control=control,
        )
        theirs = [line.split()[0] for line in out.decode().splitlines() if line.strip()]
        local_file = bf.src if self.plan.direction == "push" else bf.part
        ours: list[str] = []
        with open(local_file, "rb") as f:
            f.seek(first * BLOCK)
            for _ in range(count):
                blk = f.read(BLOCK)
                if not blk:
                    break
                ours.append(hashlib.sha256(blk).hexdigest())
        return [first + i for i in range(len(ours)) if i >= len(theirs) or theirs[i] != ours[i]]

    def _finish_big(self) -> None:
        """Every block was checked by its stream (or matched before a resume): check the size, set mode
        and time, and rename the part file onto the real name (atomic on the destination)."""
        todo = [b for b in self.plan.big if not b.skipped]
        if not todo:
            return
        if self.plan.direction == "push":
            cmds = [
                f'[ "$(stat -c %s -- {q(b.part)})" = {b.entry.size} ] && chmod {b.entry.mode:o} -- '
                f"{q(b.part)} && "
                f"touch -m -d @{b.entry.mtime:.9f} -- {q(b.part)} && mv -f -- {q(b.part)} {q(b.dst)}"
                for b in todo
            ]
            self.ssh.run(" && ".join(cmds), control=os.path.join(self.tmp, "cm0"))
        else:
            for b in todo:
                if os.path.getsize(b.part) != b.entry.size:
                    raise SyncError(f"{b.entry.name}: part file has the wrong size; rerun to resume")
                os.chmod(b.part, b.entry.mode)
                os.utime(b.part, (time.time(), b.entry.mtime))
                os.replace(b.part, b.dst)
        with self.lock:
            self.verified += len(todo)


def _sub_range(name: str, size: int, first: int, n: int) -> Task:
    end = min(size, (first + n) * BLOCK)
    return Task("range", end - first * BLOCK, name=name, first_block=first, nblocks=n)


def _hash_all(root: str, names: list[str], out: dict[str, str]) -> None:
    for n in names:
        with contextlib.suppress(OSError):  # unreadable: no hash, so it counts as different
            out[n] = _sha256(os.path.join(root, n))


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


def sync(src: str, dst: str, opts: SyncOptions) -> tuple[Plan, SyncResult | None]:
    plan, ssh = make_plan(src, dst, opts)
    if opts.dry_run:
        close_workdir(ssh, plan.workdir)
        return plan, None
    return plan, Runner(plan, ssh, opts).run()
