"""Benchmark: `gpuclinic get git` (blobless default, --shallow) vs plain `git clone` on a capped link.

A repository with long history (COMMITS commits, each rewriting 3 incompressible 40 kB files) is
served by `git daemon` on 127.0.0.1 behind a TCP relay that caps every connection at RATE bytes/s
and adds CONNECT_LATENCY per new connection (the shape of shared/research/download-anchors.md
section 7.5).  All clones run in the same session through the same relay; each result is checked
(the HEAD commit and file bytes match the source).

    .venv/bin/python bench/get_git_vs_clone.py [--commits 300] [--rate-mib 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MiB = 1024 * 1024


class CappedRelay:
    """127.0.0.1:port -> 127.0.0.1:target, server->client paced at ``rate`` per connection."""

    def __init__(self, target: int, rate: float, connect_latency: float) -> None:
        self.target, self.rate, self.connect_latency = target, rate, connect_latency
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.bytes_down = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._handle, args=(c,), daemon=True).start()

    def _handle(self, c: socket.socket) -> None:
        time.sleep(self.connect_latency)
        up = socket.create_connection(("127.0.0.1", self.target))

        def down() -> None:
            t_next = time.monotonic()
            try:
                while True:
                    d = up.recv(16384)
                    if not d:
                        break
                    t_next = max(t_next, time.monotonic()) + len(d) / self.rate
                    wait = t_next - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    c.sendall(d)
                    with self.lock:
                        self.bytes_down += len(d)
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        t = threading.Thread(target=down, daemon=True)
        t.start()
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                up.sendall(d)
            up.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        t.join()
        c.close()
        up.close()


def make_repo(root: Path, commits: int, env: dict[str, str]) -> Path:
    """A bare repo built with git fast-import (fast even for thousands of commits)."""
    bare = root / "srv" / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True, env=env)
    lines: list[bytes] = []
    for i in range(commits):
        lines.append(b"commit refs/heads/main\n")
        lines.append(f"committer Bench <b@example.invalid> {1700000000 + i} +0000\n".encode())
        msg = f"commit {i}\n".encode()
        lines.append(b"data %d\n" % len(msg) + msg)
        for f in range(3):
            data = os.urandom(40_000)
            lines.append(f"M 644 inline src/file{f}.bin\n".encode())
            lines.append(b"data %d\n" % len(data) + data + b"\n")
        lines.append(b"\n")
    subprocess.run(
        ["git", "-C", str(bare), "fast-import", "--quiet"], input=b"".join(lines), check=True, env=env
    )
    for kv in ("uploadpack.allowFilter=true", "uploadpack.allowAnySHA1InWant=true"):
        k, v = kv.split("=")
        subprocess.run(["git", "-C", str(bare), "config", k, v], check=True, env=env)
    return bare


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--rate-mib", type=float, default=4.0)
    ap.add_argument("--connect-latency", type=float, default=0.1)
    args = ap.parse_args()
    if shutil.which("git") is None:
        sys.exit("git is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="gpuclinic-bench-git-"))
    env = {**os.environ, "HOME": str(tmp), "GIT_CONFIG_NOSYSTEM": "1"}
    bare = make_repo(tmp, args.commits, env)
    head = subprocess.run(
        ["git", "-C", str(bare), "rev-parse", "HEAD"], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()
    want = subprocess.run(
        ["git", "-C", str(bare), "cat-file", "blob", "HEAD:src/file0.bin"],
        capture_output=True,
        env=env,
        check=True,
    ).stdout
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    dport = port.getsockname()[1]
    port.close()
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            f"--base-path={bare.parent}",
            "--export-all",
            "--listen=127.0.0.1",
            f"--port={dport}",
            str(bare.parent),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", dport), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        relay = CappedRelay(dport, args.rate_mib * MiB, args.connect_latency)
        url = f"git://127.0.0.1:{relay.port}/repo.git"
        gpc = [sys.executable, "-m", "gpuclinic", "get", "git", "-q"]
        runs = [
            ("git clone (full)", ["git", "clone", "-q", url]),
            ("gpuclinic get git (blobless)", [*gpc, url]),
            ("gpuclinic get git --shallow", [*gpc, "--shallow", url]),
        ]
        print(
            f"repo: {args.commits} commits, "
            f"{sum(f.stat().st_size for f in bare.rglob('*') if f.is_file()) / MiB:.1f} MiB "
            f"on the server; link: {args.rate_mib:g} MiB/s per connection, "
            f"+{args.connect_latency * 1000:.0f} ms per connection"
        )
        results: list[tuple[str, float, int]] = []
        for i, (name, argv) in enumerate(runs):
            dest = tmp / f"c{i}"
            before = relay.bytes_down
            t0 = time.monotonic()
            subprocess.run([*argv, str(dest)], check=True, env=env)
            secs = time.monotonic() - t0
            got_head = subprocess.run(
                ["git", "-C", str(dest), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout.strip()
            assert got_head == head, f"{name}: wrong HEAD"
            assert (dest / "src" / "file0.bin").read_bytes() == want, f"{name}: wrong bytes"
            results.append((name, secs, relay.bytes_down - before))
        base = results[0][1]
        print(f"{'method':34} {'seconds':>8} {'vs git clone':>13} {'bytes':>12}")
        for name, secs, nbytes in results:
            print(f"{name:34} {secs:8.2f} {base / secs:12.1f}x {nbytes:12,}")
    finally:
        daemon.terminate()
        daemon.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
