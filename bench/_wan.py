"""Bench helper: run the WAN simulator in its own process (so it does not share the client's GIL)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


class SimProcess:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuclinic.transfer.wansim", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.info: dict[str, Any] = json.loads(self.proc.stdout.readline())
        self.base = str(self.info["base_url"])

    def stats(self) -> dict[str, Any]:
        return dict(httpx.get(self.base + "/_sim/stats", timeout=10).json())

    def knobs(self, **kw: Any) -> None:
        httpx.post(self.base + "/_sim/knobs", json=kw, timeout=10).raise_for_status()

    def reset(self) -> None:
        httpx.post(self.base + "/_sim/reset", timeout=10).raise_for_status()

    def served(self) -> int:
        return int(self.stats()["total_body"])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


def timed(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None
) -> tuple[float, int, str]:
    t = time.monotonic()
    r = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout
    )
    return time.monotonic() - t, r.returncode, (r.stderr or "")[-400:]


GPUCLINIC = [sys.executable, "-m", "gpuclinic"]
