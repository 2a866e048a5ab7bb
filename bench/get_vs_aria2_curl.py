"""Benchmark: `gpuclinic get` vs `aria2c -x16 -s16` vs `curl` on a simulated long-haul link.

One 200 MiB file, 4 MiB/s per TCP connection, 50 ms first-byte latency, +100 ms per new
connection (the setup of shared/research/download-anchors.md section 7).  All three run in the
same session against the same simulator process; every output is sha256-checked.

curl is one stream, so it needs ~50 s.  By default it is capped at CURL_SECONDS (15 s) and its
rate is extrapolated to the whole file; this is printed as such.  `--full-curl` runs it to the end.

Then a 32 MiB/s total link cap is added and `gpuclinic get` must reach >= 90% of it.

    .venv/bin/python bench/get_vs_aria2_curl.py [--size-mib 200] [--full-curl]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _wan import GPUCLINIC, SimProcess, sha256, timed

CURL_SECONDS = 15.0
MiB = 1024 * 1024


def _aria2c(tmp: Path, name: str, url: str) -> list[str]:
    """aria2c the way its users tune it for one big file (16 connections, 1 MiB pieces), into tmp/name."""
    tuned = ["-x16", "-s16", "-k1M", "--file-allocation=none", "--allow-overwrite=true"]
    quiet = ["--console-log-level=warn", "--summary-interval=0"]
    return ["aria2c", *tuned, *quiet, "-d", str(tmp), "-o", name, url]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=200)
    ap.add_argument("--full-curl", action="store_true")
    args = ap.parse_args()
    size = args.size_mib * MiB
    sim = SimProcess(
        "--file", f"big.bin={args.size_mib}M", "--rate", "4M", "--latency", "0.05", "--connect-latency", "0.1"
    )
    url = sim.info["files"]["big.bin"]["url"]
    want = sim.info["files"]["big.bin"]["sha256"]
    tmp = Path(tempfile.mkdtemp(prefix="gpuclinic-bench-"))
    rows: list[tuple[str, float, str]] = []
    try:
        out = tmp / "g.bin"
        t, rc, err = timed([*GPUCLINIC, "get", url, "-o", str(out), "--sha256", want, "-q"])
        ok = rc == 0 and sha256(out) == want
        rows.append(("gpuclinic get (adaptive)", t, "ok" if ok else f"FAILED rc={rc} {err}"))
        out.unlink(missing_ok=True)

        if shutil.which("aria2c"):
            t, rc, err = timed(_aria2c(tmp, "a.bin", url))
            ok = rc == 0 and sha256(tmp / "a.bin") == want
            rows.append(("aria2c -x16 -s16 -k1M", t, "ok" if ok else f"FAILED rc={rc} {err}"))
            (tmp / "a.bin").unlink(missing_ok=True)
        else:
            print("aria2c not installed (apt-get install aria2): skipped")

        cap = None if args.full_curl else CURL_SECONDS
        cmd = ["curl", "-s", "-o", str(tmp / "c.bin"), url]
        if cap:
            cmd[1:1] = ["--max-time", str(cap)]
        t, rc, err = timed(cmd)
        got = (tmp / "c.bin").stat().st_size if (tmp / "c.bin").exists() else 0
        if got >= size:
            ok = sha256(tmp / "c.bin") == want
            rows.append(("curl (one stream)", t, "ok" if ok else "FAILED sha256"))
        else:
            est = t * size / max(got, 1)
            rows.append(
                (
                    f"curl (one stream, stopped at {t:.0f} s, {got / MiB:.0f} MiB: extrapolated)",
                    est,
                    "extrapolated",
                )
            )

        print(
            f"\nOne {args.size_mib} MiB file, 4 MiB/s per connection, 50 ms latency, +100 ms per connection\n"
        )
        base = {name.split(" ")[0]: secs for name, secs, _ in rows}
        for name, secs, status in rows:
            print(f"  {name:<60} {secs:7.2f} s   {size / secs / MiB:7.1f} MiB/s   {status}")
        g = base.get("gpuclinic")
        if g and "aria2c" in base:
            print(f"\n  gpuclinic vs aria2c: {base['aria2c'] / g:.2f}x (target >= 1.0x)")
        if g and "curl" in base:
            print(f"  gpuclinic vs curl:   {base['curl'] / g:.1f}x (target >= 10x)")

        # shared link cap: parallelism cannot beat it, but it must be filled
        total = 32 * MiB
        sim.knobs(total_rate=total)
        print(f"\n  with a {total / MiB:.0f} MiB/s total link cap added:")
        for name, cmd in (
            ("gpuclinic get", [*GPUCLINIC, "get", url, "-o", str(out), "--sha256", want, "-q"]),
            ("aria2c -x16 -s16", _aria2c(tmp, "g.bin", url)),
        ):
            if name.startswith("aria2c") and not shutil.which("aria2c"):
                continue
            out.unlink(missing_ok=True)
            sim.reset()
            t, rc, err = timed(cmd)
            ok = rc == 0 and sha256(out) == want
            st = sim.stats()
            link_s = st["last_byte"] - st["first_byte"]
            print(
                f"    {name:<18} wall {t:5.2f} s = {100 * size / t / total:3.0f}% of the cap incl. "
                "process start; "
                f"first-to-last byte {link_s:5.2f} s = "
                f"{100 * st['total_body'] / link_s / total:3.0f}% of the cap "
                f"(target >= 90%) {'ok' if ok else 'FAILED ' + err}"
            )
        time.sleep(0.1)
    finally:
        sim.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
