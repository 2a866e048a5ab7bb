"""``gpuclinic explain [FILE|-]``: paste an error, traceback, log or nvidia-smi output; get cause and fix."""

from __future__ import annotations

import click

from gpuclinic.cli.explain_run import run_explain


@click.command("explain")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True), metavar="[FILE|-]")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the versioned JSON report (same schema as doctor)."
)
@click.option("--markdown", "as_markdown", is_flag=True, help="Print a Markdown report for a ticket.")
@click.option(
    "--offline",
    is_flag=True,
    help="Do not read this machine's facts (use when the text comes from another machine).",
)
def explain(file: str | None, as_json: bool, as_markdown: bool, offline: bool) -> int:
    """Explain an error message, traceback, log or nvidia-smi output (FILE, or - / stdin).

    Recognises CUDA, NCCL, NVML, driver, cuDNN/cuBLAS, out-of-memory and container errors, runs the
    kernel-log/XID/nvidia-smi parsers on the same text and, on the affected machine, turns the fix into
    exact commands (driver version, torch build, GPU architecture).

    Exit codes: 0 nothing found (or information only), 1 a warning-level or any software cause,
    2 critical hardware evidence, 3 could not run, 64 unreadable or unrecognised input.
    """
    return run_explain(file, as_json, as_markdown, offline)
