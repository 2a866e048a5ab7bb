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
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.transfer.sync import (
    BIG_MIN,
    BLOCK,
    PART_SUFFIX,
    Endpoint,
    Entry,
    MiB,
    Probe,
    Ssh,
    SyncError,
    Task,
    balance,
    block_hashes_local,
    block_hashes_remote,
    check_names,
    choose_compression,
    choose_streams,
    diagnose_ssh,
    list_local,
    list_remote,
    parse_endpoint,
    probe_link,
    q,
    range_tasks,
    sample_compression,
)

RSYNC_PARTIAL = ".gpuclinic-rsync-partial"


@dataclass
class SyncOptions:
    rsh: str | None = None
    streams: int | None = None
    max_streams: int = 16
    compress: str = "auto"  # auto | yes | no
    dry_run: bool = False
    verify: bool = True
    probe: bool = True
    quiet: bool = False


@dataclass
class BigFile:
    entry: Entry
    src: str  # full source path (local or on the server)
    dst: str  # full destination path
    part: str
    todo: list[int]
    reused_blocks: int = 0
    skipped: bool = False


@dataclass
class Plan:
    direction: str
    src: Endpoint
    dst: Endpoint
    host: str
    target: str  # user@hostname:port from ssh -G
    src_root: str
    entries: list[Entry]
    streams: int
    stream_reason: str
    compress: bool
    compress_reason: str
    probe: Probe | None
    notes: list[str]
    tasks: list[Task] = field(default_factory=list)
    big: list[BigFile] = field(default_factory=list)
    plan_s: float = 0.0  # probing and planning time
    workdir: str = ""  # private dir: file lists and the streams' ssh control sockets (cm0, cm1, ...)

    @property
    def total(self) -> int:
        return sum(e.size for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "src": str(self.src),
            "dst": str(self.dst),
            "host": self.host,
            "target": self.target,
            "plan_seconds": round(self.plan_s, 3),
            "files": len(self.entries),
            "bytes": self.total,
            "streams": self.streams,
            "stream_reason": self.stream_reason,
            "compress": self.compress,
            "compress_reason": self.compress_reason,
            "probe": self.probe.to_dict() if self.probe else None,
            "ssh_notes": self.notes,
            "rsync_streams": [
                {"files": len(t.names), "bytes": t.size} for t in self.tasks if t.kind == "rsync"
            ],
            "big_files": [
                {
                    "name": b.entry.name,
                    "bytes": b.entry.size,
                    "blocks_to_send": len(b.todo),
                    "blocks_reused": b.reused_blocks,
                    "skipped": b.skipped,
                }
                for b in self.big
            ],
        }

    def lines(self) -> list[str]:
        out = [
            f"sync {self.direction}: {self.src} -> {self.dst}  ({self.host} = {self.target})",
            f"  {len(self.entries)} entries, {_h(self.total)}",
        ]
        pr = self.probe
        if pr:
            gain = pr.multi_stream / pr.one_stream if pr.one_stream else 0.0
            out.append(
                f"  link: handshake {pr.handshake_s:.2f} s, RTT {pr.rtt_s * 1000:.0f} ms, 1 stream "
                f"{_h(pr.one_stream)}/s, "
                f"{pr.multi_n} streams {_h(pr.multi_stream)}/s ({gain:.1f}x); {pr.cpus} CPUs, zlib "
                f"{_h(pr.compress_speed)}/s"
            )
        out.append(f"  streams: {self.streams} ({self.stream_reason})")
        out.append(f"  {self.compress_reason}")
        rs = [t for t in self.tasks if t.kind == "rsync"]
        if rs:
            out.append(
                f"  {sum(len(t.names) for t in rs)} files in {len(rs)} rsync streams of "
                f"~{_h(max(t.size for t in rs))}"
            )
        for b in self.big:
            if b.skipped:
                out.append(
                    f"  {b.entry.name}: {_h(b.entry.size)} already at the destination (same size and time)"
                )
            else:
                out.append(
                    f"  {b.entry.name}: {_h(b.entry.size)} as block ranges, {len(b.todo)} of "
                    f"{math.ceil(b.entry.size / BLOCK)} blocks to send ({b.reused_blocks} already there)"
                )
        if self.notes:
            out.append("  ssh setup:")
            out += [f"    - {n}" for n in self.notes]
        return out


def _h(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _join(root: str, name: str) -> str:
    return name if name.startswith("/") else f"{root.rstrip('/')}/{name}" if root not in ("", ".") else name


def make_plan(src_text: str, dst_text: str, opts: SyncOptions) -> tuple[Plan, Ssh]:
    src, dst = parse_endpoint(src_text), parse_endpoint(dst_text)
    if bool(src.host) == bool(dst.host):
        raise InputError(
            "one of SRC and DST must be remote (HOST:PATH) and the other local", exit_code=EXIT_USAGE
        )
    if opts.streams is not None and not 1 <= opts.streams <= 64:
        raise InputError("--streams must be between 1 and 64", exit_code=EXIT_USAGE)
    direction = "push" if dst.host else "pull"
    host = str(dst.host or src.host)
    ssh = Ssh(host, opts.rsh)
    cfg = ssh.config()
    target = f"{cfg.get('user', '?')}@{cfg.get('hostname', host)}:{cfg.get('port', '22')}"
    if direction == "push":
        root, entries = list_local(src.path)
    else:
        root, entries = list_remote(ssh, src.path)
    check_names(entries)
    pr: Probe | None = None
    t_probe = time.monotonic()
    # big-file candidates (the threshold can only rise once the stream count is known): their state
    # at the destination is read while the probe runs
    total = sum(e.size for e in entries)
    cand = [e for e in entries if e.kind == "f" and e.size >= max(BIG_MIN, total // (2 * opts.max_streams))]
    states: list[list[BigFile]] = []
    plan0 = Plan(direction, src, dst, host, target, root, entries, 0, "", False, "", None, [])
    st = threading.Thread(target=lambda: states.append(_big_states(ssh, plan0, cand)))
    st.start()
    workdir = tempfile.mkdtemp(prefix="gpuclinic-sync-")
    if opts.probe:
        sample: list[tuple[float, float]] = []
        th = threading.Thread(
            target=lambda: sample.append(sample_compression(root, entries, direction == "push"))
        )
        th.start()  # disk and CPU, while the probes wait on the network
        # the multi-stream probe's connections stay open as the first streams' masters
        pr = probe_link(
            ssh, direction, controls=[os.path.join(workdir, f"cm{i}") for i in range(opts.max_streams)]
        )
        th.join()
        pr.compress_speed, pr.compress_ratio = sample[0] if sample else (0.0, 1.0)
    if opts.streams:
        streams, why = opts.streams, "fixed by --streams"
    elif pr:
        streams, why = choose_streams(pr, opts.max_streams)
    else:
        streams, why = min(8, opts.max_streams), "no probe; default"
    if opts.compress != "auto":
        comp, cwhy = (
            opts.compress == "yes",
            f"compression {'on' if opts.compress == 'yes' else 'off'} (--compress)",
        )
    elif pr:
        comp, cwhy = choose_compression(pr, streams)
    else:
        comp, cwhy = False, "compression off (no probe)"
    notes = diagnose_ssh(cfg, pr)
    plan = Plan(direction, src, dst, host, target, root, entries, streams, why, comp, cwhy, pr, notes)
    plan.workdir = workdir
    st.join()
    if not states:
        raise SyncError(f"ssh {host}: could not read the destination state of the big files")
    big_min = max(BIG_MIN, total // (2 * streams))
    plan.big = [b for b in states[0] if b.entry.size >= big_min]
    big_names = {b.entry.name for b in plan.big}
    small = [e for e in entries if e.name not in big_names]
    tasks: list[Task] = []
    # up to eight tasks per stream from one queue (a stream that finishes early takes the next one, so
    # the streams end together), but none shorter than ~2 s of one stream: each task pays a session start
    per_stream = pr.one_stream if pr and pr.one_stream else 8 * MiB
    min_task = max(MiB, 2 * per_stream)

    def pieces(nbytes: int, items: int) -> int:
        return max(min(streams, items), min(8 * streams, math.ceil(nbytes / min_task)))

    if small:
        for b in balance(small, pieces(sum(e.size for e in small), len(small))):
            tasks.append(Task("rsync", sum(e.size for e in b), names=[e.name for e in b]))
    for bf in plan.big:
        if not bf.skipped:
            tasks += range_tasks(
                bf.entry.name, bf.entry.size, bf.todo, pieces(len(bf.todo) * BLOCK, len(bf.todo))
            )
    plan.tasks = sorted(tasks, key=lambda t: -t.size)
    plan.plan_s = time.monotonic() - t_probe
    return plan, ssh


def _big_states(ssh: Ssh, plan: Plan, big: list[Entry]) -> list[BigFile]:
    """Where each big file stands at the destination: done already, partly there (resume), or absent.
    One ssh round trip for all of them (each ssh handshake costs several RTTs)."""
    out: list[BigFile] = []
    for e in big:
        dst = _join(plan.dst.path, e.name)
        d, _, base = dst.rpartition("/")
        part = f"{d}/.{base}{PART_SUFFIX}" if d else f".{base}{PART_SUFFIX}"
        out.append(
            BigFile(e, _join(plan.src_root, e.name), dst, part, list(range(math.ceil(e.size / BLOCK))))
        )
    if not out:
        return out
    if plan.direction == "push":
        cmd = "; ".join(
            f"stat -c '%s %Y' -- {q(b.dst)} 2>/dev/null || echo - -; stat -c %s -- {q(b.part)} 2>/dev/null "
            "|| echo 0"
            for b in out
        )
        words = ssh.run(cmd).decode().split()
        states = [
            (words[3 * i], words[3 * i + 1], int(words[3 * i + 2]) if words[3 * i + 2].isdigit() else 0)
            for i in range(len(out))
        ]
    else:
        states = []
        for b in out:
            try:
                st = os.stat(b.dst)
                dsize, dmtime = str(st.st_size), str(int(st.st_mtime))
            except OSError:
                dsize, dmtime = "-", "-"
            states.append((dsize, dmtime, os.path.getsize(b.part) if os.path.exists(b.part) else 0))
    for bf, (dsize, dmtime, psize) in zip(out, states, strict=True):
        e = bf.entry
        nblocks = len(bf.todo)
        if dsize == str(e.size) and dmtime == str(int(e.mtime)):
            bf.skipped, bf.todo = True, []
            continue
        if psize > 0:
            if plan.direction == "push":
                theirs, ours = block_hashes_remote(ssh, bf.part), block_hashes_local(bf.src, e.size)
            else:
                theirs, ours = (
                    block_hashes_remote(ssh, bf.src),
                    block_hashes_local(bf.part, min(e.size, psize)),
                )
            bf.todo = [
                i for i in range(nblocks) if i >= len(theirs) or i >= len(ours) or theirs[i] != ours[i]
            ]
        bf.reused_blocks = nblocks - len(bf.todo)
    return out


@dataclass
class SyncResult:
    plan: Plan
    seconds: float
    sent: int  # bytes of file data moved by this run (approximate for rsync streams)
    verified: int  # files whose sha256 matched on both sides
    repaired: list[str] = field(default_factory=list)
    transfer_s: float = 0.0  # the data phase alone (no probe, no verification)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.plan.to_dict(),
            "seconds": round(self.seconds, 3),
            "transfer_seconds": round(self.transfer_s, 3),
            "sent": self.sent,
            "verified": self.verified,
            "repaired": self.repaired,
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
        self.local = threading.local()  # .control: this worker's ssh control socket
        self.verifier = ThreadPoolExecutor(
            max_workers=max(1, plan.streams), thread_name_prefix="gpuclinic-verify"
        )
        self.big = {b.entry.name: b for b in plan.big}

    def log(self, msg: str) -> None:
        if not self.opts.quiet:
            print(f"gpuclinic sync: {msg}", file=sys.stderr, flush=True)

    def run(self) -> SyncResult:
        t0 = time.monotonic()
        p = self.plan
        try:
            self._prepare()
            q_: queue.Queue[Task] = queue.Queue()
            for t in p.tasks:
                q_.put(t)
            n = min(p.streams, max(1, len(p.tasks)))
            workers = [threading.Thread(target=self._worker, args=(q_, i), daemon=True) for i in range(n)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            if self.errors:
                raise SyncError(
                    f"{self.errors[0]}"
                    + (f" (+{len(self.errors) - 1} more)" if len(self.errors) > 1 else "")
                    + "; rerun the same command to resume"
                )
            self._finish_big()
            dt = time.monotonic() - t0
            self.log(f"{_h(self.sent)} sent and verified in {dt:.1f} s ({_h(self.sent / max(dt, 1e-6))}/s)")
            return SyncResult(p, dt, self.sent, self.verified, self.repaired, dt)
        finally:
            self.verifier.shutdown(wait=True)
            close_workdir(self.ssh, self.tmp)

    def _prepare(self) -> None:
        p = self.plan
        dirs = sorted({b.dst.rpartition("/")[0] for b in p.big if not b.skipped} | {p.dst.path})
        dirs = [d for d in dirs if d]
        if p.direction == "push":
            cmd = "mkdir -p -- " + " ".join(q(d) for d in dirs)
            for b in p.big:
                if not b.skipped:
                    cmd += f" && touch -- {q(b.part)} && truncate -s {b.entry.size} -- {q(b.part)}"
            self.ssh.run(cmd)
        else:
            for d in dirs:
                os.makedirs(d, exist_ok=True)
            for b in p.big:
                if not b.skipped:
                    with open(b.part, "ab") as f:
                        f.truncate(b.entry.size)

    def _worker(self, tasks: queue.Queue[Task], i: int) -> None:
        self.local.control = os.path.join(self.tmp, f"cm{i}")
        while True:
            try:
                t = tasks.get_nowait()
            except queue.Empty:
                return
            err = ""
            for attempt in range(5):
                try:
                    if t.kind == "rsync":
                        self._rsync_task(t)
                    else:
                        self._range_task(t)
                    err = ""
                    break
                except SyncError as e:
                    err = str(e)
                    self.log(f"retrying: {err}")
                    time.sleep(min(8.0, 0.5 * 2**attempt))
            if err:
                with self.lock:
                    self.errors.append(err)

    # ------------------------------------------------------------------ many files: rsync
    def _endpoints(self) -> tuple[str, str]:
        p = self.plan
        if p.direction == "push":
            return p.src_root.rstrip("/") + "/", f"{p.host}:{p.dst.path.rstrip('/')}/"
        return f"{p.host}:{p.src_root.rstrip('/')}/", p.dst.path.rstrip("/") + "/"

    def _rsync(self, names: list[str], *, checksum: bool = False) -> None:
        fd, listfile = tempfile.mkstemp(dir=self.tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(b"\0".join(n.encode("utf-8", "surrogateescape") for n in names) + b"\0")
        src, dst = self._endpoints()
        cmd = [
            "rsync",
            "-a",
            f"--partial-dir={RSYNC_PARTIAL}",
            "-e",
            self.ssh.rsh(control=self.local.control),
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
        """The stream's files in a few batches; each batch is hashed on both sides while the next one
        is sent, so only the last batch's check is left when the data is through."""
        sizes = {e.name: e.size for e in self.plan.entries}
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
        checks = []
        for b in batches:
            self._rsync(b)
            with self.lock:
                self.sent += sum(sizes.get(n, 0) for n in b)
            if self.opts.verify:
                checks.append(
                    self.verifier.submit(self._compare_files, [n for n in b if n in self.regular], control)
                )
        bad = [n for c in checks for n in c.result()]
        if bad:
            self.log(f"{len(bad)} file(s) differ after the transfer; resending them with --checksum")
            self._rsync(bad, checksum=True)
            still = self._compare_files(bad, control)
            if still:
                raise SyncError(f"{still[0]}: sha256 still differs after a --checksum resend")
            with self.lock:
                self.repaired += bad

    def _compare_files(self, names: list[str], control: str) -> list[str]:
        """sha256 of ``names`` on both sides (the server's in one ssh round trip); the names that differ."""
        if not names:
            return []
        p = self.plan
        remote_root = p.dst.path if p.direction == "push" else p.src_root
        local_root = p.src_root if p.direction == "push" else p.dst.path
        data = b"\0".join(n.encode("utf-8", "surrogateescape") for n in names) + b"\0"
        out = self.ssh.run(
            f"cd {q(remote_root)} && xargs -0 sha256sum --", input=data, timeout=3600, control=control
        )
        theirs: dict[str, str] = {}
        for line in out.decode("utf-8", "surrogateescape").splitlines():
            h, _, name = line.partition("  ")
            if h.startswith("\\"):
                h, name = h[1:], name.replace("\\\\", "\\")
            theirs[name] = h
        bad = [n for n in names if theirs.get(n) != _sha256(os.path.join(local_root, n))]
        with self.lock:
            self.verified += len(names) - len(bad)
        return bad

    # ------------------------------------------------------------------ big files: block ranges
    def _range_task(self, t: Task) -> None:
        """Sub-runs of 16 blocks; each is hashed on both sides while the next one is sent."""
        bf = self.big[t.name]
        control = self.local.control
        checks = []
        for k in range(t.first_block, t.first_block + t.nblocks, 16):
            n = min(16, t.first_block + t.nblocks - k)
            sub = _sub_range(t.name, bf.entry.size, k, n)
            self._send_range(bf, sub)
            with self.lock:
                self.sent += sub.size
            checks.append(self.verifier.submit(self._check_range, bf, k, n, control))
        bad = [b for c in checks for b in c.result()]
        for _ in range(2):
            if not bad:
                return
            self.log(f"{t.name}: {len(bad)} block(s) differ, sending them again")
            for sub in range_tasks(t.name, bf.entry.size, bad, 1):
                self._send_range(bf, sub)
            bad = [
                b
                for sub in range_tasks(t.name, bf.entry.size, bad, 1)
                for b in self._check_range(bf, sub.first_block, sub.nblocks, control)
            ]
        if bad:
            raise SyncError(f"{t.name}: block {bad[0]} still differs after two resends")

    def _send_range(self, bf: BigFile, t: Task) -> None:
        off = t.first_block * BLOCK
        n = t.size
        cdd = f"bs={BLOCK} iflag=fullblock status=none"
        if self.plan.direction == "push":
            cmd = self.ssh.cmd(
                f"dd of={q(bf.part)} seek={t.first_block} conv=notrunc {cdd}",
                compress=self.plan.compress,
                control=self.local.control,
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
            control=self.local.control,
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
                f'{q(b.part)} && '
                f"touch -m -d @{b.entry.mtime:.9f} -- {q(b.part)} && mv -f -- {q(b.part)} {q(b.dst)}"
                for b in todo
            ]
            self.ssh.run(" && ".join(cmds))
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


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


def close_workdir(ssh: Ssh, workdir: str) -> None:
    """Close the streams' master connections and remove the private directory."""
    if not workdir or not os.path.isdir(workdir):
        return
    for f in os.listdir(workdir):
        if f.startswith("cm"):
            ssh.close_master(os.path.join(workdir, f))
    with contextlib.suppress(OSError):
        for f in os.listdir(workdir):
            os.unlink(os.path.join(workdir, f))
        os.rmdir(workdir)


def sync(src: str, dst: str, opts: SyncOptions) -> tuple[Plan, SyncResult | None]:
    plan, ssh = make_plan(src, dst, opts)
    if opts.dry_run:
        close_workdir(ssh, plan.workdir)
        return plan, None
    return plan, Runner(plan, ssh, opts).run()
