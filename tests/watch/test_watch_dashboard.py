"""The dashboard in headless Chromium: what the page drew (it writes data-* attributes for every plot,
timeline and event) matches the scenario; a screenshot is kept as a test artifact."""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from browser import Dom, headless
from gpuclinic.knowledge.runbooks import get
from realtools import require
from watchproc import dashboard_argv

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)


@pytest.fixture(autouse=True)
def _needheadless() -> None:
    require("chromium")
TOKEN = "dash-token-0123456789abcdef"







@pytest.mark.timeout(150)
def test_dashboard_renders_plots_timeline_and_events(
    tmp_path: Path, free_port: Callable[[], int], artifacts: Path
) -> None:
    port = free_port()
    agent = subprocess.Popen(
        dashboard_argv(port, TOKEN),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # wait for simulated t >= 45 s: XID 79 at 30 s, thermal slowdown from ~34 s
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                st = httpx.get(
                    url + "/api/state",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=1,
                    trust_env=False,
                ).json()
                if st["status"]["samples"] >= 46:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        r = headless(["--dump-dom", f"{url}/?token={TOKEN}"], tmp_path / "p1")
        assert r.returncode == 0, r.stderr[-2000:]
        dom = Dom()
        dom.feed(r.stdout)
        (body,) = dom.find("body")
        assert int(body["data-rendered"]) >= 1, r.stdout[:2000]
        assert body.get("data-error", "") == ""
        (verdict,) = dom.find("div", id="verdict")
        assert verdict["data-verdict"] == "drain"
        assert int(body["data-plots"]) == 4 * 6  # five plots + one throttle timeline per GPU

        (temp0,) = dom.find("canvas", data_metric="temperature", data_gpu="0")
        assert int(temp0["data-points"]) >= 30
        assert float(temp0["data-ref"]) == 87.0 and temp0["data-ref-drawn"] == "1"  # slowdown line
        assert float(temp0["data-max"]) >= 86
        (power0,) = dom.find("canvas", data_metric="power", data_gpu="0")
        assert float(power0["data-ref"]) == 700.0 and 400 < float(power0["data-last"]) < 700
        (clock0,) = dom.find("canvas", data_metric="sm_clock", data_gpu="0")
        assert float(clock0["data-min"]) < 1500 < float(clock0["data-max"])  # the throttling dip
        (util3,) = dom.find("canvas", data_metric="utilization", data_gpu="3")
        assert float(util3["data-max"]) == 0.0
        (mem1,) = dom.find("canvas", data_metric="memory", data_gpu="1")
        assert 63 < float(mem1["data-last"]) < 65 and 79 < float(mem1["data-ref"]) < 80  # GiB of 79.6 GiB
        (tl0,) = dom.find("canvas", data_metric="throttle", data_gpu="0")
        reasons = {x.split(":")[0]: int(x.split(":")[1]) for x in tl0["data-reasons"].split(",")}
        assert reasons == {"hw_thermal_slowdown": 1, "sw_thermal_slowdown": 1}
        (tl1,) = dom.find("canvas", data_metric="throttle", data_gpu="1")
        assert tl1["data-reasons"] == ""
        (room,) = dom.find("section", id="room")  # no --bmc: the server-room panel stays hidden
        assert "hidden" in room and room.get("data-bmc", "") == ""
        (gpu2,) = [d for d in dom.find("div", data_gpu="2") if "incident" not in d.get("class", "")]
        assert gpu2["data-lost"] == "1"
        # issue 14: a LOST card says since when and does not pass its last values off as current
        assert 25 <= float(gpu2["data-lost-since"]) - float(gpu2["data-first-ts"]) <= 40  # lost at t=30
        (tl2,) = dom.find("canvas", data_metric="throttle", data_gpu="2")
        assert tl2["data-empty"].startswith("GPU lost: no data since"), tl2
        assert "no data since" in " ".join(dom.text) and "the values below are from then" in " ".join(
            dom.text
        )
        # round y-axis ticks: evenly spaced by 1, 2, 2.5 or 5 x 10^k
        for c in dom.find("canvas"):
            if c.get("data-ticks"):
                ticks = [float(t) for t in c["data-ticks"].split(",")]
                steps = {round(b - a, 6) for a, b in zip(ticks, ticks[1:], strict=False)}
                assert len(steps) == 1, c
                (step,) = steps
                mant = step / 10 ** math.floor(math.log10(step))
                assert any(abs(mant - m) < 1e-6 for m in (1, 2, 2.5, 5, 10)), c
                assert all(abs(t / step - round(t / step)) < 1e-6 for t in ticks), c
        # backticks in alert texts are code, not literal
        assert "`" not in "".join(dom.text)
        assert dom.find("code"), "no <code> for the commands in remedies"

        xid = [a for a in dom.find("li", data_code="xid.79") if a["data-gpu"] == "2"]
        assert xid and xid[0]["data-severity"] == "critical" and xid[0]["data-state"] == "open"
        assert dom.find("li", data_code="thermal.throttle") and dom.find("li", data_code="gpu.missing")
        # one card per incident: the fall off the bus carries its Xid 79 and the lost GPU folded under it
        cards = [
            c
            for c in dom.find("div", data_code="gpu.fallen_off_bus") + dom.find("div", data_code="xid.79")
            if "incident" in c.get("class", "")
        ]
        assert len(cards) == 1 and cards[0]["data-gpu"] == "2" and cards[0]["data-severity"] == "critical"
        text = " ".join(dom.text)
        rb = get("gpu.fallen_off_bus")
        assert rb is not None
        first = rb.steps[0].do
        assert "GPU has fallen off the bus" in text and first[:60] in text  # evidence and the runbook's step

        shot = artifacts / "watch-dashboard.png"
        r2 = headless(
            [f"--screenshot={shot}", "--window-size=1400,2000", f"{url}/?token={TOKEN}"], tmp_path / "p2"
        )
        assert r2.returncode == 0, r2.stderr[-2000:]
        assert shot.stat().st_size > 20_000
    finally:
        agent.terminate()
        agent.wait(timeout=10)
