"""`gpuclinic fleet` over 1,000 nodes in a real Prometheus: how long does the answer take?

    python bench/fleet_scale.py [--nodes 1000] [--gpus 8] [--hours 1] [--step 60]

A synthetic fleet (gpuclinic.fleet.synth: 8 GPUs per node, a drain node, idle GPUs, degrading
counters, unreachable nodes) is written as OpenMetrics, turned into TSDB blocks with
`promtool tsdb create-blocks-from openmetrics`, and served by a real Prometheus on 127.0.0.1.
Measured in the same run:

* gpuclinic fleet, in process (its ~20 aggregated instant queries in parallel), best of 5, and the CPU it
costs;
* gpuclinic fleet, end to end (`python -m gpuclinic fleet --json`, process start included);
* the peer: the obvious script, the same figures asked per node (the same queries per node, in sequence),
  timed on 25 nodes and scaled to the fleet (marked "extrapolated").

Target (issue 11): fleet answers in under 2 s for 1,000 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fleet"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fleetenv import PrometheusServer, backfill

from gpuclinic.fleet.prom import Prometheus, collect, queries
from realtools import which


def per_node_peer(prom: Prometheus, nodes: list[str], window_s: float) -> float:
    """The same queries, one node at a time (what a simple per-node loop over the API costs)."""
    qs = queries("gpuclinic", window_s)
    t0 = time.perf_counter()
    for n in nodes:
        for q in qs.values():
            prom.query(q.replace('job="gpuclinic"', f'job="gpuclinic",node="{n}"'), time.time())
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--step", type=int, default=60)
    ap.add_argument("--peer-sample", type=int, default=25)
    a = ap.parse_args()
    prom_bin, promtool = which("prometheus"), which("promtool")
    if not prom_bin or not promtool:
        print("needs prometheus and promtool (Debian package prometheus)")
        return 3
    dur = int(a.hours * 3600)
    window = f"{dur}s"
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        truth, took_blocks = backfill(
            promtool, a.nodes, tmp / "tsdb", tmp, end=int(time.time()) - 30, duration_s=dur, step_s=a.step
        )
        gen = time.perf_counter() - t0 - took_blocks
        series = a.nodes * (5 + a.gpus * 7)  # per node: up, verdict, GPUs, expected; per GPU: 7 families
        samples = series * (dur // a.step + 1)
        print(
            f"synthetic fleet: {a.nodes} nodes x {a.gpus} GPUs, {a.hours:g} h at {a.step} s: ~{series:,} "
            "series, "
            f"~{samples / 1e6:.1f} M samples"
        )
        print(
            f"  OpenMetrics written in {gen:.1f} s; promtool create-blocks-from openmetrics "
            f"{took_blocks:.1f} s"
        )
        srv = PrometheusServer(prom_bin, tmp, [], tsdb=tmp / "tsdb")
        try:
            t1 = time.perf_counter()
            srv.wait_ready(300)
            print(f"  Prometheus ready in {time.perf_counter() - t1:.1f} s")
            prom = Prometheus(srv.url, timeout_s=60)
            collect(prom, job="gpuclinic", window_s=dur)  # warm the page cache once
            pproc = psutil.Process(srv.proc.pid)
            c0, me0 = pproc.cpu_times(), psutil.Process().cpu_times()
            runs = []
            for _ in range(5):
                f = collect(prom, job="gpuclinic", window_s=dur)
                runs.append(f.took_s or 0.0)
            c1, me1 = pproc.cpu_times(), psutil.Process().cpu_times()
            prom_cpu = (c1.user + c1.system - c0.user - c0.system) / 5
            client_cpu = (me1.user + me1.system - me0.user - me0.system) / 5
            best, worst = min(runs), max(runs)
            e2es = []
            for _ in range(3):
                t2 = time.perf_counter()
                p = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "gpuclinic",
                        "fleet",
                        "--prometheus",
                        srv.url,
                        "--window",
                        window,
                        "--json",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                e2es.append(time.perf_counter() - t2)
            e2e = sorted(e2es)[1]
            out = json.loads(p.stdout)
            names = [n["node"] for n in out["nodes"]]
            ok = (
                len(names) == a.nodes
                and names[0] == "n0000"
                and out["nodes"][0]["verdict"] == "drain"
                and sum(1 for t in truth if t.verdict == "unreachable")
                == out["summary"]["by_verdict"]["unreachable"]
            )
            sample = [t.node for t in truth[: a.peer_sample]]
            peer = per_node_peer(prom, sample, dur) * a.nodes / len(sample)
            prom.close()
        finally:
            srv.stop()
    print(
        f"gpuclinic fleet (in process, {len(queries('gpuclinic', dur))} queries): best {best:.3f} s, "
        f"worst {worst:.3f} s of 5"
    )
    print(
        f"CPU per answer (independent of the machine's load): Prometheus {prom_cpu:.3f} s, "
        f"gpuclinic {client_cpu:.3f} s"
    )
    print(
        f"gpuclinic fleet --json end to end (process start included): median {e2e:.3f} s, best "
        f"{min(e2es):.3f} s "
        f"of 3 (exit {p.returncode})"
    )
    print(f"machine load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"peer, per-node queries in sequence (extrapolated from {a.peer_sample} nodes): {peer:.1f} s "
        f"-> gpuclinic fleet is {peer / best:.0f}x faster"
    )
    print(f"answer correct (drain node first, unreachable count): {ok}")
    target = e2e < 2.0
    print(f"target < 2 s for {a.nodes} nodes (end to end, median): {'MET' if target else 'MISSED'}")
    return 0 if ok and target else 1


if __name__ == "__main__":
    sys.exit(main())
