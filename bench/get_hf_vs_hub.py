"""Benchmark: `gpuclinic get hf` vs `huggingface_hub.snapshot_download` (HF_HUB_DISABLE_XET=1).

A simulated Hub repo (config, tokenizer, generation config, README and one 200 MiB LFS
``model.safetensors``) behind a 4 MiB/s-per-connection link with 50 ms latency and +100 ms per
new connection: the plain-HTTP path a mirror such as hf-mirror.com gives.  Both tools write their
own empty cache in the same session; the result of each is then loaded with
``HF_HUB_OFFLINE=1 hf_hub_download`` to prove it is usable, and the weights are sha256-checked.

    .venv/bin/python bench/get_hf_vs_hub.py [--size-mib 200]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _wan import GPUCLINIC, SimProcess, sha256, timed

MiB = 1024 * 1024


def offline_ok(cache: Path) -> str:
    code = (
        "from huggingface_hub import hf_hub_download\n"
        "print(hf_hub_download('bench/model', 'model.safetensors'))\n"
    )
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    return r.stdout.strip() if r.returncode == 0 else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=200)
    args = ap.parse_args()
    files = (
        "config.json=2K,tokenizer.json=2M,generation_config.json=1K,README.md=8K,"
        f"model.safetensors={args.size_mib}M"
    )
    sim = SimProcess(
        "--repo", f"bench/model:{files}", "--rate", "4M", "--latency", "0.05", "--connect-latency", "0.1"
    )
    tmp = Path(tempfile.mkdtemp(prefix="gpuclinic-hfbench-"))
    env = {
        "HF_ENDPOINT": sim.base,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_TOKEN": "",
    }
    try:
        rows = []
        g_cache = tmp / "gpuclinic"
        t, rc, err = timed(
            [*GPUCLINIC, "get", "hf", "bench/model", "-q", "--cache-dir", str(g_cache)], env=env
        )
        p = offline_ok(g_cache)
        rows.append(("gpuclinic get hf", t, rc == 0 and bool(p), p, err))

        h_cache = tmp / "hub"
        code = "from huggingface_hub import snapshot_download\nprint(snapshot_download('bench/model'))\n"
        t, rc, err = timed([sys.executable, "-c", code], env={**env, "HF_HUB_CACHE": str(h_cache)})
        p2 = offline_ok(h_cache)
        rows.append(("huggingface_hub.snapshot_download", t, rc == 0 and bool(p2), p2, err))

        import huggingface_hub

        print(
            f"\nHub repo: 4 small files + {args.size_mib} MiB LFS model.safetensors; 4 MiB/s per connection, "
            "50 ms latency, +100 ms per connection; huggingface_hub "
            f"{huggingface_hub.__version__}, HF_HUB_DISABLE_XET=1\n"
        )
        sums = {}
        for name, secs, ok, path, err in rows:
            digest = sha256(Path(path)) if path else ""
            sums[name] = digest
            print(f"  {name:<36} {secs:7.2f} s   {'ok (offline load works)' if ok else 'FAILED ' + err}")
        if len(set(sums.values())) != 1:
            print("  WARNING: the two caches hold different weights")
        g, h = rows[0][1], rows[1][1]
        print(f"\n  gpuclinic get hf vs snapshot_download: {h / g:.1f}x (target >= 8x)")
    finally:
        sim.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
