"""`fleet --basic-auth-file` against a real Prometheus that requires basic auth (web.config.file)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from realtools import require

from .fleetenv import PrometheusServer, backfill, fleet_json

# bcrypt of the test password "fleet-test-password" (cost 4), made with libcrypt's Blowfish method;
# a test credential, not a secret
HASH = "$2b$04$dL6XS1nZRjytVQhqZjh3qOnm0onm1o8L82L8IwKmAR/MNCwBq8BK6"


@pytest.mark.timeout(120)
def test_basic_auth(tmp_path: Path) -> None:
    tools = require("prometheus", "promtool")
    backfill(tools["promtool"], 3, tmp_path / "tsdb", tmp_path, end=int(time.time()) - 20)
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  fleet: '{HASH}'\n")
    prom = PrometheusServer(tools["prometheus"], tmp_path, [], tsdb=tmp_path / "tsdb",
                            extra_args=[f"--web.config.file={web}"])
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("fleet:fleet-test-password\n")
    bad.write_text("fleet:wrong-password\n")
    try:
        deadline = time.monotonic() + 30
        rc, d, err = 3, dict[str, Any](), ""
        while time.monotonic() < deadline:
            rc, d, err = fleet_json(
                "--prometheus", prom.url, "--basic-auth-file", str(good), "--window", "1h"
            )
            if d:
                break
            time.sleep(0.5)
        assert rc == 2 and [n["node"] for n in d["nodes"]][0] == "n0000", err
        rc, d, err = fleet_json("--prometheus", prom.url, "--basic-auth-file", str(bad))
        assert rc == 3 and d == {} and "refused the credentials (HTTP 401)" in err
        assert "wrong-password" not in err and "fleet-test-password" not in err
        rc, d, err = fleet_json("--prometheus", prom.url)
        assert rc == 3 and "HTTP 401" in err
    finally:
        prom.stop()
