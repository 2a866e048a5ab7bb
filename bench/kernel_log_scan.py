"""Benchmark: ``scan_path`` on a generated kernel log vs ``grep -c NVRM``, same run, same file.

Not part of pytest.  Writes a realistic log (mostly noise from systemd, sshd, kernel networking,
audit; about one line in 2,000 an NVRM Xid/GSP line or a PCIe AER block) into a temp dir, streaming
it out (default 1 GiB), warms the page cache, then times each tool as a fresh process, best of N,
interleaved.  Prints the time ratio (target <= 1.5x grep; scan_path uses grep's multi-pattern
search when grep is installed, and for a file of 128 MiB or more, when a second core is usable, two greps
taking turns stripe by stripe, so it uses both cores where the peer uses one: the output says so; the memmem
scan is timed too, as the fallback), the CPU ratio (user+sys, grep included) with the parser process's and
the greps' shares,
the load average before and after (wall ratios on a busy machine mean little), and the scanner's peak
RSS for a quarter of the file and for all of it (target: flat, i.e. the same), then deletes the file.

    .venv/bin/python bench/kernel_log_scan.py [--size 1G] [-n 3] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

NOISE = [
    "systemd[1]: Started Session {n} of User ubuntu.",
    "systemd[1]: session-{n}.scope: Deactivated successfully.",
    "CRON[{n}]: (root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)",
    "sshd[{n}]: Accepted publickey for ubuntu from 10.0.{a}.{b} port {n} ssh2: ED25519 "
    "SHA256:abcdefghijklmnop",
    "kernel: [{up}] IPv6: ADDRCONF(NETDEV_CHANGE): veth{n}: link becomes ready",
    "kernel: [{up}] docker0: port {a}(veth{n}) entered forwarding state",
    'kernel: [{up}] audit: type=1400 audit({n}.123:{a}): apparmor="DENIED" operation="open" profile="snap"',
    "kernel: [{up}] mlx5_core 0000:{a:02x}:00.0: mlx5_pcie_event:301: Detected insufficient power on the "
    "PCIe slot",
    'containerd[{n}]: time="2024-03-04T10:11:12Z" level=info msg="shim disconnected" id={n}',
    'kubelet[{n}]: I0304 10:11:12.123456 {n} kubelet.go:2337] "SyncLoop (PLEG): event for pod" '
    'pod="default/x"',
    "python3[{n}]: step={n} loss=0.{a}{b} lr=0.0001 throughput=1234.5 samples/s",
    "kernel: [{up}] EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Quota mode: none.",
]
SIGNAL = [
    [
        "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): 79, pid={n}, name=python3, GPU has fallen off the "
        "bus."
    ],
    [
        "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): 13, pid='<unknown>', name=<unknown>, Graphics SM "
        "Warp "
        "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
    ],
    [
        "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): 119, pid={n}, name=nvidia-smi, Timeout after 6s of "
        "waiting for "
        "RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)."
    ],
    [
        "kernel: [{up}] pcieport 0000:00:01.1: AER: Corrected error message received from 0000:{a:02x}:00.0",
        "kernel: [{up}] nvidia 0000:{a:02x}:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, "
        "(Receiver ID)",
        "kernel: [{up}] nvidia 0000:{a:02x}:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
        "kernel: [{up}] nvidia 0000:{a:02x}:00.0:    [ 0] RxErr                  (First)",
    ],
]


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def make_block(rnd: random.Random, up0: float, target: int = 4 << 20) -> tuple[bytes, float, int]:
    """One chunk of log text (about ``target`` bytes) and how many NVRM lines it holds."""
    out: list[str] = []
    size = 0
    up = up0
    nvrm = 0
    while size < target:
        up += rnd.random() * 0.05
        stamp = f"Mar  4 10:{int(up / 60) % 60:02d}:{int(up) % 60:02d} gpu-node-7 "
        kw = {
            "n": rnd.randrange(1000, 99999),
            "a": rnd.randrange(0, 256),
            "b": rnd.randrange(0, 256),
            "up": f"{up:12.6f}",
        }
        if rnd.random() < 1 / 2000:
            for tmpl in rnd.choice(SIGNAL):
                line = stamp + tmpl.format(**kw) + "\n"
                nvrm += "NVRM" in line
                out.append(line)
                size += len(line)
        else:
            line = stamp + rnd.choice(NOISE).format(**kw) + "\n"
            out.append(line)
            size += len(line)
    return "".join(out).encode(), up, nvrm


def generate(path: str, size: int) -> int:
    """Stream-write ``size`` bytes of log; returns the number of NVRM lines written."""
    rnd = random.Random(42)
    blocks = []
    up = 100.0
    for _ in range(8):  # a few distinct blocks, cycled (generation must not dominate the run)
        b, up, n = make_block(rnd, up)
        blocks.append((b, n))
    written = 0
    nvrm = 0
    i = 0
    with open(path, "wb") as fh:
        while written < size:
            b, n = blocks[i % len(blocks)]
            fh.write(b)
            written += len(b)
            nvrm += n
            i += 1
    return nvrm


# Peak RSS from VmHWM (this process image only): ru_maxrss would include the forked parent's pages.
PEAK = r"""
def peak_kb():
    try:
        for ln in open("/proc/self/status"):
            if ln.startswith("VmHWM:"):
                return int(ln.split()[1])
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

SCAN_CHILD = (
    PEAK
    + r"""
import sys, time
from gpuclinic.sources.kernellog import scan_path
t0 = time.perf_counter()
evs = scan_path(sys.argv[1])
dt = time.perf_counter() - t0
import resource
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(dt, peak_kb(), len(evs), sum(1 for e in evs if e.kind == "xid"), me.ru_utime + me.ru_stime,
      kids.ru_utime + kids.ru_stime)
"""
)

BASE_CHILD = (
    PEAK
    + r"""
import gpuclinic.sources.kernellog  # noqa: F401
print(peak_kb())
"""
)


def _cores_used(size: int) -> str:
    """Whether scan_path split this file over two greps (both cores) or used one grep."""
    from gpuclinic.sources.kernellog import grepsplit

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    stripe = getattr(grepsplit, "STRIPE_BYTES", None)  # None: a tree from before stripes (A/B runs)
    if grepsplit.usable(size):
        how = f"taking turns stripe by stripe ({stripe >> 20} MiB)" if stripe else "one half each"
        return f"scan_path ran two greps {how} beside its parser ({cpus} usable CPUs); grep -c: one process"
    return f"scan_path ran one grep beside its parser ({cpus} usable CPUs); grep -c NVRM one process"


def time_cmd(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall time, CPU time (user+sys of the child) and stdout of one run."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed: {r.stderr.strip()}")
    return dt, cpu, r.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1G", help="log size, e.g. 1G, 200M (default 1G)")
    ap.add_argument("-n", type=int, default=3, help="runs of each tool; the best is reported")
    ap.add_argument("--dir", default=None, help="where to write the log (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    args = ap.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep is not installed")
    size = parse_size(args.size)
    tmp = tempfile.mkdtemp(prefix="gpuclinic-bench-", dir=args.dir)
    path = os.path.join(tmp, "kern.log")
    quarter = os.path.join(tmp, "kern-quarter.log")
    try:
        t0 = time.perf_counter()
        nvrm = generate(path, size)
        generate(quarter, size // 4)
        real = os.path.getsize(path)
        print(
            f"generated {real / 2**20:.0f} MiB ({nvrm} NVRM lines) in {time.perf_counter() - t0:.1f}s at "
            f"{path}"
        )
        os.sync()  # the 1.25 GiB just written must not be flushed to disk during the timed runs
        subprocess.run([grep, "-c", "NVRM", path], capture_output=True, check=False)  # warm the page cache
        load0 = os.getloadavg()[0]
        py = sys.executable
        grep_t: list[float] = []
        grep_c: list[float] = []
        scan_t: list[float] = []
        scan_c: list[float] = []
        mm_t: list[float] = []
        no_grep = {**os.environ, "GPUCLINIC_NO_GREP": "1"}
        scan_out = count = mm_out = ""
        for _ in range(args.n):  # interleaved, so machine load hits all alike
            dt, cpu, count = time_cmd([grep, "-c", "NVRM", path])
            grep_t.append(dt)
            grep_c.append(cpu)
            dt, cpu, scan_out = time_cmd([py, "-c", SCAN_CHILD, path])
            scan_t.append(dt)
            scan_c.append(cpu)
            dt, _, mm_out = time_cmd([py, "-c", SCAN_CHILD, path], env=no_grep)
            mm_t.append(dt)
        inner, rss_kb, n_events, n_xid, own_cpu, grep_cpu = scan_out.split()
        _, _, q_out = time_cmd([py, "-c", SCAN_CHILD, quarter])
        q_rss_kb = int(q_out.split()[1])
        q_events = int(q_out.split()[2])
        _, base_cpu, base = time_cmd([py, "-c", BASE_CHILD])
        g, s = min(grep_t), min(scan_t)
        gc, sc = min(grep_c), min(scan_c)
        mib = real / 2**20
        print(f"grep -c NVRM : wall {g:6.2f} s  cpu {gc:6.2f} s  ({count} lines)  {mib / g:6.0f} MiB/s")
        print(
            f"scan_path    : wall {s:6.2f} s  cpu {sc:6.2f} s  ({n_events} events, {n_xid} Xid; "
            f"in-process {float(inner):.2f} s; interpreter start+import {base_cpu:.2f} s cpu)  "
            f"{mib / s:6.0f} MiB/s"
        )
        print(
            f"  cpu split  : parser process {float(own_cpu):.2f} s (start, imports, reading grep's output, "
            f"parsing), greps {float(grep_cpu):.2f} s (last run)"
        )
        print(f"cores used   : {_cores_used(real)}")
        print(
            f"memmem only  : wall {min(mm_t):6.2f} s  (GPUCLINIC_NO_GREP=1, the fallback; "
            f"{mm_out.split()[2]} events: "
            f"{'same' if mm_out.split()[2:4] == scan_out.split()[2:4] else 'DIFFERENT'})"
        )
        print(
            f"ratio        : wall {s / g:5.2f}x grep, cpu {sc / gc:5.2f}x grep (target <= 1.5x; best of "
            f"{args.n}); "
            f"memmem fallback {min(mm_t) / g:5.2f}x grep"
        )
        print(
            f"peak RSS     : {int(rss_kb) / 1024:6.1f} MiB scanning {mib:.0f} MiB; {q_rss_kb / 1024:.1f} MiB "
            "for a "
            f"quarter; interpreter+import alone {int(base) / 1024:.1f} MiB"
        )
        print(f"load average : {load0:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} CPUs)")
        more = int(n_events) - q_events
        grow = (int(rss_kb) - q_rss_kb) / 1024
        per = f" = {grow * 1024 / more:.1f} KiB per extra event returned" if more > 0 else ""
        print(
            f"memory growth: {grow:+.1f} MiB from 1/4 to full size for {more} more events{per}; "
            "the file itself is never held (a 5 MiB buffer)"
        )
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
