"""Bench: `gpuclinic sync` vs plain `rsync -a` over ssh, laptop -> server, behind a shaped link.

A real sshd on 127.0.0.1 (own host and user keys, own config) sits behind the WAN simulator's TCP
proxy (its own process): 4 MiB/s per TCP connection, a 16 MiB/s link, 50 ms RTT.  Two workloads,
as in issue 13: 1 GiB in 1,000 files, and one 1 GiB file.  Each is pushed by `rsync -a` and by
`gpuclinic sync` (probe, plan, transfer and sha256 verification all included in its time), and the
destination trees are compared.  Prints the ratio (target >= 3x) and the share of the proxy's
total cap that sync achieved (target >= 90 %).

    python bench/sync_vs_rsync.py [--size-mib 1024] [--files 1000] [--rate 4M] [--total-rate 16M] [--latency
    0.05] [--only files|big] [--no-rsync]

To iterate: ``--size-mib 256 --files 250 --no-rsync`` (about a minute); the acceptance is the default.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "transfer"))
sys.path.insert(0, str(HERE))

from ssh_env import Sshd  # noqa: E402

from _tcpproxy import ProxyProcess  # noqa: E402
from gpuclinic.transfer.wansim import parse_size  # noqa: E402

MiB = 1024 * 1024
GPUCLINIC = [sys.executable, "-m", "gpuclinic"]


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            with open(p, "rb") as f:
                while b := f.read(1 << 22):
                    h.update(b)
    return h.hexdigest()


def make_files(root: Path, size: int, nfiles: int) -> None:
    root.mkdir(parents=True)
    if nfiles == 1:
        with open(root / "big.bin", "wb") as f:
            for _ in range(size // (16 * MiB)):
                f.write(os.urandom(16 * MiB))
            f.write(os.urandom(size % (16 * MiB)))
        return
    per = size // nfiles
    for i in range(nfiles):
        d = root / f"d{i % 10}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:05d}.bin").write_bytes(os.urandom(per + (size - per * nfiles if i == 0 else 0)))


class Timeline:
    """Bytes through the proxy over time (polled), to say where a run loses time against the cap:
    before the first data, while the streams ramp up, in the tail, and after the last byte."""

    def __init__(self, proxy: ProxyProcess, every: float = 0.25) -> None:
        self.proxy, self.every = proxy, every
        self.points: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.th = threading.Thread(target=self._poll, daemon=True)
        self.th.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.points.append((time.monotonic() - self.t0, int(self.proxy.stats()["up"])))
            self.stop.wait(self.every)

    def summary(self, cap: float, end: float) -> str:
        self.stop.set()
        self.th.join()
        pts = self.points
        total = pts[-1][1] if pts else 0
        if total < 4 * MiB:
            return "timeline: too little data"
        first = next(t for t, b in pts if b >= MiB)  # data flowing (probes and handshakes are smaller)
        last = next(t for t, b in pts if b >= total - 64 * 1024)
        # seconds lost against the cap while data flowed, per quarter of the run
        span = max(1e-6, last - first)
        quarters = []
        for k in range(4):
            a, b = first + span * k / 4, first + span * (k + 1) / 4
            ba = max((x for t, x in pts if t <= a), default=0)
            bb = max((x for t, x in pts if t <= b), default=0)
            quarters.append((b - a) - (bb - ba) / cap)
        return (
            f"timeline: first MiB at {first:.1f} s, last byte at {last:.1f} s, exit at {end:.1f} s; "
            f"lost vs the cap while data flowed (quarters): "
            + ", ".join(f"{q:.1f}" for q in quarters)
            + f" s; after the last byte {end - last:.1f} s"
        )


def run_rsync(rsh: str, src: Path, dst: Path, want: str) -> float:
    t = time.monotonic()
    r = subprocess.run(
        ["rsync", "-a", "-e", rsh, f"{src}/", f"testbox:{dst}/"], capture_output=True, text=True
    )
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr
    assert tree_hash(dst) == want
    shutil.rmtree(dst)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rate", default="4M")
    ap.add_argument("--total-rate", default="16M")
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--only", choices=["files", "big"], help="run one workload")
    ap.add_argument("--no-rsync", action="store_true", help="skip the rsync -a baseline (to iterate on sync)")
    args = ap.parse_args()
    sshd_bin, keygen = shutil.which("sshd") or "/usr/sbin/sshd", shutil.which("ssh-keygen")
    if not os.access(sshd_bin, os.X_OK) or not keygen or not shutil.which("rsync"):
        sys.exit("needs sshd, ssh-keygen and rsync (Debian packages openssh-server, openssh-client, rsync)")
    size = args.size_mib * MiB
    cap = parse_size(args.total_rate)
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        root = Path(tmp)
        sshd = Sshd(sshd_bin, keygen, root / "sshd")
        proxy = ProxyProcess(
            f"127.0.0.1:{sshd.port}",
            "--rate",
            args.rate,
            "--total-rate",
            args.total_rate,
            "--latency",
            str(args.latency),
        )
        cfg = sshd.client_config(proxy.port)
        rsh = f"ssh -F {cfg}"
        print(
            f"link: {args.rate}B/s per connection, {args.total_rate}B/s total, {args.latency * 1000:.0f} ms "
            "RTT; "
            f"{os.cpu_count()} CPUs"
        )
        try:
            work = [("files", args.files), ("big", 1)]
            for name, n in work:
                if args.only and args.only != name:
                    continue
                src = root / f"src-{name}"
                make_files(src, size, n)
                want = tree_hash(src)
                label = f"{n} files" if n > 1 else "one file"
                print(f"\n== {args.size_mib} MiB in {label}")
                t_rsync = 0.0
                if not args.no_rsync:
                    t_rsync = run_rsync(rsh, src, root / f"rsync-{name}", want)
                    print(f"rsync -a:        {t_rsync:7.1f} s  ({size / MiB / t_rsync:5.1f} MiB/s)")
                proxy.reset()
                t = time.monotonic()
                tl = Timeline(proxy)
                r = subprocess.run(
                    [
                        *GPUCLINIC,
                        "sync",
                        "-e",
                        rsh,
                        f"{src}/",
                        f"testbox:{root / ('sync-' + name)}",
                        "--json",
                    ],
                    capture_output=True,
                    text=True,
                )
                t_sync = time.monotonic() - t
                line = tl.summary(cap, t_sync)
                assert r.returncode == 0, r.stderr
                res = json.loads(r.stdout)
                assert tree_hash(root / f"sync-{name}") == want
                sent = proxy.stats()["up"]
                print(line)
                print(
                    f"gpuclinic sync:  {t_sync:7.1f} s  ({size / MiB / t_sync:5.1f} MiB/s; {res['streams']} "
                    "streams, "
                    f"plan {res['plan_seconds']:.1f} s, data+verify {res['transfer_seconds']:.1f} s; "
                    f"{sent / MiB:.0f} MiB through the proxy incl. probes)"
                )
                pr = res["probe"] or {}
                print(
                    f"  probe: 1 stream {pr.get('one_stream', 0) / MiB:.1f} MiB/s, {pr.get('multi_n', 0)} "
                    f"streams {pr.get('multi_stream', 0) / MiB:.1f} MiB/s; streams: {res['stream_reason']}"
                )
                if t_rsync:
                    print(f"ratio sync / rsync -a: {t_rsync / t_sync:.1f}x (target >= 3x)")
                print(
                    f"share of the link cap: {size / t_sync / cap:.0%} overall, "
                    f"{size / res['transfer_seconds'] / cap:.0%} in the data phase (target >= 90 %)"
                )
                shutil.rmtree(root / f"sync-{name}")
                shutil.rmtree(src)
        finally:
            proxy.close()
            sshd.stop()


if __name__ == "__main__":
    main()
