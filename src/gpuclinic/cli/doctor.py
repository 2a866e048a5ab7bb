"""``gpuclinic doctor``: diagnose live, from saved evidence, or on a simulated node."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from gpuclinic.cli.bmc_opts import bmc_options, bmc_target
from gpuclinic.diagnose import Report, diagnose
from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.facts.snapshot import Snapshot


def emit(report: Report, fmt: str) -> None:
    """Print a report in the chosen format (shared by doctor, explain and net)."""
    if fmt == "json":  # import only the renderer used
        from gpuclinic.render.jsonout import render_json

        click.echo(render_json(report))
    elif fmt == "markdown":
        from gpuclinic.render.markdown import render_markdown

        click.echo(render_markdown(report))
    else:
        from gpuclinic.render.terminal import render_terminal

        render_terminal(report)


def output_format(as_json: bool, as_markdown: bool) -> str:
    if as_json and as_markdown:
        raise InputError("choose one of --json and --markdown")
    return "json" if as_json else "markdown" if as_markdown else "terminal"


class _DoctorCommand(click.Command):
    """Extra paths are accepted only after --from (``--from *.log``): the usage line must not offer a
    bare ``[PATH]...`` that the command then rejects."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [self.options_metavar or "[OPTIONS]"]


def _check_kernel_logs(kernel_logs: tuple[str, ...], scenario: str | None) -> None:
    """Named explicitly: a typo is an error, not a "could not check" line."""
    for k in kernel_logs:
        if not os.path.exists(k):
            raise InputError(f"--kernel-log {k}: no such file")
        if os.path.isdir(k):
            raise InputError(f"--kernel-log {k}: is a directory; give the log file")
    if kernel_logs and scenario:
        raise InputError("--kernel-log cannot be combined with --scenario (a simulated node has its own log)")


@click.command("doctor", cls=_DoctorCommand)
@click.option(
    "--from",
    "from_paths",
    multiple=True,
    type=click.Path(),
    metavar="PATH",
    help="Diagnose saved evidence instead of this machine: nvidia-smi -q (text/XML), nvidia-smi table, "
    "kernel logs, nvidia-bug-report.log(.gz), capture bundles. Repeatable; detected by content.",
)
@click.argument("more_paths", nargs=-1, type=click.Path(), metavar="[PATH]...")
@click.option("--scenario", metavar="NAME", help="Run on a simulated node (see --list-scenarios).")
@click.option("--list-scenarios", is_flag=True, help="List simulated scenarios and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON report.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print a Markdown report for a ticket.")
@click.option(
    "--expect-gpus", type=click.IntRange(min=0), metavar="N", help="Flag fewer than N GPUs as gpu.missing."
)
@click.option(
    "--kernel-log",
    "kernel_logs",
    multiple=True,
    type=click.Path(),
    metavar="FILE",
    help="Also scan this kernel log file (repeatable).",
)
@click.option("--quick", is_flag=True, help="Skip timed measurements (host sampling window).")
@click.option(
    "--deep", is_flag=True, help="Allow slow checks, e.g. importing frameworks to read their CUDA build."
)
@click.option(
    "--net", "network", is_flag=True, help="Also probe the network path to GitHub, Hugging Face and PyPI."
)
@click.option(
    "--show-unread",
    is_flag=True,
    help="With --from: also print, per input, its segments and the lines no parser read.",
)
@bmc_options
def doctor(
    from_paths: tuple[str, ...],
    more_paths: tuple[str, ...],
    scenario: str | None,
    list_scenarios: bool,
    as_json: bool,
    as_markdown: bool,
    expect_gpus: int | None,
    kernel_logs: tuple[str, ...],
    quick: bool,
    deep: bool,
    network: bool,
    show_unread: bool = False,
    **bmc: Any,
) -> int:
    """Diagnose this server: which of GPU faults, heat, PCIe/power, software, network or host is hurting it.

    Exit codes: 0 healthy, 1 warning, 2 drain, 3 could not run, 64 usage or input error.
    """
    fmt = output_format(as_json, as_markdown)
    if list_scenarios:
        from gpuclinic.sources.scenarios import format_list

        click.echo(format_list())
        return 0
    paths = list(from_paths) + list(more_paths)
    if paths and not from_paths:
        raise InputError("unexpected argument(s): " + " ".join(paths) + " (did you mean --from PATH?)")
    if scenario and paths:
        raise InputError("use either --scenario or --from, not both")
    if show_unread and not paths:
        raise InputError("--show-unread needs --from PATH", exit_code=EXIT_USAGE)
    if (bmc.get("bmc_host") or bmc.get("redfish_url")) and (paths or scenario):
        raise InputError(
            "--bmc/--redfish read a live BMC; give saved BMC output with --from instead", exit_code=EXIT_USAGE
        )
    _check_kernel_logs(kernel_logs, scenario)
    if kernel_logs and paths:
        paths += [k for k in kernel_logs if k not in paths]  # saved evidence: read like any other file
    snap: Snapshot
    if scenario:
        from gpuclinic.sources.scenarios import load_scenario

        snap = load_scenario(scenario)
    elif paths:
        from gpuclinic.sources.evidence import load_evidence

        snap = load_evidence(paths)
    else:
        from gpuclinic.collect import CollectOptions, collect_live

        snap = collect_live(
            CollectOptions(
                quick=quick,
                deep=deep,
                network=network,
                kernel_logs=list(kernel_logs),
                expect_gpus=expect_gpus,
                bmc=bmc_target(**bmc),
            )
        )
    if expect_gpus is not None:
        snap.expect_gpus = expect_gpus
    report = diagnose(snap)
    try:
        emit(report, fmt)
        if show_unread:
            from gpuclinic.render.unread import unread_text

            click.echo(unread_text(snap), err=fmt != "terminal")
    except BrokenPipeError:
        sys.stderr.close()
    return report.exit_code
