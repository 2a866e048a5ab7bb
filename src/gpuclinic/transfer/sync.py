"""``gpuclinic sync``, planning part: endpoints, the ssh command, file lists, link probes, the plan.

Why: ``rsync -a`` and ``scp`` move everything over one TCP connection.  On a long or shaped path one
connection is capped (window / RTT, or a per-flow policer) far below the link, so a laptop <-> GPU
server copy crawls while the link is idle.  ``sync`` measures the path (RTT, one stream, eight
streams, CPU for compression), then runs several real ``rsync`` processes, each over its own ssh
connection, on size-balanced file lists; files too big to balance are sent as block ranges over
parallel ssh streams into a part file that is verified (sha256) and renamed atomically.

The user's ssh setup is honoured by asking ``ssh -G`` (Host aliases, ports, keys, ProxyJump) with
the same ``-e/--rsh`` command rsync would use.  Our streams disable connection sharing
(``ControlMaster=no``): multiplexed channels share one TCP connection and its cap.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import shlex
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclinic.errors import EXIT_USAGE, GpuclinicError, InputError

MiB = 1024 * 1024
BLOCK = 2 * MiB  # resume, verification and balancing granularity of big files
BIG_MIN = 32 * MiB
PART_SUFFIX = ".gpuclinic-part"


class SyncError(GpuclinicError):
    """A sync that could not run or complete (one line; partial data is kept for a rerun)."""


@dataclass(frozen=True)
class Endpoint:
    host: str | None  # [user@]host or an ssh alias; None = local
    path: str

    def __str__(self) -> str:
        return f"{self.host}:{self.path}" if self.host else self.path


def parse_endpoint(text: str) -> Endpoint:
    """rsync's rule: ``HOST:PATH`` is remote when the colon comes before any slash."""
    if not text:
        raise InputError("empty path", exit_code=EXIT_USAGE)
    if "::" in text or text.startswith("rsync://"):
        raise InputError(f"rsync daemon paths are not supported: {text}", exit_code=EXIT_USAGE)
    head, sep, tail = text.partition(":")
    if sep and head and "/" not in head:
        return Endpoint(head, tail or ".")
    return Endpoint(None, text)


@dataclass
class Entry:
    name: str  # relative to the source root, "/"-separated
    size: int
    mtime: float
    mode: int
    kind: str  # "f" file, "l" symlink, "d" empty directory


class Ssh:
    """The ssh command for one host: the user's ``-e`` command (or ``ssh``) plus our stream options."""

    def __init__(self, host: str, rsh: str | None = None) -> None:
        self.host = host
        try:
            self.argv = shlex.split(rsh) if rsh else ["ssh"]
        except ValueError as e:
            raise InputError(f"bad -e/--rsh command: {e}", exit_code=EXIT_USAGE) from None
        if not self.argv:
            raise InputError("empty -e/--rsh command", exit_code=EXIT_USAGE)
        self._config: dict[str, str] | None = None

    def stream_opts(self, compress: bool = False, control: str | None = None) -> list[str]:
        """Options of our connections.  ``control``: a socket private to one stream, so that its
        sequential sessions (rsync, dd, sha256sum) reuse one TCP connection and one handshake while
        the streams stay separate connections; never the user's shared ControlPath."""
        mux = (
            ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}", "-o", "ControlPersist=15"]
            if control
            else ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        )
        return [
            *mux,
            "-o",
            "BatchMode=yes",
            "-o",
            f"Compression={'yes' if compress else 'no'}",
            "-o",
            "ServerAliveInterval=15",
        ]

    def cmd(self, remote: str, *, compress: bool = False, control: str | None = None) -> list[str]:
        return [*self.argv, *self.stream_opts(compress, control), self.host, remote]

    def rsh(self, compress: bool = False, control: str | None = None) -> str:
        """The ``-e`` string for rsync (rsync applies its own compression, so ssh's stays off)."""
        return shlex.join([*self.argv, *self.stream_opts(compress, control)])

    def close_master(self, control: str) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [*self.argv, "-o", f"ControlPath={control}", "-O", "exit", self.host],
                capture_output=True,
                timeout=10,
            )

    def config(self) -> dict[str, str]:
        """``ssh -G HOST``: the effective configuration (aliases resolved, defaults filled in)."""
        if self._config is None:
            try:
                r = subprocess.run([*self.argv, "-G", self.host], capture_output=True, text=True, timeout=15)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise SyncError(f"cannot run {self.argv[0]}: {e}") from None
            if r.returncode != 0:
                raise SyncError(f"ssh -G {self.host}: {(r.stderr.strip().splitlines() or ['failed'])[-1]}")
            cfg: dict[str, str] = {}
            for line in r.stdout.splitlines():
                k, _, v = line.partition(" ")
                if k and k.lower() not in cfg:
                    cfg[k.lower()] = v.strip()
            self._config = cfg
        return self._config

    def run(
        self, remote: str, *, input: bytes | None = None, timeout: float = 120, control: str | None = None
    ) -> bytes:
        try:
            r = subprocess.run(
                self.cmd(remote, control=control), input=input, capture_output=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise SyncError(f"ssh {self.host}: no answer within {timeout:.0f} s") from None
        except OSError as e:
            raise SyncError(f"cannot run {self.argv[0]}: {e}") from None
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace").strip().splitlines()
            raise SyncError(f"ssh {self.host}: {err[-1] if err else f'exit {r.returncode}'}")
        return r.stdout


def q(path: str) -> str:
    return shlex.quote(path)


# ---------------------------------------------------------------------- file lists
def split_source(path: str, is_dir: bool) -> tuple[str, str]:
    """(root, start) as rsync reads SRC: ``dir/`` copies the contents, ``dir`` the directory itself."""
    if is_dir and path.endswith("/"):
        return path.rstrip("/") or "/", "."
    p = path.rstrip("/") or "/"
    parent, _, base = p.rpartition("/")
    return (parent or ("/" if p.startswith("/") else ".")), base


def list_local(path: str) -> tuple[str, list[Entry]]:
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise InputError(f"source does not exist: {path}", exit_code=EXIT_USAGE)
    root, start = split_source(path, p.is_dir())
    out: list[Entry] = []
    base = Path(root)
    top = base / start
    if not top.is_dir() or top.is_symlink():
        st = top.lstat()
        out.append(
            Entry(start, st.st_size, st.st_mtime, st.st_mode & 0o7777, "l" if top.is_symlink() else "f")
        )
        return root, out
    for d, dirs, files in os.walk(top):
        rel = os.path.relpath(d, base)
        if not dirs and not files and rel != ".":
            st = os.lstat(d)
            out.append(Entry(rel.replace(os.sep, "/"), 0, st.st_mtime, st.st_mode & 0o7777, "d"))
        for f in files:
            fp = os.path.join(d, f)
            st = os.lstat(fp)
            kind = "l" if os.path.islink(fp) else "f"
            name = os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/")
            out.append(Entry(name, st.st_size if kind == "f" else 0, st.st_mtime, st.st_mode & 0o7777, kind))
        for dn in dirs:
            dp = os.path.join(d, dn)
            if os.path.islink(dp):
                st = os.lstat(dp)
                out.append(
                    Entry(
                        os.path.normpath(os.path.join(rel, dn)).replace(os.sep, "/"),
                        0,
                        st.st_mtime,
                        0o777,
                        "l",
                    )
                )
    return root, out


def list_remote(ssh: Ssh, path: str) -> tuple[str, list[Entry]]:
    """GNU find on the server: one round trip for any number of files."""
    probe = (
        ssh.run(
            f"if [ -d {q(path)} ]; then echo d; elif [ -e {q(path)} ]; then echo f; else echo missing; fi"
        )
        .decode()
        .strip()
    )
    if probe == "missing":
        raise InputError(f"source does not exist on {ssh.host}: {path}", exit_code=EXIT_USAGE)
    root, start = split_source(path, probe == "d")
    raw = ssh.run(
        f"cd {q(root)} && find {q(start)} \\( -type f -o -type l -o -type d -empty \\) -printf "
        "'%y\\t%s\\t%T@\\t%m\\t%p\\0'",
        timeout=600,
    )
    out: list[Entry] = []
    for rec in raw.split(b"\0"):
        if not rec:
            continue
        kind, size, mtime, mode, name = rec.decode("utf-8", "surrogateescape").split("\t", 4)
        name = os.path.normpath(name).replace(os.sep, "/")
        if kind == "d" and name == start == ".":
            continue
        out.append(Entry(name, int(size) if kind == "f" else 0, float(mtime), int(mode, 8), kind))
    return root, out


def check_names(entries: list[Entry]) -> None:
    for e in entries:
        parts = e.name.split("/")
        if e.name.startswith("/") or ".." in parts or "\n" in e.name or "\r" in e.name:
            raise SyncError(f"refusing a file name that could escape the destination: {e.name!r}")


# ---------------------------------------------------------------------- probes
@dataclass
class Probe:
    handshake_s: float = 0.0  # ssh connect + auth + first command
    rtt_s: float = 0.0  # application round trip through an open session
    one_stream: float = 0.0  # bytes/s
    multi_stream: float = 0.0  # bytes/s with ``multi_n`` streams
    multi_n: int = 0
    cpus: int = 1
    compress_speed: float = 0.0  # zlib level 1 bytes/s on one core
    compress_ratio: float = 1.0  # compressed / original on a sample of the data
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def measure_rtt(ssh: Ssh, n: int = 5) -> tuple[float, float]:
    """(handshake seconds, min echo RTT) through one ssh session running ``cat``."""
    t0 = time.monotonic()
    p = subprocess.Popen(
        ssh.cmd("echo ready; exec cat"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert p.stdin is not None and p.stdout is not None
    try:
        if p.stdout.readline().strip() != b"ready":
            raise SyncError(f"ssh {ssh.host}: no session (check `ssh {ssh.host} true`)")
        handshake = time.monotonic() - t0
        best = math.inf
        for i in range(n):
            t = time.monotonic()
            p.stdin.write(b"%d\n" % i)
            p.stdin.flush()
            p.stdout.readline()
            best = min(best, time.monotonic() - t)
        return handshake, best
    finally:
        p.stdin.close()
        p.wait(10)


def _stream_rate(
    ssh: Ssh,
    direction: str,
    seconds: float,
    results: list[float],
    gate: threading.Event | None = None,
    control: str | None = None,
) -> None:
    """Bytes/s of one ssh stream, counted where the data arrives (so buffers do not inflate it) and
    from the start of the transfer (the handshake is measured apart)."""
    if direction == "push":
        # the server's dd counts what arrived; two reports (SIGUSR1) ``seconds`` apart give the steady
        # rate, without the start-up and without what sits in buffers
        wait = "read -r go <&3; " if gate else ""  # a gated stream connects now and sends when told
        remote = (
            f"exec 3<&0; {wait}dd of=/dev/null bs=65536 <&3 & p=$!; sleep 0.3; kill -USR1 $p; sleep "
            f"{seconds:.2f}; "
            "kill -USR1 $p; sleep 0.2; kill $p 2>/dev/null; wait $p 2>/dev/null; exit 0"
        )
        p = subprocess.Popen(
            ssh.cmd(remote, control=control),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert p.stdin is not None and p.stderr is not None
        block = os.urandom(256 * 1024)
        try:
            if gate is not None:
                gate.wait(60)
                p.stdin.write(b"go\n")
                p.stdin.flush()
            while p.poll() is None:
                p.stdin.write(block)
        except (BrokenPipeError, OSError):
            pass
        with contextlib.suppress(OSError):
            p.stdin.close()
        err = p.stderr.read().decode(errors="replace")
        p.wait(30)
        marks = [(int(b), float(t)) for b, t in re.findall(r"^(\d+) bytes.*copied, ([0-9.]+) s", err, re.M)]
        if len(marks) >= 2 and marks[1][1] > marks[0][1]:
            results.append((marks[1][0] - marks[0][0]) / (marks[1][1] - marks[0][1]))
        return
    remote = "exec 3<&0; read -r go <&3; exec cat /dev/zero" if gate else "exec cat /dev/zero"
    p = subprocess.Popen(
        ssh.cmd(remote, control=control),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert p.stdout is not None and p.stdin is not None
    if gate is not None:
        gate.wait(60)
        with contextlib.suppress(OSError):
            p.stdin.write(b"go\n")
            p.stdin.flush()
    got = len(os.read(p.stdout.fileno(), 65536))
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        b = os.read(p.stdout.fileno(), 1 << 20)
        if not b:
            break
        got += len(b)
    p.kill()
    p.wait(10)
    results.append(got / max(1e-6, time.monotonic() - t0))


def measure_streams(
    ssh: Ssh,
    direction: str,
    n: int,
    seconds: float,
    gate: threading.Event | None = None,
    controls: list[str] | None = None,
) -> float:
    """Total bytes/s of ``n`` parallel streams.  With ``controls`` each stream's connection stays open as
    a private master afterwards, so the transfer's first sessions reuse it (no new handshake)."""
    results: list[float] = []
    ths = [
        threading.Thread(
            target=_stream_rate,
            args=(
                ssh,
                direction,
                seconds,
                results,
                gate,
                controls[i] if controls and i < len(controls) else None,
            ),
        )
        for i in range(n)
    ]
    for t in ths:
        t.start()
    for t in ths:
        t.join(seconds + 60)
    return sum(results)


def sample_compression(root: str, entries: list[Entry], local: bool) -> tuple[float, float]:
    """(zlib level-1 speed on one core, compressed/original) over up to 8 MiB of the biggest local files."""
    if not local:
        return 0.0, 1.0
    data = bytearray()
    for e in sorted((e for e in entries if e.kind == "f"), key=lambda e: -e.size)[:8]:
        try:
            with open(os.path.join(root, e.name), "rb") as f:
                data += f.read(MiB)
        except OSError:
            continue
    if not data:
        return 0.0, 1.0
    t = time.perf_counter()
    out = zlib.compress(bytes(data), 1)
    dt = max(1e-6, time.perf_counter() - t)
    return len(data) / dt, len(out) / len(data)


def probe_link(
    ssh: Ssh,
    direction: str,
    *,
    seconds: float = 0.7,
    multi: int | None = None,
    controls: list[str] | None = None,
) -> Probe:
    multi = multi or int(rules()["streams"]["probe_streams"])
    pr = Probe(cpus=os.cpu_count() or 1)
    rtt: list[tuple[float, float]] = []
    th = threading.Thread(target=lambda: rtt.append(measure_rtt(ssh)))
    th.start()  # on its own connection, beside the single stream (a capped stream leaves the link idle)
    # the multi-stream sample connects during the single-stream one and sends when that one is done,
    # so its handshakes cost no extra time
    gate = threading.Event()
    multi_rate: list[float] = []
    mt = threading.Thread(
        target=lambda: multi_rate.append(measure_streams(ssh, direction, multi, seconds, gate, controls))
    )
    mt.start()
    try:
        pr.one_stream = measure_streams(ssh, direction, 1, seconds)
    finally:
        gate.set()
    th.join()
    mt.join()
    if not rtt:
        raise SyncError(f"ssh {ssh.host}: no session (check `ssh {ssh.host} true`)")
    pr.handshake_s, pr.rtt_s = rtt[0]
    pr.multi_n = multi
    pr.multi_stream = multi_rate[0] if multi_rate else 0.0
    return pr


def rules() -> dict[str, Any]:
    """Stream, compression and diagnosis rules (knowledge/data/ssh_transfer.json)."""
    from gpuclinic.knowledge import load_data

    return dict(load_data("ssh_transfer.json"))


def choose_streams(pr: Probe, max_streams: int) -> tuple[int, str]:
    """Enough streams to fill the link: one stream's rate against eight streams' total."""
    r = rules()["streams"]
    if pr.one_stream <= 0:
        return min(4, max_streams), "no throughput sample; 4 streams"
    gain = pr.multi_stream / pr.one_stream
    if gain < r["min_gain_for_parallel"]:
        return min(
            2, max_streams
        ), f"{pr.multi_n} streams gave {gain:.1f}x one stream: the link, not the connection, is the limit"
    if gain >= r["capped_fraction"] * pr.multi_n:
        return max_streams, f"{pr.multi_n} streams gave {gain:.1f}x one stream: each connection is capped"
    n = math.ceil(r["headroom"] * gain)  # more than fills the link: a stream between batches leaves no gap
    return max(
        2, min(max_streams, n)
    ), f"{pr.multi_n} streams gave {gain:.1f}x one stream: the link fills near {math.ceil(gain)} streams"


def choose_compression(pr: Probe, streams: int) -> tuple[bool, str]:
    """Compress only when the data shrinks and the CPUs compress faster than the link carries."""
    r = rules()["compression"]
    link = max(pr.multi_stream, pr.one_stream)
    if pr.compress_speed <= 0:
        return False, "compression off (no local sample)"
    if pr.compress_ratio > r["max_ratio"]:
        return False, f"compression off: the data does not compress (sample ratio {pr.compress_ratio:.2f})"
    budget = pr.compress_speed * max(1, min(streams, pr.cpus)) * r["cpu_share"]
    if link and link > budget:
        return (
            False,
            f"compression off: the link ({link / MiB:.0f} MiB/s) outruns the CPUs ({budget / MiB:.0f} MiB/s)",
        )
    return (
        True,
        f"compression on: data shrinks to {pr.compress_ratio:.0%} and the link is slower than the CPUs",
    )


# ---------------------------------------------------------------------- ssh diagnosis
def diagnose_ssh(cfg: dict[str, str], pr: Probe | None, cpu_flags: str | None = None) -> list[str]:
    """Findings about the ssh setup that slow interactive work and transfers (advice, not errors)."""
    notes: list[str] = []
    r = rules()["diagnosis"]
    host = cfg.get("hostname", "?")
    if cfg.get("controlmaster", "false") in ("false", "no") or cfg.get("controlpath", "none") == "none":
        notes.append(
            "ControlMaster is off: every ssh/rsync/git command pays a full handshake"
            + (f" ({pr.handshake_s:.2f} s here)" if pr else "")
            + "; add `ControlMaster auto`, `ControlPath ~/.ssh/cm-%C`, `ControlPersist 10m` to the Host block"
            " (gpuclinic sync opens its own connections anyway)"
        )
    elif cfg.get("controlpersist", "no") in ("no", "false", "0"):
        notes.append(
            "ControlMaster without ControlPersist: the shared connection closes with the first session; add "
            "`ControlPersist 10m`"
        )
    ciphers = cfg.get("ciphers", "").split(",")
    flags = cpu_flags if cpu_flags is not None else _cpu_flags()
    if ciphers and ciphers[0].startswith("chacha20") and " aes" in f" {flags} ":
        notes.append(
            "the first cipher is chacha20-poly1305 but this CPU has AES-NI: `Ciphers "
            "aes128-gcm@openssh.com,chacha20-poly1305@openssh.com` is faster per core"
        )
    if (
        cfg.get("compression", "no") == "yes"
        and pr
        and max(pr.one_stream, pr.multi_stream) > r["compression_fast_link_bytes_s"]
    ):
        notes.append(
            "`Compression yes` in the ssh config costs CPU on a fast link; turn it off for this host"
        )
    if (
        pr
        and pr.rtt_s > r["high_rtt_s"]
        and pr.one_stream
        and pr.multi_stream / pr.one_stream > r["single_stream_gain"]
    ):
        notes.append(
            f"RTT {pr.rtt_s * 1000:.0f} ms and one connection is capped at {pr.one_stream / MiB:.1f} MiB/s: "
            "single-stream tools (scp, rsync, git) will crawl here"
        )
    mtu = _route_mtu(host)
    if mtu is not None and mtu < r["standard_mtu"]:
        notes.append(
            f"the route to {host} has MTU {mtu} (a tunnel or VPN): if transfers stall while `ssh {host} "
            "true` works, clamp the TCP MSS on the tunnel (`iptables -t mangle -A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu`)"  # noqa: E501
        )
    if pr and pr.one_stream and pr.one_stream < r["blackhole_max_bytes_s"] and pr.rtt_s < 1:
        notes.append(
            "bulk data barely moves while the session answers: the classic MTU black hole (large packets "
            "dropped); try `ping -M do -s 1472 HOST` and MSS clamping"
        )
    return notes


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.partition(":")[2]
    except OSError:
        pass
    return ""


def _route_mtu(host: str) -> int | None:
    try:
        r = subprocess.run(["ip", "route", "get", host], capture_output=True, text=True, timeout=5)
        words = r.stdout.split()
        if "dev" in words:
            dev = words[words.index("dev") + 1]
            if dev == "lo":
                return None
            return int(Path(f"/sys/class/net/{dev}/mtu").read_text())
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None
    return None


# ---------------------------------------------------------------------- the plan
@dataclass
class Task:
    kind: str  # "rsync" (a list of names) or "range" (blocks of one big file)
    size: int
    names: list[str] = field(default_factory=list)
    name: str = ""
    first_block: int = 0
    nblocks: int = 0


def balance(entries: list[Entry], buckets: int) -> list[list[Entry]]:
    """Longest-processing-time-first: each file goes to the lightest bucket (sizes + a per-file cost)."""
    out: list[list[Entry]] = [[] for _ in range(max(1, buckets))]
    load = [0] * len(out)
    for e in sorted(entries, key=lambda e: -e.size):
        i = load.index(min(load))
        out[i].append(e)
        load[i] += e.size + 64 * 1024  # a file costs about a round of the protocol
    return [b for b in out if b]


def range_tasks(name: str, size: int, todo: list[int], streams: int) -> list[Task]:
    """Contiguous runs of missing blocks, cut so that the streams share the file evenly."""
    if not todo:
        return []
    per = max(1, math.ceil(len(todo) / max(1, streams)))
    tasks: list[Task] = []
    run: list[int] = []
    for b in todo:
        if run and (b != run[-1] + 1 or len(run) >= per):
            tasks.append(_mk_range(name, size, run))
            run = []
        run.append(b)
    if run:
        tasks.append(_mk_range(name, size, run))
    return tasks


def _mk_range(name: str, size: int, run: list[int]) -> Task:
    end = min(size, (run[-1] + 1) * BLOCK)
    return Task("range", end - run[0] * BLOCK, name=name, first_block=run[0], nblocks=len(run))


def block_hashes_local(path: str, size: int) -> list[str]:
    out: list[str] = []
    try:
        with open(path, "rb") as f:
            for _ in range(math.ceil(size / BLOCK)):
                out.append(hashlib.sha256(f.read(BLOCK)).hexdigest())
    except OSError:
        return []
    return out


def block_hashes_remote(ssh: Ssh, path: str) -> list[str]:
    """sha256 of every block, computed on the server in one round trip (GNU split --filter)."""
    raw = ssh.run(f"[ -f {q(path)} ] && split -b {BLOCK} --filter=sha256sum {q(path)} || true", timeout=1800)
    return [line.split()[0] for line in raw.decode().splitlines() if line.strip()]
