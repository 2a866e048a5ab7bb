"""The network items reuse `net`'s probes: a real loopback HTTP server and a closed port."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ports import free_port


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "robots.txt").write_text("User-agent: *\n")
    handler = lambda *a, **k: _Quiet(*a, directory=str(tmp_path), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _closed_port() -> int:
    return free_port()  # tests/ports.py: one the other xdist worker's servers do not take meanwhile


@pytest.mark.timeout(120)
def test_reachable_and_dead_endpoints(server: str, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}/"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "accept",
            "--quick",
            "--burn",
            "0",
            "--no-store",
            "--json",
            "--data-dir",
            str(tmp_path),
            "--net-endpoint",
            server + "/robots.txt",
            "--net-endpoint",
            dead,
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    doc = json.loads(p.stdout)
    net = [i for i in doc["items"] if i["category"] == "network"]
    by_title = {i["title"]: i for i in net}  # both probes are "reach 127.0.0.1": told apart by status below
    up = [
        i
        for i in net
        if i["id"].startswith("network.") and i["status"] == "pass" and i["id"] != "network.diagnosis"
    ]
    down = [i for i in net if i["status"] == "fail" and i["id"] != "network.diagnosis"]
    assert len(up) == 1 and up[0]["unit"] == "ms TTFB" and up[0]["measured"] >= 0
    assert len(down) == 1 and down[0]["measured"] == "unreachable" and "refused" in down[0]["why"].lower()
    diag = by_title["network checks"]
    assert diag["status"] in ("warn", "fail")  # net's own checks flag the dead endpoint
    assert p.returncode == 2  # the unreachable origin fails
