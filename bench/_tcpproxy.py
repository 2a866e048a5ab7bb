"""Bench helper: the WAN simulator's TCP proxy in its own process (it must not share the client's GIL)."""

from __future__ import annotations

import json
import subprocess
import sys


class ProxyProcess:
    def __init__(self, target: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuclinic.transfer.wansim_tcp", "--target", target, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(json.loads(self.proc.stdout.readline())["port"])

    def _ask(self, cmd: str) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))

    def stats(self) -> dict[str, int]:
        return self._ask("stats")

    def reset(self) -> None:
        self._ask("reset")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
