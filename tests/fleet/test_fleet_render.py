"""The fleet table for pipes and NO_COLOR: one plain line per node, nothing folded mid-word."""

from __future__ import annotations

import time

import pytest

from gpuclinic.fleet.model import Fleet, FleetIncident, NodeView
from gpuclinic.fleet.render import render_terminal


def _fleet() -> Fleet:
    node = NodeView(node="gpu-node-07", verdict="drain", gpus_seen=7, gpus_expected=8,
                    incidents=[FleetIncident("gpu.fallen_off_bus", "critical", "2", 39.0),
                               FleetIncident("thermal.slowdown", "critical", "0", 46.0)])
    down = NodeView(
        node="gpu-node-11", verdict="unreachable", error="ConnectError: [Errno 111] Connection refused"
    )
    return Fleet(source="2 agents", window_s=86400, nodes=[node, down], generated_at=time.time())


@pytest.mark.parametrize("no_color", [None, "1"])
def test_piped_fleet_table_is_plain_one_line_per_node(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_color: str | None
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    if no_color:
        monkeypatch.setenv("NO_COLOR", no_color)
    render_terminal(_fleet())
    out = capsys.readouterr().out
    assert not set(out) & set("┏┃┡│└━─"), out
    lines = out.splitlines()
    node = next(ln for ln in lines if ln.startswith("gpu-node-07"))
    assert "gpu.fallen_off_bus GPU 2 (39s)" in node and "7/8" in node and "drain" in node
    assert any(ln.startswith("gpu-node-11") and "Connection refused" in ln for ln in lines)
    assert lines[-1].startswith("2 nodes: 1 drain, 1 unreachable")


def test_password_in_the_prometheus_url_is_never_printed() -> None:
    import subprocess
    import sys

    for fmt in ([], ["--json"]):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuclinic",
                "fleet",
                "--prometheus",
                "http://ops:pr0m-Secret@127.0.0.1:9",
                "--timeout",
                "1",
                *fmt,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert r.returncode == 3, r.stderr
        assert "pr0m-Secret" not in r.stdout + r.stderr and "127.0.0.1:9" in r.stderr
