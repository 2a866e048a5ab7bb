"""Benchmark: stream a large generated nvidia-bug-report.log.gz vs ``zcat | grep -c NVRM``.

Not part of pytest.  Prints the wall-time ratio against grep measured in the same run and the
parser's peak memory (it must stay flat: the report is streamed, never read whole).

    .venv/bin/python bench/bench_evidence.py [SIZE_MB]
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import tempfile
import time

from gpuclinic.sources import bugreport

SMI = """/usr/bin/nvidia-smi --query

==============NVSMI LOG==============

Driver Version                            : 535.104.05
CUDA Version                              : 12.2

GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : No
        Remapping Failure Occurred        : No
"""


def make(path: str, size_mb: int) -> None:
    line = "Mar  3 10:00:00 host kernel: [ 1234.567890] eth0: link up, 100Gbps, full duplex, flow control\n"
    xid = (
        "Mar  3 10:00:01 host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.\n"
    )
    sep = "\n____________________________________________\n\n"
    with gzip.open(path, "wt", compresslevel=1) as fh:
        fh.write(
            "____________________________________________\n\nStart of NVIDIA bug report log file.\n"
            "nvidia-bug-report.sh Version: 33470862\nDate: Mon Mar  3 10:00:00 UTC 2025\n"
        )
        fh.write(sep + SMI + sep + "*** /var/log/kern.log\n")
        block = (line * 999 + xid) * 10
        written = 0
        while written < size_mb * 1024 * 1024:
            fh.write(block)
            written += len(block)
        fh.write(sep)


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "nvidia-bug-report.log.gz")
        make(p, size)
        t0 = time.perf_counter()
        subprocess.run(f"zcat {p} | grep -c NVRM", shell=True, check=False, capture_output=True)  # noqa: S602 - fixed benchmark pipeline
        t_grep = time.perf_counter() - t0
        t0 = time.perf_counter()
        rep = bugreport.parse_path(p)
        t_ours = time.perf_counter() - t0
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"bug report {size} MB (uncompressed): zcat|grep -c NVRM {t_grep:.2f}s, gpuclinic {t_ours:.2f}s, "
            f"ratio {t_ours / t_grep:.2f}x; peak RSS {peak_mb:.0f} MB; "
            f"{len(rep.kernel_events)} kernel events, {len(rep.smi)} nvidia-smi dumps"
        )


if __name__ == "__main__":
    main()
