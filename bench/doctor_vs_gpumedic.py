"""Benchmark: ``gpuclinic doctor --scenario X`` vs ``gpumedic scan --mock Y``, same run, same machine.

Not part of pytest.  Each pair of commands is run N times, interleaved (so machine load hits both
alike), as fresh processes with the same interpreter, stdout to a pipe (not a TTY), NO_COLOR set.
Prints the median wall time of each and the ratio per scenario; the target is <= 1.5x gpumedic.
Both tools also run with ``--json``.

    pip install gpumedic
    .venv/bin/python bench/doctor_vs_gpumedic.py [-n 15]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time

# gpuclinic scenario -> the gpumedic mock scenario that simulates the same fault
PAIRS = {
    "healthy-8xh100-load": "healthy",
    "overheating": "overheating",
    "uncorrectable-ecc": "ecc",
    "fallen-off-bus": "fallen-off-bus",
    "power-brake": "power-brake",
    "pcie-x8-under-load": "pcie-degraded",
}
TARGET = 1.5


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, p.returncode, p.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-n", type=int, default=15, help="runs per command (default 15)")
    ap.add_argument("--no-json", action="store_true", help="skip the --json round")
    args = ap.parse_args()
    if importlib.util.find_spec("gpumedic") is None:
        print("gpumedic is not installed: pip install gpumedic", file=sys.stderr)
        return 3
    env = dict(os.environ, NO_COLOR="1", PYTHONDONTWRITEBYTECODE="0")
    py = sys.executable
    rounds = [("text", [])] + ([] if args.no_json else [("json", ["--json"])])
    ratios: list[float] = []
    print(f"{'scenario':24} {'mode':5} {'gpuclinic ms':>13} {'gpumedic ms':>12} {'ratio':>7}  verdicts (gpuclinic / gpumedic exit)")
    for mode, extra in rounds:
        for ours, theirs in PAIRS.items():
            a = [py, "-m", "gpuclinic", "doctor", "--scenario", ours, *extra]
            b = [py, "-m", "gpumedic", "scan", "--mock", theirs, *extra]
            for _ in range(2):  # warm the page cache and .pyc files
                _run(a, env)
                _run(b, env)
            ta, tb = [], []
            rc_a = rc_b = -1
            out_a = ""
            for _ in range(args.n):
                t, rc_a, out_a = _run(a, env)
                ta.append(t)
                t, rc_b, _ = _run(b, env)
                tb.append(t)
            ma, mb = statistics.median(ta), statistics.median(tb)
            ratio = ma / mb
            ratios.append(ratio)
            verdict = {0: "healthy", 1: "warning", 2: "drain"}.get(rc_a, f"rc={rc_a}")
            if mode == "json":
                verdict = json.loads(out_a)["verdict"]
            print(f"{ours:24} {mode:5} {ma * 1000:13.1f} {mb * 1000:12.1f} {ratio:6.2f}x  {verdict} / {rc_b}")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = max(ratios)
    print(f"geometric mean ratio {geo:.2f}x, worst {worst:.2f}x (target <= {TARGET}x): "
          f"{'PASS' if worst <= TARGET else 'over target'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
