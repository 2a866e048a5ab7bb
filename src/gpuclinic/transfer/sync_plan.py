"""``gpuclinic sync``, planning: list the source, measure the path, split the work into tasks.

Why the order: every ssh handshake costs several round trips, so nothing here opens a connection
of its own, and the steps run side by side (``_Planner``): stream 0's connection samples one
stream's rate while stream 1's measures the handshake and RTT, lists the files, reads the destination
state of big files and creates the destination, and the other streams connect.  The transfer then
starts on those connections at once and settles its stream count from its own first seconds
(sync_run.Runner), instead of after seconds of dummy data.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import tempfile
import threading
import time
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
    Ssh,
    SyncError,
    Task,
    block_hashes_local,
    block_hashes_remote,
    check_names,
    extraneous,
    guided_cuts,
    guided_range_tasks,
    list_dest,
    list_local,
    list_remote,
    parse_endpoint,
    q,
    split_source,
)
from gpuclinic.transfer.sync_probe import (
    Probe,
    choose_compression,
    choose_streams,
    diagnose_ssh,
    measure_rtt,
    one_stream_rate,
    open_master,
    probe_link,
    rules,
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
    delete: bool = False  # remove destination files the source does not have (after a good transfer)


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
    adaptive: bool = False  # the stream count is set from the transfer's first seconds (StreamMeter)
    deletes: list[str] | None = None  # --delete: destination names to remove (relative to DST)
    openers: dict[str, threading.Thread] = field(default_factory=dict)  # control -> its connection opening
    phases: dict[str, list[float]] = field(default_factory=dict)  # planning step -> [start, end] s

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
            "plan_phases": self.phases,
            "files": len(self.entries),
            "bytes": self.total,
            "streams": self.streams,
            "stream_reason": self.stream_reason,
            "compress": self.compress,
            "compress_reason": self.compress_reason,
            "probe": self.probe.to_dict() if self.probe else None,
            "ssh_notes": self.notes,
            "delete": self.deletes,
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
            multi = f"{pr.multi_n} streams {_h(pr.multi_stream)}/s ({gain:.1f}x); " if pr.multi_n else ""
            out.append(
                f"  link: handshake {pr.handshake_s:.2f} s, RTT {pr.rtt_s * 1000:.0f} ms, 1 stream "
                f"{_h(pr.one_stream)}/s, {multi}{pr.cpus} CPUs, zlib {_h(pr.compress_speed)}/s"
            )
        out.append(f"  streams: {self.streams} ({self.stream_reason})")
        out.append(f"  {self.compress_reason}")
        rs = [t for t in self.tasks if t.kind == "rsync"]
        if rs:
            out.append(
                f"  {sum(len(t.names) for t in rs)} files in {len(rs)} rsync tasks of "
                f"{_h(min(t.size for t in rs))} to {_h(max(t.size for t in rs))}"
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
        if self.deletes is not None:
            out.append(f"  --delete: {len(self.deletes)} destination entries not in the source")
            out += [f"    deleting {n}" for n in self.deletes[:50]]
            if len(self.deletes) > 50:
                out.append(f"    ... and {len(self.deletes) - 50} more")
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
    ssh.compress_connections = opts.compress == "yes"
    cfg = ssh.config()
    target = f"{cfg.get('user', '?')}@{cfg.get('hostname', host)}:{cfg.get('port', '22')}"
    workdir = tempfile.mkdtemp(prefix="gpuclinic-sync-")
    try:
        plan = _plan(ssh, src, dst, direction, target, workdir, opts)
    except BaseException:
        close_workdir(ssh, workdir)
        raise
    plan.notes = diagnose_ssh(cfg, plan.probe)
    return plan, ssh


def _plan(
    ssh: Ssh, src: Endpoint, dst: Endpoint, direction: str, target: str, workdir: str, opts: SyncOptions
) -> Plan:
    n0 = opts.streams or min(int(rules()["streams"]["probe_streams"]), opts.max_streams)
    plan = Plan(direction, src, dst, ssh.host, target, "", [], n0, "", False, "", None, [])
    plan.workdir = workdir
    return _Planner(ssh, plan, opts, n0).run()


class _Planner:
    """Three things at once: stream 0's connection opens and samples one stream; stream 1's opens,
    measures the RTT (its handshake too), then lists and prepares the destination; the other
    streams' connections open as soon as stream 0's is up.  So the plan costs about one handshake
    plus the sample, and the transfer starts on connections that are open already."""

    def __init__(self, ssh: Ssh, plan: Plan, opts: SyncOptions, n0: int) -> None:
        self.ssh, self.plan, self.opts, self.n0 = ssh, plan, opts, n0
        self.t0 = time.monotonic()
        self.controls = [os.path.join(plan.workdir, f"cm{i}") for i in range(max(n0, 2))]
        # --dry-run samples many streams of throwaway data too: it has no transfer to learn from
        self.quick = opts.probe and not (opts.dry_run and not opts.streams)
        self.probe = Probe(cpus=os.cpu_count() or 1)  # the quick probe's, filled in by its threads
        self.measured: list[Probe] = []
        self.failed: list[BaseException] = []
        self.first_up = threading.Event()  # stream 0's sample ended (its connection is up, or failed)
        self.rtt_done = threading.Event()

    def span(self, name: str, since: float) -> None:
        self.plan.phases[name] = [round(since - self.t0, 3), round(time.monotonic() - self.t0, 3)]

    def run(self) -> Plan:
        plan, opts, listing = self.plan, self.opts, self.controls[1]
        pt = threading.Thread(target=self._measure, daemon=True)
        rt = threading.Thread(target=self._echo, daemon=True)
        if opts.probe:
            pt.start()
        if self.quick:
            rt.start()
            if not opts.dry_run:  # stream 1's worker starts once the echo is done (its data would delay it)
                plan.openers[listing] = rt
        if not opts.dry_run:  # the other streams connect meanwhile; each worker waits for its own
            others = self.controls[2 : self.n0]
            for c in others:
                plan.openers[c] = threading.Thread(target=self._open, args=(c,), daemon=True)
                plan.openers[c].start()
        since = time.monotonic()
        states = _read_source(self.ssh, plan, opts, self.n0, listing, self.rtt_done if self.quick else None)
        sample: list[tuple[float, float]] = []
        st = threading.Thread(
            target=lambda: sample.append(
                sample_compression(plan.src_root, plan.entries, plan.direction == "push")
            ),
            daemon=True,
        )
        if opts.probe:
            st.start()  # disk and CPU, while the probe waits on the network
        self.span("list", since)
        if opts.probe:
            pt.join()
            st.join()
            if self.failed:
                raise self.failed[0]
            plan.probe = self.measured[0] if self.measured else self.probe
            if opts.dry_run:
                rt.join()
                if self.probe.errors and not self.probe.one_stream:  # a transfer would fail on it too
                    raise SyncError(self.probe.errors[0])
            plan.probe.compress_speed, plan.probe.compress_ratio = sample[0] if sample else (0.0, 1.0)
        _choose(plan, opts, self.n0)
        if opts.dry_run:
            plan.big = _pick_big(plan.total, states, plan.streams)
        _make_tasks(plan)
        plan.plan_s = time.monotonic() - self.t0
        return plan

    def _measure(self) -> None:
        since = time.monotonic()
        ssh, direction, controls = self.ssh, self.plan.direction, self.controls
        try:
            if self.quick:
                self.probe.one_stream = one_stream_rate(ssh, direction, controls[0])
            else:
                self.measured.append(probe_link(ssh, direction, controls=[controls[0], *controls[2:]]))
        except BaseException as e:  # re-raised in the planning thread
            self.failed.append(e)
        finally:
            self.first_up.set()
        self.span("one_stream" if self.quick else "probe", since)

    def _echo(self) -> None:
        """Handshake and RTT on stream 1's connection (which this opens).  Off the critical path: the
        transfer may start before it ends (the runner waits for it at the end); a failure here shows again,
        as an error, in the listing's or the transfer's sessions."""
        since = time.monotonic()
        try:
            self.probe.handshake_s, self.probe.rtt_s = measure_rtt(self.ssh, control=self.controls[1])
        except SyncError as e:
            self.probe.errors.append(str(e))
        finally:
            self.rtt_done.set()
        self.span("rtt", since)

    def _open(self, control: str) -> None:
        # stream 0's handshake goes first (with stream 1's): handshakes in parallel slow each other
        # down on a busy CPU; the others then connect during the sample, which leaves the CPU idle
        if self.opts.probe:
            _wait_up(self.controls[0], self.first_up)
        open_master(self.ssh, control)


def _wait_up(control: str, given_up: threading.Event, timeout: float = 30) -> None:
    """Until the master connection of ``control`` listens (or its opener ended, ``given_up``): a
    second ssh started before that would open a connection of its own."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(control) and not given_up.is_set() and time.monotonic() < deadline:
        given_up.wait(0.02)


def _read_source(
    ssh: Ssh, plan: Plan, opts: SyncOptions, n0: int, control: str, opening: threading.Event | None
) -> list[BigFile]:
    """List the source, read where its big files stand at the destination (and, with --delete, what
    the destination has extra); for a transfer also create the destination and the part files.
    ``opening``: stream 1's connection is being opened by the RTT probe (set when that ends)."""
    if plan.direction == "push":
        plan.src_root, plan.entries = list_local(plan.src.path)
    if opening is not None:
        _wait_up(control, opening)
    if plan.direction == "pull":
        plan.src_root, plan.entries = list_remote(ssh, plan.src.path, control)
    check_names(plan.entries)
    # big-file candidates (the threshold can only rise once the stream count is known)
    big_min = max(BIG_MIN, plan.total // (2 * opts.max_streams))
    states = _big_states(
        ssh,
        plan,
        [e for e in plan.entries if e.kind == "f" and e.size >= big_min],
        control,
        prepare=not opts.dry_run,
    )
    if opts.delete:
        plan.deletes = _deletes(ssh, plan, control)
    if not opts.dry_run:  # a transfer starts with n0 streams, so its big files are known already
        plan.big = _pick_big(plan.total, states, n0)
        if plan.direction == "pull":
            prepare_local(plan)
    return states


def _pick_big(total: int, states: list[BigFile], streams: int) -> list[BigFile]:
    """Files too big to balance over ``streams``: they go as block ranges."""
    big_min = max(BIG_MIN, total // (2 * streams))
    return [b for b in states if b.entry.size >= big_min]


def prepare_local(plan: Plan) -> None:
    """Pull: the destination directory and the big files' part files (at full size, for pwrite)."""
    for d in sorted({b.dst.rpartition("/")[0] for b in plan.big if not b.skipped} | {plan.dst.path}):
        if d:
            os.makedirs(d, exist_ok=True)
    for b in plan.big:
        if not b.skipped:
            with open(b.part, "ab") as f:
                f.truncate(b.entry.size)


def _choose(plan: Plan, opts: SyncOptions, n0: int) -> None:
    pr = plan.probe
    if opts.streams:
        plan.streams, plan.stream_reason = opts.streams, "fixed by --streams"
    elif pr and pr.multi_n:
        plan.streams, plan.stream_reason = choose_streams(pr, opts.max_streams)
    elif pr:
        plan.streams, plan.adaptive = n0, True
        plan.stream_reason = f"{n0} to start; set from their measured total in the first seconds"
    else:
        plan.streams, plan.stream_reason = n0, "no probe; default"
    if opts.compress != "auto":
        plan.compress = opts.compress == "yes"
        plan.compress_reason = f"compression {'on' if plan.compress else 'off'} (--compress)"
    elif pr:  # until the streams' total is known, assume they add up
        link = pr.multi_stream or pr.one_stream * plan.streams
        plan.compress, plan.compress_reason = choose_compression(pr, plan.streams, link)
    else:
        plan.compress, plan.compress_reason = False, "compression off (no probe)"


def _make_tasks(plan: Plan) -> None:
    streams, pr = plan.streams, plan.probe
    big_names = {b.entry.name for b in plan.big}
    small = [e for e in plan.entries if e.name not in big_names]
    tasks: list[Task] = []
    # one queue of tasks that shrink as the work runs out (a stream that finishes early takes the next,
    # and the last ones are short, so the streams end together); none shorter than ~1 s of one stream:
    # each task pays a session start and an rsync handshake
    min_piece = max(MiB, int(pr.one_stream if pr and pr.one_stream else 4 * MiB))
    if small:
        order = sorted(small, key=lambda e: -e.size)
        start = 0
        for cut in guided_cuts([e.size + 64 * 1024 for e in order], streams, min_piece):
            names = [e.name for e in order[start:cut]]
            tasks.append(Task("rsync", sum(e.size for e in order[start:cut]), names=names))
            start = cut
    for bf in plan.big:
        if not bf.skipped:
            tasks += guided_range_tasks(bf.entry.name, bf.entry.size, bf.todo, streams, min_piece)
    plan.tasks = sorted(tasks, key=lambda t: -t.size)


def _deletes(ssh: Ssh, plan: Plan, control: str) -> list[str]:
    """``--delete``: destination entries under the copied tree that the source lacks.  Only a
    directory source deletes anything, as with rsync."""
    if len(plan.entries) == 1 and plan.entries[0].kind in ("f", "l"):
        first = plan.entries[0].name
        if "/" not in first and not plan.src.path.endswith("/"):
            return []  # SRC is one file
    _, start = split_source(plan.src.path, True)
    have = list_dest(ssh if plan.direction == "push" else None, plan.dst.path, start, control)
    return extraneous(plan.entries, have)


def _big_states(
    ssh: Ssh, plan: Plan, big: list[Entry], control: str, *, prepare: bool = False
) -> list[BigFile]:
    """Where each big file stands at the destination: done already, partly there (resume), or absent.
    One ssh round trip for all of them (each session costs round trips).  ``prepare`` (a push that
    will run): the same round trip creates the destination directories and cuts a part file left
    longer than its source; ``dd seek`` creates the part files themselves."""
    out: list[BigFile] = []
    for e in big:
        dst = _join(plan.dst.path, e.name)
        d, _, base = dst.rpartition("/")
        part = f"{d}/.{base}{PART_SUFFIX}" if d else f".{base}{PART_SUFFIX}"
        out.append(
            BigFile(e, _join(plan.src_root, e.name), dst, part, list(range(math.ceil(e.size / BLOCK))))
        )
    mkdir = ""
    if prepare and plan.direction == "push":
        dirs = sorted({b.dst.rpartition("/")[0] for b in out} | {plan.dst.path})
        mkdir = "mkdir -p -- " + " ".join(q(d) for d in dirs if d) + " || exit 1; "
        mkdir += "".join(f"truncate -c -s '<{b.entry.size}' -- {q(b.part)}; " for b in out)
        if not out:
            ssh.run(mkdir, control=control)
    if not out:
        return out
    if plan.direction == "push":
        cmd = mkdir + "; ".join(
            f"stat -c '%s %Y' -- {q(b.dst)} 2>/dev/null || echo - -; stat -c %s -- {q(b.part)} 2>/dev/null "
            "|| echo 0"
            for b in out
        )
        words = ssh.run(cmd, control=control).decode().split()
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
                theirs, ours = block_hashes_remote(ssh, bf.part, control), block_hashes_local(bf.src, e.size)
            else:
                theirs, ours = (
                    block_hashes_remote(ssh, bf.src, control),
                    block_hashes_local(bf.part, min(e.size, psize)),
                )
            bf.todo = [
                i for i in range(nblocks) if i >= len(theirs) or i >= len(ours) or theirs[i] != ours[i]
            ]
        bf.reused_blocks = nblocks - len(bf.todo)
    return out


def close_workdir(ssh: Ssh, workdir: str) -> None:
    """Close the streams' master connections (all at once) and remove the private directory."""
    if not workdir or not os.path.isdir(workdir):
        return
    socks: list[str] = []
    with contextlib.suppress(OSError):
        socks = [
            os.path.join(workdir, f)
            for f in os.listdir(workdir)
            if stat.S_ISSOCK(os.lstat(os.path.join(workdir, f)).st_mode)
        ]
    closers = [threading.Thread(target=ssh.close_master, args=(s,)) for s in socks]
    for t in closers:
        t.start()
    for t in closers:
        t.join(15)
    with contextlib.suppress(OSError):
        for f in os.listdir(workdir):
            os.unlink(os.path.join(workdir, f))
        os.rmdir(workdir)
