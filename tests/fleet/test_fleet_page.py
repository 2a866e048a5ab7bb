"""The agent's /fleet page with --peers: itself and its peers, worst first, drawn by a real browser."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from ports import free_port
from realtools import require

from .fleetenv import Agent


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Agent, Agent, str]]:
    dead = f"127.0.0.1:{free_port()}"
    peer = Agent("peer", "healthy", tmp_path)
    me = Agent("me", "fallen-off-bus", tmp_path, extra=["--peers", f"{peer.addr},{dead}"])
    yield me, peer, dead
    me.stop()
    peer.stop()


def _fleet(me: Agent, pred: Any, timeout: float = 40) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"http://{me.addr}/api/fleet", timeout=5, trust_env=False)
            doc = r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            doc = {}
        if doc and pred(doc):
            return doc
        time.sleep(1)
    raise AssertionError(f"fleet page never matched: {doc}")


@pytest.mark.timeout(120)
def test_api_fleet_lists_self_and_peers(pair: tuple[Agent, Agent, str]) -> None:
    me, peer, dead = pair
    doc = _fleet(me, lambda d: d["nodes"][0]["verdict"] == "drain" and len(d["nodes"]) == 3
                 and d["nodes"][2]["verdict"] == "healthy", timeout=60)
    first, second, third = doc["nodes"]
    assert first["address"] == "this agent" and any(i["code"] == "gpu.fallen_off_bus" and i["gpu"] == 4
                                                    for i in first["incidents"])
    assert (second["verdict"], second["address"]) == ("unreachable", dead)
    assert third["address"] == peer.addr and third["incidents"] == []
    # without --peers there is no fleet API
    assert httpx.get(f"http://{peer.addr}/api/fleet", timeout=5, trust_env=False).status_code == 404


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.ready = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-verdict" in a:
            self.rows.append(a)
        if a.get("id") == "fleet-summary" and a.get("data-ready") == "1":
            self.ready = True


@pytest.mark.timeout(150)
def test_fleet_page_in_a_browser(pair: tuple[Agent, Agent, str], tmp_path: Path) -> None:
    require("chromium")
    chromium = next(p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p)
    me, _peer, _dead = pair
    _fleet(
        me,
        lambda d: d["nodes"][0]["verdict"] == "drain" and d["nodes"][2]["verdict"] == "healthy",
        timeout=60,
    )
    p = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'chrome'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            f"http://{me.addr}/fleet",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    dom = _Rows()
    dom.feed(p.stdout)
    assert dom.ready, p.stdout[-2000:] + p.stderr[-2000:]
    assert [r["data-verdict"] for r in dom.rows] == ["drain", "unreachable", "healthy"]
