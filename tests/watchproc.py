"""The command line of a ``gpuclinic watch`` agent on a simulated node, as the tests start it.

One spelling of it: the dashboard, server, history and fleet tests all start the same agent, with
their own extra options.
"""

from __future__ import annotations

import sys


def watch_argv(*args: str, scenario: str = "demo", time_scale: int = 10) -> list[str]:
    """``python -m gpuclinic watch`` on ``scenario`` with time ``time_scale`` times faster, then ``args``."""
    scene = ["--scenario", scenario, "--time-scale", str(time_scale)]
    return [sys.executable, "-m", "gpuclinic", "watch", *scene, *args]


def dashboard_argv(port: int, token: str, *args: str) -> list[str]:
    """The demo agent serving its dashboard on 127.0.0.1:``port`` behind ``token``, quiet, no store and no
    doctor runs (the page shows the scenario alone)."""
    serve = ["--listen", f"127.0.0.1:{port}", "--token", token]
    return watch_argv("--no-store", *serve, "--quiet", "--doctor-interval", "0", *args)
