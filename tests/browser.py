"""Headless Chromium for the tests that check what a page really drew (dashboard, room panel, accept HTML).

One place for the flags and the DOM reader, so every page test drives the browser the same way.
"""

from __future__ import annotations

import subprocess
from html.parser import HTMLParser
from pathlib import Path

from realtools import require


class Dom(HTMLParser):
    """The tags (with attributes) and the text of a `--dump-dom` page."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.nodes.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def find(self, tag: str, **want: str) -> list[dict[str, str]]:
        """Tags named ``tag`` whose attributes match ``want`` (``data_gpu`` means ``data-gpu``)."""
        return [a for t, a in self.nodes
                if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in want.items())]


def headless(args: list[str], profile: Path, *, budget_ms: int = 6000) -> subprocess.CompletedProcess[str]:
    """Run Chromium headless with its own profile folder, no network of its own, and a virtual-time budget."""
    exe = require("chromium")["chromium"]
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *args],
        capture_output=True, text=True, timeout=90, check=False,
    )
