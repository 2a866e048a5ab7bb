"""``accept --html``: a self-contained page, checked in headless Chromium; a screenshot is kept."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from browser import Dom, headless
from realtools import require


def _artifacts() -> Path:
    p = Path(os.environ.get("GPUCLINIC_ARTIFACTS") or Path(__file__).resolve().parents[2] / "artifacts")
    p.mkdir(parents=True, exist_ok=True)
    return p




def test_html_page_renders_burn_plots_and_scorecard(tmp_path: Path) -> None:
    require("chromium")
    page = tmp_path / "accept.html"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "accept",
            "--scenario",
            "overheating",
            "--force",
            "--full",
            "--html",
            str(page),
            "--no-store",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    html = page.read_text()
    # self-contained: no scripts, no external stylesheets, images or fonts
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html

    r = headless(["--dump-dom", page.as_uri()], tmp_path / "p1")
    assert r.returncode == 0, r.stderr[-2000:]
    dom = Dom()
    dom.feed(r.stdout)
    (body,) = dom.find("body")
    assert body["data-verdict"] == "fail" and body["data-plots"] == "4"
    (temp,) = dom.find("svg", data_metric="temperature_c")
    assert temp["data-series"] == "8" and temp["data-ref"] == "89.0"
    assert int(temp["data-points"]) == 8 * 159  # one sample per second per GPU until the stop at 158 s
    assert float(temp["data-max"]) == 87.0
    (clock,) = dom.find("svg", data_metric="sm_clock_mhz")
    assert float(clock["data-max"]) == 1980.0
    (tput,) = dom.find("svg", data_metric="tflops")
    assert tput["data-series"] == "8"
    assert len(dom.find("polyline")) == 4 * 8
    assert len(dom.find("line", **{"class": "ref"})) == 1  # the slowdown line on the temperature plot
    fails = dom.find("tr", data_status="fail")
    assert {(f["data-id"], f["data-gpu"]) for f in fails} >= {
        ("burn.temperature", "3"),
        ("gpu.matmul.bf16", "3"),
    }

    shot = _artifacts() / "accept-scorecard.png"
    if shot.exists():
        shot.unlink()
    r2 = headless([f"--screenshot={shot}", "--window-size=1300,1500", page.as_uri()], tmp_path / "p2")
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert shot.stat().st_size > 20_000
    shutil.copy(page, _artifacts() / "accept-scorecard.html")
