from __future__ import annotations

import json
import os
import subprocess
import sys


def run_cli(
    *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", *args],
        capture_output=True,
        text=True,
        input=input,
        env=e,
        timeout=120,
    )


def test_doctor_runs_without_gpu_and_says_why() -> None:
    r = run_cli("doctor", "--quick", "--json")
    assert r.returncode in (0, 1, 2), r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuclinic.report/2"
    assert any("NVML" in s["what"] for s in d["skipped"]) or d["gpus"]


def test_unknown_command_is_one_line_error() -> None:
    r = run_cli("frobnicate")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_conflicting_formats() -> None:
    r = run_cli("doctor", "--json", "--markdown")
    assert r.returncode == 64 and r.stderr.startswith("gpuclinic: error:")


def test_durations_take_a_unit_in_every_command() -> None:
    """README: durations take a unit (90s, 30m) in every command; a bare number is seconds."""
    import click

    from gpuclinic.cli import cli

    def param(cmd: click.Command, name: str) -> click.Parameter:
        return next(p for p in cmd.params if p.name == name)

    ctx = click.Context(cli)
    doctor = cli.get_command(ctx, "doctor")
    watch = cli.get_command(ctx, "watch")
    fleet = cli.get_command(ctx, "fleet")
    accept = cli.get_command(ctx, "accept")
    net = cli.get_command(ctx, "net")
    get = cli.get_command(ctx, "get")
    assert doctor and watch and fleet and accept and net and isinstance(get, click.Group)
    get_url = get.get_command(ctx, "url")
    get_hf = get.get_command(ctx, "hf")
    assert get_url and get_hf
    assert param(net, "timeout_s").type_cast_value(ctx, "30s") == 30.0
    assert param(get_url, "stall_timeout").type_cast_value(ctx, "1m") == 60.0
    assert param(get_hf, "stall_timeout").type_cast_value(ctx, "45") == 45.0
    assert param(doctor, "bmc_timeout").type_cast_value(ctx, "30s") == 30.0
    assert param(watch, "bmc_interval").type_cast_value(ctx, "1m") == 60.0
    assert param(watch, "interval").type_cast_value(ctx, "2s") == 2.0
    assert param(watch, "interval").type_cast_value(ctx, "0.5") == 0.5
    assert param(fleet, "timeout_s").type_cast_value(ctx, "5s") == 5.0
    assert param(accept, "burn_s").type_cast_value(ctx, "10m") == 600.0
    r = run_cli("watch", "--interval", "0s", "--duration", "1s", "--no-store")
    assert r.returncode == 64 and "--interval" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("fleet", "--timeout", "soon", "--agents", "127.0.0.1:1")
    assert r.returncode == 64 and "not a duration" in r.stderr
