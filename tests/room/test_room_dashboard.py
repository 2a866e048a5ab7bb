"""The watch dashboard's server-room panel in headless Chromium, fed by a real BMC (ipmi_sim): inlet,
fans and PSUs drawn with the agent's states (the panel writes data-* attributes; a screenshot is kept)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
from simbmc import USER, running

from browser import Dom, headless
from ports import free_port as _free_port
from realtools import require
from watchproc import dashboard_argv

PASSWORD = "Dash-bmc-pw-51zt"
TOKEN = "room-dash-token-0123456789ab"







def test_room_panel_draws_inlet_fans_and_psus_with_their_states(tmp_path: Path) -> None:
    tools = require("chromium", "ipmi_sim", "ipmitool")
    artifacts = Path(
        os.environ.get("GPUCLINIC_ARTIFACTS") or Path(__file__).resolve().parents[2] / "artifacts"
    )
    artifacts.mkdir(parents=True, exist_ok=True)
    with running(tmp_path / "sim", PASSWORD, tools["ipmi_sim"], tools["ipmitool"], inlet_c=31) as sim:
        sim.set_value("fan2", 0)  # a stopped fan: critical
        port = _free_port()
        agent = subprocess.Popen(
            dashboard_argv(
                port, TOKEN, "--bmc", f"127.0.0.1:{sim.port}", "--bmc-user", USER, "--bmc-cipher", "3",
                "--bmc-interval", "1",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "IPMI_PASSWORD": PASSWORD},
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 40
            room = None
            while time.monotonic() < deadline:
                try:
                    st = httpx.get(
                        url + "/api/state",
                        headers={"Authorization": f"Bearer {TOKEN}"},
                        timeout=2,
                        trust_env=False,
                    ).json()
                    room = st.get("room") or {}
                    if any(f.get("state") == "critical" for f in room.get("fans") or []):
                        break  # the poll after the simulator stopped FAN2
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.3)
            assert room and any(f.get("state") == "critical" for f in room.get("fans") or []), room
            r = headless(["--dump-dom", f"{url}/?token={TOKEN}"], tmp_path / "p1")
            assert r.returncode == 0, r.stderr[-2000:]
            dom = Dom()
            dom.feed(r.stdout)
            (body,) = dom.find("body")
            assert int(body["data-rendered"]) >= 1 and body.get("data-error", "") == ""
            (sec,) = dom.find("section", id="room")
            assert "hidden" not in sec
            assert sec["data-bmc"] == f"127.0.0.1:{sim.port}"
            assert sec["data-state"] == "critical"
            assert float(sec["data-inlet"]) == 31.0
            assert (sec["data-fans"], sec["data-fans-bad"]) == ("2", "1")
            assert (sec["data-psus"], sec["data-psus-bad"]) == ("2", "0")
            chips = {
                (a["data-kind"], a["data-name"]): a["data-state"]
                for a in dom.find("span")
                if "data-kind" in a
            }
            assert chips[("fan", "FAN2")] == "critical" and chips[("fan", "FAN1")] == "ok"
            assert chips[("inlet", next(n for k, n in chips if k == "inlet"))] == "warning"  # 31 °C > ~30 °C
            assert {n: s for (k, n), s in chips.items() if k == "psu"} == {
                "PS1 Status": "ok",
                "PS2 Status": "ok",
            }
            assert "Server room" in " ".join(dom.text)
            assert PASSWORD not in r.stdout

            shot = artifacts / "watch-dashboard-room.png"
            r2 = headless(
                [f"--screenshot={shot}", "--window-size=1400,2600", f"{url}/?token={TOKEN}"],
                tmp_path / "p2",
            )
            assert r2.returncode == 0, r2.stderr[-2000:]
            assert shot.stat().st_size > 20_000
        finally:
            agent.terminate()
            agent.wait(timeout=10)
