"""Benchmark: ``gpuclinic doctor --scenario X`` vs ``gpumedic scan --mock Y``, same run, same machine.

Not part of pytest.  Each pair of commands is run N times, interleaved (so machine load hits both
alike), as fresh processes, stdout to a pipe (not a TTY), NO_COLOR set.  Both run as users run them:
the installed console scripts (``gpuclinic``, ``gpumedic``) next to this interpreter, so the
entry-point wrapper and everything it imports is measured.  Prints the median wall time of each and
the ratio per scenario; the target (issue 14) is <= 1.0x gpumedic.  Both tools also run with ``--json``.

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
import tempfile
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
TARGET = 1.0


def _script(name: str) -> str:
    """The console script ``name`` installed with this interpreter (a venv's bin/ or Scripts/)."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.isfile(path):
        raise SystemExit(f"{path} not found: pip install the package into this environment")
    return path


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall s, child CPU s, exit code, stdout) of one fresh process."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return wall, ru.ru_utime + ru.ru_stime, p.returncode, out.read().decode("utf-8", "replace")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("-n", type=int, default=15, help="runs per command (default 15)")
    ap.add_argument("--no-json", action="store_true", help="skip the --json round")
    args = ap.parse_args()
    if importlib.util.find_spec("gpumedic") is None:
        print("gpumedic is not installed: pip install gpumedic", file=sys.stderr)
        return 3
    env = dict(os.environ, NO_COLOR="1")
    # Both tools must run from cached bytecode, as after `pip install` (which compiles .pyc files):
    # with PYTHONDONTWRITEBYTECODE set (any value), a module edited since its .pyc was written would be
    # recompiled on every run.  The warm-up runs below write the caches.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    ours_cmd, theirs_cmd = _script("gpuclinic"), _script("gpumedic")
    rounds: list[tuple[str, list[str]]] = [("text", [])] + ([] if args.no_json else [("json", ["--json"])])
    ratios: list[float] = []
    mins: list[float] = []
    print(f"{ours_cmd} doctor --scenario X  vs  {theirs_cmd} scan --mock Y")
    print("wall = median (min) ms over N interleaved runs; cpu = median user+sys ms of the process")
    print(
        f"{'scenario':22} {'mode':5} {'gpuclinic wall':>16} {'gpumedic wall':>16} {'ratio':>6} {'min':>6}"
        f" {'cpu ratio':>9}  verdict / gpumedic exit"
    )
    for mode, extra in rounds:
        for ours, theirs in PAIRS.items():
            a = [ours_cmd, "doctor", "--scenario", ours, *extra]
            b = [theirs_cmd, "scan", "--mock", theirs, *extra]
            for _ in range(2):  # warm the page cache and .pyc files
                _run(a, env)
                _run(b, env)
            wa: list[float] = []
            wb: list[float] = []
            ca: list[float] = []
            cb: list[float] = []
            rc_a = rc_b = -1
            out_a = ""
            for _ in range(args.n):
                w, c, rc_a, out_a = _run(a, env)
                wa.append(w)
                ca.append(c)
                w, c, rc_b, _ = _run(b, env)
                wb.append(w)
                cb.append(c)
            ma, mb = statistics.median(wa), statistics.median(wb)
            ratio, ratio_min = ma / mb, min(wa) / min(wb)
            cpu_ratio = statistics.median(ca) / max(statistics.median(cb), 1e-6)
            ratios.append(ratio)
            mins.append(ratio_min)
            verdict = {0: "healthy", 1: "warning", 2: "drain"}.get(rc_a, f"rc={rc_a}")
            if mode == "json":
                verdict = json.loads(out_a)["verdict"]
            print(
                f"{ours:22} {mode:5} {ma * 1000:7.1f} ({min(wa) * 1000:6.1f}) {mb * 1000:7.1f} "
                f"({min(wb) * 1000:6.1f})"
                f" {ratio:5.2f}x {ratio_min:5.2f}x {cpu_ratio:8.2f}x  {verdict} / {rc_b}"
            )

    def geo(xs: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    print(
        f"median-wall ratio: geometric mean {geo(ratios):.2f}x, worst {max(ratios):.2f}x; "
        f"min-wall ratio: geometric mean {geo(mins):.2f}x, worst {max(mins):.2f}x (target <= {TARGET}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
