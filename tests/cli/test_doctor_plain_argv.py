"""``gpuclinic doctor`` parses plain argv without click (issue 14, start-up time); the click command
stays the definition: every argv the plain parser takes must mean exactly what click makes of it, and
everything else must go to click."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from gpuclinic.cli.bmc_opts import bmc_target
from gpuclinic.cli.doctor import doctor
from gpuclinic.cli.doctor_run import PLAIN_FLAGS, parse_plain, run_doctor

_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(run_doctor).parameters.items()
    if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
}


def _click_params(argv: list[str]) -> dict[str, Any]:
    ctx = doctor.make_context("doctor", list(argv))
    return dict(ctx.params)


def test_plain_flags_are_click_options_of_the_same_kind() -> None:
    opts = {o: p for p in doctor.params if isinstance(p, click.Option) for o in p.opts}
    for flag, (dest, kind) in PLAIN_FLAGS.items():
        p = opts[flag]
        assert p.name == dest, flag
        assert p.is_flag == (kind == "flag"), flag
        assert p.multiple == (kind == "paths"), flag
        if kind == "paths":
            assert isinstance(p.type, click.Path), flag
        if kind == "count":
            assert isinstance(p.type, click.IntRange) and p.type.min == 0 and p.type.max is None, flag
        if kind == "text":
            assert p.type is click.STRING, flag


def test_defaults_are_clicks() -> None:
    """What the plain path leaves out, run_doctor and bmc_target default to what click would pass."""
    clicked = _click_params([])
    for name, default in _DEFAULTS.items():
        assert clicked[name] == default and type(clicked[name]) is type(default), name
    bmc = {k: v for k, v in clicked.items() if k not in _DEFAULTS}
    assert bmc and bmc_target(**bmc) == bmc_target()


@pytest.mark.parametrize(
    "argv",
    [
        ["--scenario", "fallen-off-bus"],
        ["--scenario=fallen-off-bus", "--json"],
        ["--json", "--scenario", "overheating", "--quick"],
        ["--markdown", "--scenario", "x", "--expect-gpus", "8"],
        ["--expect-gpus=007"],
        ["--from", "a.log", "--from=b.log", "c.log", "--kernel-log", "k.log", "--show-unread"],
        ["--list-scenarios"],
        ["--deep", "--net", "--quick", "--json", "--json"],
        [],
    ],
)
def test_plain_parse_equals_click(argv: list[str]) -> None:
    plain = parse_plain(argv)
    assert plain is not None
    clicked = _click_params(argv)
    for name, default in _DEFAULTS.items():
        got, want = plain.get(name, default), clicked[name]
        assert got == want and type(got) is type(want), (name, got, want)
    assert set(plain) <= set(_DEFAULTS)


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["--scenario"],  # missing value: click's message
        ["--scenario", "--json"],  # click would take --json as the name
        ["--scenario", "a", "--scenario", "b"],
        ["--expect-gpus", "-1"],
        ["--expect-gpus", " 8"],
        ["--expect-gpus", "eight"],
        ["--json=yes"],
        ["--bmc", "10.0.0.1"],
        ["--bmc-timeout", "30s"],
        ["--scenario", "x", "--", "y"],
        ["--jsn"],
        ["-"],
    ],
)
def test_anything_doubtful_goes_to_click(argv: list[str]) -> None:
    assert parse_plain(argv) is None


def test_unreadable_path_goes_to_click(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "secret.log"
    f.write_text("x")
    assert parse_plain(["--from", str(f)]) is not None
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # as for a non-root user on a 0600 file
    assert parse_plain(["--from", str(f)]) is None
    assert parse_plain([str(f)]) is None


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--markdown"]])
def test_doctor_scenario_start_up_imports(fmt: list[str]) -> None:
    """No click, rich, dataclasses (with inspect) or pkgutil on the doctor start-up path."""
    heavy = ["click", "rich", "dataclasses", "inspect", "pkgutil", "gpuclinic.facts.network"]
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print([m for m in {heavy!r} if m in sys.modules], file=sys.stderr))\n"
        "from gpuclinic.cli import main\n"
        f"main(['doctor', '--scenario', 'fallen-off-bus', *{fmt!r}])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]"
    assert "fell off the PCIe bus" in r.stdout or '"verdict": "drain"' in r.stdout


def test_click_path_gives_the_same_errors() -> None:
    """A usage error the plain parser hands over still gets click's one line and exit 64."""
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--expect-gpus", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 64 and r.stderr.startswith("gpuclinic: error: ") and r.stderr.count("\n") == 1
