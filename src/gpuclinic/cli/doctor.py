"""``gpuclinic doctor``: its click declaration (help, usage, the BMC flags); the work is in doctor_run."""

from __future__ import annotations

from typing import Any

import click

from gpuclinic.cli.bmc_opts import bmc_options
from gpuclinic.cli.doctor_run import emit, output_format, run_doctor

__all__ = ["doctor", "emit", "output_format"]


class _DoctorCommand(click.Command):
    """Extra paths are accepted only after --from (``--from *.log``): the usage line must not offer a
    bare ``[PATH]...`` that the command then rejects."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [self.options_metavar or "[OPTIONS]"]


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
    "--net",
    "network",
    is_flag=True,
    help="Also probe the network path to GitHub, Hugging Face, PyPI and container registries (as `net`).",
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
    return run_doctor(
        from_paths=from_paths,
        more_paths=more_paths,
        scenario=scenario,
        list_scenarios=list_scenarios,
        as_json=as_json,
        as_markdown=as_markdown,
        expect_gpus=expect_gpus,
        kernel_logs=kernel_logs,
        quick=quick,
        deep=deep,
        network=network,
        show_unread=show_unread,
        **bmc,
    )
