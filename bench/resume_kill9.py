"""Benchmark: kill -9 a download at 50 % of a 200 MiB file, run the same command again, and report
bytes served by the server / file size, for `gpuclinic get` and aria2c side by side (target for
gpuclinic <= 1.01; huggingface_hub 2.4 measured 1.71 in shared/research/download-anchors.md 7.4
because it restarts from zero).

Same simulated link as the other benches: 4 MiB/s per connection, 50 ms latency, +100 ms per
connection.  The file is sha256-checked after the rerun.  The excess is split three ways:

* in flight at the kill: sent by the server but never written to the part file (socket buffers,
  a chunk read but not yet written): no client can keep it;
* written but not recorded: in the part file, but the state (snapshot + journal) did not say so;
* fetched twice by the rerun: beyond what the state said was missing (e.g. tails cut by work
  stealing).

Bytes in the part file are counted by comparing it with the file the simulator serves, in whole
512-byte blocks (random data never equals an unwritten block of zeros; this rounds down by
< 512 bytes per connection).  Bodies the simulator could
not send because the client was already gone are not counted as served (a real server's send()
fails too); the line "after the kill" shows them.

    .venv/bin/python bench/resume_kill9.py [--size-mib 200] [--at 0.5] [--no-aria2]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _wan import GPUCLINIC, SimProcess, sha256, timed
from gpuclinic.transfer import resume
from gpuclinic.transfer.wansim import make_data  # the simulator's --file content (first file: seed 1)

MiB = 1024 * 1024


def _recorded(part: Path) -> int | None:
    """Bytes gpuclinic's state (snapshot + journal) says are in ``part``."""
    base = part.with_name(part.name.removesuffix(".gpuclinic-part"))
    saved = resume.load(
        base.with_name(base.name + ".gpuclinic-state"), base.with_name(base.name + resume.JOURNAL_SUFFIX)
    )
    return None if saved is None else saved.recorded()


def _on_disk(path: Path, data: bytes) -> int | None:
    """Bytes of ``path`` that hold what the server sent, counted in whole 512-byte blocks."""
    try:
        got = path.read_bytes()
    except OSError:
        return None
    n = 0
    for i in range(0, min(len(got), len(data)), 1 << 16):
        a, b = got[i : i + (1 << 16)], data[i : i + (1 << 16)]
        if a == b:
            n += len(b)
        else:
            n += sum(len(b[k : k + 512]) for k in range(0, len(b), 512) if a[k : k + 512] == b[k : k + 512])
    return n


def run_case(
    name: str,
    size_mib: int,
    at: float,
    make_cmd: Callable[[str, str, Path], list[str]],
    part_name: str | None,
) -> float | None:
    size = size_mib * MiB
    sim = SimProcess(
        "--file", f"big.bin={size_mib}M", "--rate", "4M", "--latency", "0.05", "--connect-latency", "0.1"
    )
    url = sim.info["files"]["big.bin"]["url"]
    want = sim.info["files"]["big.bin"]["sha256"]
    tmp = Path(tempfile.mkdtemp(prefix="gpuclinic-resume-"))
    out = tmp / "big.bin"
    cmd = make_cmd(url, want, out)
    try:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with httpx.Client(timeout=10) as poll:  # kept alive: no connect latency between two looks
            while poll.get(sim.base + "/_sim/stats").json()["total_body"] < size * at and p.poll() is None:
                time.sleep(0.005)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        t_kill = time.monotonic() - t0
        time.sleep(0.5)  # let the server notice the dead connections
        st = sim.stats()
        at_kill, after_close = int(st["total_body"]), int(st.get("after_close", 0))
        rec = _recorded(tmp / part_name) if part_name == "big.bin.gpuclinic-part" else None
        data = make_data(size, seed=1)
        same = hashlib.sha256(data).hexdigest() == want  # else the simulator seeds files differently
        disk = _on_disk(tmp / part_name, data) if part_name and same else None
        t, rc, err = timed(cmd, timeout=600)
        end = sim.stats()
        total, late = int(end["total_body"]), int(end.get("after_close", 0))
        ok = rc == 0 and out.exists() and sha256(out) == want
        ratio = total / size
        print(
            f"\n{name}: kill -9 after {t_kill:.2f} s with {at_kill / MiB:.1f} MiB served; rerun {t:.2f} s, "
            f"{(total - at_kill) / MiB:.1f} MiB served, {'sha256 ok' if ok else 'FAILED ' + err}"
        )
        if disk is not None:
            print(
                f"  part file held {disk / MiB:.2f} MiB: in flight at the kill (never on disk) "
                f"{(at_kill - disk) / MiB:.2f} MiB; not sent after the kill (client gone) "
                f"{after_close / MiB:.2f} MiB"
            )
        if rec is not None and disk is not None:
            print(
                f"  state recorded {rec / MiB:.2f} MiB: written but not recorded "
                f"{(disk - rec) / MiB:.2f} MiB, "
                f"fetched twice by the rerun {(total - at_kill - (size - rec)) / MiB:.2f} MiB"
            )
        print(
            f"  bytes served / file size = {ratio:.4f} ({(total + late) / size:.4f} if the blocks the "
            "simulator had due after the client hung up counted as served, as before issue 14)"
        )
        return ratio if ok else None
    finally:
        sim.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=200)
    ap.add_argument("--at", type=float, default=0.5)
    ap.add_argument("--no-aria2", action="store_true")
    args = ap.parse_args()
    ours = run_case(
        "gpuclinic get",
        args.size_mib,
        args.at,
        lambda url, want, out: [*GPUCLINIC, "get", url, "-o", str(out), "--sha256", want, "-q"],
        "big.bin.gpuclinic-part",
    )
    peer = None
    aria2 = shutil.which("aria2c")
    if aria2 and not args.no_aria2:
        # the most favourable aria2c settings for a resume: control file saved every second
        peer = run_case(
            "aria2c -x16 -s16 -c --auto-save-interval=1",
            args.size_mib,
            args.at,
            lambda url, want, out: [
                aria2,
                "-x16",
                "-s16",
                "-k1M",
                "-c",
                "--auto-save-interval=1",
                "--file-allocation=none",
                "--allow-overwrite=true",
                f"--checksum=sha-256={want}",
                "--console-log-level=warn",
                "--summary-interval=0",
                "-d",
                str(out.parent),
                "-o",
                out.name,
                url,
            ],
            "big.bin",
        )
    print(
        f"\nbytes served / size: gpuclinic {ours if ours is None else f'{ours:.4f}'}"
        + (
            f", aria2c {peer:.4f} (gpuclinic/aria2c excess: {(ours - 1) / max(peer - 1, 1e-9):.2f}x)"
            if peer is not None and ours is not None
            else ""
        )
        + "; target for gpuclinic <= 1.01"
    )


if __name__ == "__main__":
    main()
