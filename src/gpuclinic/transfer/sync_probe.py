"""``gpuclinic sync`` and ``net --ssh``: measuring an ssh path, and the choices made from it.

Why a module of its own: the planner needs two numbers before it can split work, the rate of one
connection and whether more connections add up (a per-connection cap) or not (the link is the
limit).  ``probe_link`` samples both with throwaway data (``net --ssh``, ``sync --dry-run``);
``one_stream_rate`` samples only the first, on the first stream's own connection while the RTT is
measured on another, and leaves the second to the transfer itself, whose streams are counted
through their ssh master processes (``StreamMeter``): the probe costs one handshake plus half a
second instead of seconds of dummy data.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclinic.transfer.sync import Entry, MiB, Ssh, SyncError


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


def measure_rtt(ssh: Ssh, n: int = 5, control: str | None = None) -> tuple[float, float]:
    """(handshake seconds, min echo RTT) through one ssh session running ``cat``.  With ``control``
    the session's connection stays open afterwards as that stream's master."""
    t0 = time.monotonic()
    p = subprocess.Popen(
        ssh.cmd("echo ready; exec cat", control=control),
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
            f"exec 3<&0; {wait}dd of=/dev/null bs=65536 <&3 & p=$!; sleep 0.1; kill -USR1 $p; sleep "
            f"{seconds:.2f}; "
            "kill -USR1 $p; sleep 0.1; kill $p 2>/dev/null; wait $p 2>/dev/null; exit 0"
        )
        p = subprocess.Popen(
            ssh.cmd(remote, control=control),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert p.stdin is not None and p.stderr is not None
        marks: list[tuple[int, float]] = []
        done = threading.Event()  # both reports are in: stop at once (the stream is on the critical path)
        reader = threading.Thread(target=_dd_marks, args=(p.stderr, marks, done), daemon=True)
        reader.start()
        block = os.urandom(64 * 1024)
        try:
            if gate is not None:
                gate.wait(60)
                p.stdin.write(b"go\n")
                p.stdin.flush()
            while not done.is_set() and p.poll() is None:
                p.stdin.write(block)
        except (BrokenPipeError, OSError):
            pass
        if len(marks) >= 2:
            p.kill()  # a session of a shared connection: the master and its TCP connection stay
        with contextlib.suppress(OSError):
            p.stdin.close()
        p.wait(30)
        reader.join(10)
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


def _dd_marks(err: Any, marks: list[tuple[int, float]], done: threading.Event) -> None:
    """Collect dd's progress reports ("N bytes ... copied, T s") from its stderr as they come."""
    try:
        for line in iter(err.readline, b""):
            m = re.match(rb"(\d+) bytes.*copied, ([0-9.]+) s", line)
            if m:
                marks.append((int(m.group(1)), float(m.group(2))))
                if len(marks) >= 2:
                    done.set()
    except (OSError, ValueError):
        pass
    done.set()


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
    """(zlib level-1 speed on one core, compressed/original) over up to 1 MiB of the biggest local files
    (more costs CPU the handshakes need, for no better estimate)."""
    if not local:
        return 0.0, 1.0
    data = bytearray()
    for e in sorted((e for e in entries if e.kind == "f"), key=lambda e: -e.size)[:8]:
        try:
            with open(os.path.join(root, e.name), "rb") as f:
                data += f.read(MiB // 8)
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


def one_stream_rate(ssh: Ssh, direction: str, control: str, *, seconds: float = 0.3) -> float:
    """One stream's bytes/s, sampled on the connection that this call opens (``control``; the
    transfer's first sessions on that stream reuse it).  The handshake and RTT are measured on
    another stream's connection at the same time (``measure_rtt``), and what many streams add is
    measured on the real transfer (``StreamMeter``), so this sample is the probe's only cost on the
    critical path."""
    rate: list[float] = []
    _stream_rate(ssh, direction, seconds, rate, control=control)
    return rate[0] if rate else 0.0


def open_master(ssh: Ssh, control: str) -> None:
    """Open (and keep, ControlPersist) the connection of one stream; a failure here only means the
    stream connects when it starts."""
    with contextlib.suppress(SyncError):
        ssh.run("true", control=control, timeout=60)


class StreamMeter:
    """Bytes the streams moved on the wire, read from their ssh master processes' I/O counters
    (``/proc/PID/io``: ``wchar`` of a pushing master is what it wrote to its TCP socket, ``rchar`` of
    a pulling one what it read).  ``None`` where that is not readable (not Linux)."""

    def __init__(self, ssh: Ssh, workdir: str, direction: str) -> None:
        self.ssh, self.workdir = ssh, workdir
        self.key = "wchar" if direction == "push" else "rchar"
        self.pids: dict[str, int] = {}

    def _pid(self, control: str) -> int | None:
        try:
            r = subprocess.run(
                [*self.ssh.argv, "-o", f"ControlPath={control}", "-O", "check", self.ssh.host],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        m = re.search(r"pid=(\d+)", r.stderr + r.stdout)
        return int(m.group(1)) if m else None

    def sample(self) -> dict[int, int]:
        """Counter per master process; masters opened since the last call are looked up."""
        with contextlib.suppress(OSError):
            for f in sorted(os.listdir(self.workdir)):
                if f.startswith("cm") and f not in self.pids:
                    pid = self._pid(os.path.join(self.workdir, f))
                    if pid:
                        self.pids[f] = pid
        out: dict[int, int] = {}
        for pid in self.pids.values():
            try:
                for line in Path(f"/proc/{pid}/io").read_text().splitlines():
                    k, _, v = line.partition(":")
                    if k == self.key:
                        out[pid] = int(v)
            except (OSError, ValueError):
                continue
        return out

    @staticmethod
    def rate(a: dict[int, int], b: dict[int, int], seconds: float) -> float | None:
        """Bytes/s between two samples, over the masters present in both."""
        both = [p for p in a if p in b]
        if not both or seconds <= 0:
            return None
        return sum(b[p] - a[p] for p in both) / seconds


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


def choose_compression(pr: Probe, streams: int, link: float | None = None) -> tuple[bool, str]:
    """Compress only when the data shrinks and the CPUs compress faster than the link carries
    (``link``: bytes/s, by default the best the probe saw)."""
    r = rules()["compression"]
    link = link if link is not None else max(pr.multi_stream, pr.one_stream)
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
