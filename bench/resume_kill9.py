"""Benchmark: kill -9 `gpuclinic get` at 50 % of a 200 MiB download, run it again, and report
bytes served by the server / file size (target <= 1.02; huggingface_hub 2.4 measured 1.71 in
shared/research/download-anchors.md 7.4 because it restarts from zero).

Same simulated link as the other benches: 4 MiB/s per connection, 50 ms latency, +100 ms per
connection.  The file is sha256-checked after the rerun.

    .venv/bin/python bench/resume_kill9.py [--size-mib 200] [--at 0.5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _wan import GPUCLINIC, SimProcess, sha256, timed

MiB = 1024 * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=200)
    ap.add_argument("--at", type=float, default=0.5)
    args = ap.parse_args()
    size = args.size_mib * MiB
    sim = SimProcess("--file", f"big.bin={args.size_mib}M", "--rate", "4M", "--latency", "0.05", "--connect-latency", "0.1")
    url = sim.info["files"]["big.bin"]["url"]
    want = sim.info["files"]["big.bin"]["sha256"]
    tmp = Path(tempfile.mkdtemp(prefix="gpuclinic-resume-"))
    out = tmp / "big.bin"
    cmd = [*GPUCLINIC, "get", url, "-o", str(out), "--sha256", want, "-q"]
    try:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd)
        while sim.served() < size * args.at and p.poll() is None:
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        t_kill = time.monotonic() - t0
        time.sleep(0.5)  # let the server notice the dead connections
        at_kill = sim.served()
        part = out.with_name(out.name + ".gpuclinic-part")
        print(f"\nkill -9 after {t_kill:.2f} s with {at_kill / MiB:.1f} MiB served; partial file kept: {part.exists()}, "
              f"final path exists: {out.exists()}")
        t, rc, err = timed(cmd)
        total = sim.served()
        ok = rc == 0 and sha256(out) == want
        print(f"rerun: {t:.2f} s, {(total - at_kill) / MiB:.1f} MiB served, {'sha256 ok' if ok else 'FAILED ' + err}")
        print(f"\n  bytes served / file size = {total / size:.4f} (target <= 1.02; huggingface_hub 2.4.0: 1.71)")
        print(f"  lost by the kill: {(total - size) / MiB:.2f} MiB (in flight or not yet recorded in the state file)")
    finally:
        sim.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
