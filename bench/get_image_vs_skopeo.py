"""Bench: `gpuclinic get image` vs `skopeo copy` of the same image behind a shaped link.

A real docker-registry on 127.0.0.1 holds an image with one large random layer (pushed with skopeo);
both clients pull it through the WAN simulator's TCP proxy (its own process) that caps each TCP
connection at 4 MiB/s and adds 50 ms RTT, the shape of a long-haul path.  Prints the times and
the ratio (target of issue 13: >= 4x).

    python bench/get_image_vs_skopeo.py [--layer-mib 200] [--rate 4M] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "transfer"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # oci_env uses tests/ports.py

from oci_env import MiB, Registry, build_image, push, sha256_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tcpproxy import ProxyProcess

GPUCLINIC = [sys.executable, "-m", "gpuclinic"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layer-mib", type=int, default=200)
    ap.add_argument("--rate", default="4M")
    ap.add_argument("--latency", type=float, default=0.05)
    args = ap.parse_args()
    reg_bin, skopeo = shutil.which("docker-registry"), shutil.which("skopeo")
    if not reg_bin or not skopeo:
        sys.exit("needs docker-registry and skopeo (Debian packages docker-registry, skopeo)")
    with tempfile.TemporaryDirectory(prefix="bench-image-") as tmp:
        root = Path(tmp)
        reg = Registry(reg_bin, root / "registry")
        proxy = None
        try:
            build_image(root / "src", [args.layer_mib * MiB, 2000])
            push(skopeo, root / "src", f"{reg.host}/bench/big:latest")
            proxy = ProxyProcess(reg.host, "--rate", args.rate, "--latency", str(args.latency))
            ref = f"127.0.0.1:{proxy.port}/bench/big:latest"
            print(
                f"image {args.layer_mib} MiB layer; link: {args.rate}B/s per connection, "
                f"{args.latency * 1000:.0f} ms RTT"
            )

            t = time.monotonic()
            r = subprocess.run(
                [
                    skopeo,
                    "copy",
                    "-q",
                    "--src-tls-verify=false",
                    f"docker://{ref}",
                    f"oci:{root / 'sk'}:latest",
                ],
                capture_output=True,
                text=True,
            )
            t_sk = time.monotonic() - t
            assert r.returncode == 0, r.stderr
            print(f"skopeo copy:       {t_sk:7.1f} s")

            t = time.monotonic()
            r = subprocess.run(
                [*GPUCLINIC, "get", "image", ref, "-o", str(root / "gc"), "--json"],
                capture_output=True,
                text=True,
                env={**os.environ, "GPUCLINIC_BLOB_CACHE": ""},  # a cold pull, nothing left in ~/.cache
            )
            t_gc = time.monotonic() - t
            assert r.returncode == 0, r.stderr
            res = json.loads(r.stdout)
            print(f"gpuclinic get image: {t_gc:7.1f} s  ({res['size'] / MiB / t_gc:.1f} MiB/s)")
            # same bytes: every blob skopeo wrote is in our layout with the same digest
            for p in (root / "sk" / "blobs" / "sha256").iterdir():
                q = root / "gc" / "blobs" / "sha256" / p.name
                if p.stat().st_size > 1_000_000:
                    assert q.exists() and sha256_file(q) == "sha256:" + p.name
            print(f"ratio get image / skopeo: {t_sk / t_gc:.1f}x (target >= 4x)")
        finally:
            if proxy:
                proxy.close()
            reg.stop()


if __name__ == "__main__":
    main()
