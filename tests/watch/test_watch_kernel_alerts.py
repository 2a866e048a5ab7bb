"""Kernel-log following: an XID line appended to a followed file reaches a webhook within 2 s, and
following survives rotation (rename + new file) and truncation (copytruncate)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuclinic.watch.agent import Agent

XID79 = ("[ 9120.123456] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.\n")
XID13 = ("[ 9121.000001] NVRM: Xid (PCI:0000:2a:00): 13, pid=4242, name=python, Graphics Exception: "
         "ESR 0x505648=0x10000f\n")


@pytest.mark.timeout(60)
def test_webhook_gets_the_alert_within_2s_of_the_xid_line(tmp_path: Path, receiver: Any,
                                                           free_port: Callable[[], int]) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[    0.000000] Linux version 6.8.0 (buildd@lcy02-amd64-080)\n")
    port = free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "watch",
            "--scenario",
            "steady8",
            "--kernel-log",
            str(log),
            "--webhook",
            receiver.url + "/alert",
            "--listen",
            f"127.0.0.1:{port}",
            "--db",
            str(tmp_path / "w.db"),
            "--doctor-interval",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        ready = False
        while time.monotonic() < deadline and not ready:
            try:
                ready = (
                    httpx.get(f"http://127.0.0.1:{port}/api/state", timeout=1, trust_env=False).json()["gpus"]
                    != []
                )
            except (httpx.HTTPError, ValueError):
                time.sleep(0.1)
        assert ready, "agent did not start"
        time.sleep(0.3)  # the follower is positioned at the end of the file
        t_write = time.time()
        with log.open("a") as fh:
            fh.write(XID79)
            fh.flush()
        got = receiver.wait_for(lambda b: isinstance(b, dict) and b.get("code") == "xid.79", timeout=5)
        assert got is not None, receiver.requests
        t_recv, path, body = got
        assert t_recv - t_write < 2.0, f"alert took {t_recv - t_write:.2f}s"
        assert path == "/alert" and body["status"] == "firing" and body["severity"] == "critical"
        assert body["gpu"] == 0 and body["uuid"].startswith("GPU-5a1c0")
        assert "fallen off the bus" in body["evidence"][0] and body["remedy"]
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    assert agent.returncode == 0


def _wait(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_following_survives_rotation_and_truncation(
    agent_factory: Callable[..., Agent], tmp_path: Path
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("old line\n" + XID13)  # already there before the agent started: not an event
    a = agent_factory("steady8", scale=1, kernel_logs=[str(log)])
    a.start()
    a.tick()
    try:
        time.sleep(0.3)

        def codes() -> list[str]:
            return sorted(e.code for e in a.book.open_events())

        assert codes() == []
        with log.open("a") as fh:
            fh.write(XID13)
        assert _wait(lambda: codes() == ["xid.13"])
        # logrotate: rename, then the kernel logger writes a new file
        os.rename(log, tmp_path / "kern.log.1")
        time.sleep(0.25)
        log.write_text(XID79)
        assert _wait(lambda: "xid.79" in codes()), codes()
        # copytruncate: the file shrinks to zero and grows again
        with log.open("r+") as fh:
            fh.truncate(0)
        time.sleep(0.25)
        with log.open("a") as fh:
            fh.write(XID79.replace("0000:18:00", "0000:2a:00"))
        assert _wait(lambda: sum(1 for e in a.book.open_events() if e.code == "xid.79") == 2), codes()
        counts = {(k[1], k[2]): v[0] for k, v in a.xids.items()}
        assert counts == {("0000:2a:00.0", 13): 1, ("0000:18:00.0", 79): 1, ("0000:2a:00.0", 79): 1}
    finally:
        a.stop.set()
        a.shutdown()


def test_repeated_xid_counts_without_re_alerting(agent_factory: Callable[..., Agent], tmp_path: Path) -> None:
    a = agent_factory("steady8", scale=1)
    sent: list[tuple[str, str]] = []
    a.book.subscribe(lambda ev, what: sent.append((ev.code, what)))
    a.start()
    a.tick()
    for kev in a._parser.feed([XID13.strip(), XID13.strip(), XID13.strip()]):
        a.handle_kernel_event(kev)
    (ev,) = a.book.open_events()
    assert ev.count == 3 and sent[0] == ("xid.13", "opened") and all(w == "updated" for _, w in sent[1:])
    assert ev.severity.label == "warning"
    assert next(iter(a.xids.values()))[0] == 3
    a.shutdown()
