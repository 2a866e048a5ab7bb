"""Benchmark: how close `gpuclinic net`'s throughput samples are to what real clients get, and how long
they take.

For each link shape on the WAN simulator (its own process, 127.0.0.1), the probe's 1-connection and
N-connection rates are compared with curl (one stream) and aria2c -x16 -s16 (16 streams) measured in
the same run on the same file, and the probe's verdict is printed.  The probe spends ~2 s per sample;
curl and aria2c download DL_MIB each.

    .venv/bin/python bench/net_probe_accuracy.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _wan import SimProcess
from gpuclinic.checks import run_checks
from gpuclinic.facts.network import Endpoint
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.network import ProbeConfig, probe_endpoints

MiB = 1024 * 1024
DL_MIB = 24
SHAPES = [
    ("4 MiB/s per connection", ["--rate", "4M", "--latency", "0.05", "--connect-latency", "0.1"]),
    ("2 MiB/s per connection", ["--rate", "2M", "--latency", "0.05"]),
    ("8 MiB/s shared link", ["--total-rate", "8M", "--latency", "0.05"]),
]


def rate_of(cmd: list[str], tmp: Path) -> float | None:
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=tmp, capture_output=True, timeout=300)
    secs = time.monotonic() - t0
    return DL_MIB * MiB / secs if r.returncode == 0 else None


def main() -> None:
    curl, aria2 = shutil.which("curl"), shutil.which("aria2c")
    print(
        f"{'link':26} {'probe 1c':>9} {'curl':>9} {'probe 4c':>9} {'aria2 16c':>10} {'probe s':>8}  verdict"
    )
    for label, knobs in SHAPES:
        sim = SimProcess("--file", f"big.bin={DL_MIB}M", *knobs)
        try:
            url = sim.info["files"]["big.bin"]["url"]
            base = sim.base
            ep = Endpoint(
                id="sim", url=base, service="custom", probe_path="/", throughput_path=url[len(base) :]
            )
            t0 = time.monotonic()
            nf = probe_endpoints([ep], ProbeConfig(env={}, route_check=lambda: True))
            probe_s = time.monotonic() - t0
            p = nf.probes[0]
            fs, _ = run_checks(Snapshot(network=nf))
            verdict = (
                ",".join(
                    f.code.split(".", 1)[1]
                    for f in fs
                    if f.code in ("network.per_connection_cap", "network.slow_link")
                )
                or "-"
            )
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d)
                c = rate_of([curl, "-s", "-o", "out.curl", url], tmp) if curl else None
                a = (
                    rate_of(
                        [
                            aria2,
                            "-q",
                            "-x16",
                            "-s16",
                            "-k1M",
                            "--allow-overwrite=true",
                            "-o",
                            "out.aria2",
                            url,
                        ],
                        tmp,
                    )
                    if aria2
                    else None
                )

            def f(v: float | None) -> str:
                return "-" if v is None else f"{v / MiB:.2f}"

            s1 = p.single.bytes_per_s if p.single else None
            sn = p.parallel.bytes_per_s if p.parallel else None
            print(f"{label:26} {f(s1):>9} {f(c):>9} {f(sn):>9} {f(a):>10} {probe_s:8.1f}  {verdict}")
        finally:
            sim.close()
    print(
        "rates in MiB/s; curl/aria2 over a full 24 MiB download, probe over a 2 s window after the first byte"
    )


if __name__ == "__main__":
    main()
