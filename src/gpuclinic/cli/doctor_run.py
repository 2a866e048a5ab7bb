"""What ``gpuclinic doctor`` does, and a plain-argv parser so the common invocations skip click.

``gpuclinic doctor --scenario X`` is a health check that scripts run often: importing click is ~20 ms
of a ~50 ms run.  :func:`parse_plain` takes only argv it can read exactly as the click command in
:mod:`gpuclinic.cli.doctor` would (long flags and values, ``--opt=value``, bare paths) and returns
None for anything else (``--help``, the BMC flags, a repeated single-value option, a value that
click would refuse or read differently), which then goes through click.  tests/cli check the two
agree on every option.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from gpuclinic.errors import EXIT_USAGE, InputError

if TYPE_CHECKING:
    from gpuclinic.diagnose import Report
    from gpuclinic.facts.snapshot import Snapshot

# the options parse_plain reads: flag -> (keyword of run_doctor, kind); every other option goes to click
PLAIN_FLAGS: dict[str, tuple[str, str]] = {
    "--from": ("from_paths", "paths"),
    "--scenario": ("scenario", "text"),
    "--list-scenarios": ("list_scenarios", "flag"),
    "--json": ("as_json", "flag"),
    "--markdown": ("as_markdown", "flag"),
    "--expect-gpus": ("expect_gpus", "count"),
    "--kernel-log": ("kernel_logs", "paths"),
    "--quick": ("quick", "flag"),
    "--deep": ("deep", "flag"),
    "--net": ("network", "flag"),
    "--show-unread": ("show_unread", "flag"),
}


def echo(text: str, *, err: bool = False) -> None:
    """One line (or block) to stdout/stderr, flushed: ``click.echo`` without importing click."""
    f = sys.stderr if err else sys.stdout
    f.write(text + "\n")
    f.flush()


def emit(report: Report, fmt: str) -> None:
    """Print a report in the chosen format (shared by doctor, explain and net)."""
    if fmt == "json":  # import only the renderer used
        from gpuclinic.render.jsonout import render_json

        echo(render_json(report))
    elif fmt == "markdown":
        from gpuclinic.render.markdown import render_markdown

        echo(render_markdown(report))
    else:
        from gpuclinic.render.terminal import render_terminal

        render_terminal(report)


def output_format(as_json: bool, as_markdown: bool) -> str:
    if as_json and as_markdown:
        raise InputError("choose one of --json and --markdown")
    return "json" if as_json else "markdown" if as_markdown else "terminal"


def _plain_value(kind: str, value: str) -> Any:
    """The converted value, or None when click might read it differently (then click decides)."""
    if value.startswith("-"):
        return None  # click may take it as the next option
    if kind == "count":  # click.IntRange(min=0)
        return int(value) if value.isascii() and value.isdigit() else None
    if kind == "paths" and os.path.exists(value) and not os.access(value, os.R_OK):
        return None  # click.Path() refuses an unreadable path with its own message
    return value


def parse_plain(argv: list[str]) -> dict[str, Any] | None:
    """``run_doctor`` keywords for ``argv`` (after ``doctor``), or None to let click parse it."""
    kw: dict[str, Any] = {}
    lists: dict[str, list[str]] = {"from_paths": [], "more_paths": [], "kernel_logs": []}
    rest = iter(argv)
    for tok in rest:
        if not tok.startswith("-"):  # a bare path (doctor says to use --from; click.Path reads it first)
            if _plain_value("paths", tok) is None:
                return None
            lists["more_paths"].append(tok)
            continue
        name, eq, value = tok.partition("=")
        dest, kind = PLAIN_FLAGS.get(name, ("", ""))
        if not dest:
            return None  # --help, -h, --bmc..., --, an unknown option: click's job
        if kind == "flag":
            if eq:
                return None
            kw[dest] = True
            continue
        if not eq:
            value = next(rest, "-")  # "-": a missing value, which click reports
        v = _plain_value(kind, value)
        if v is None or dest in kw:  # click decides a doubtful value or a repeated single-value option
            return None
        if kind == "paths":
            lists[dest].append(v)
        else:
            kw[dest] = v
    return {**kw, **{k: tuple(v) for k, v in lists.items()}}


def _check_kernel_logs(kernel_logs: tuple[str, ...], scenario: str | None) -> None:
    """Named explicitly: a typo is an error, not a "could not check" line."""
    for k in kernel_logs:
        if not os.path.exists(k):
            raise InputError(f"--kernel-log {k}: no such file")
        if os.path.isdir(k):
            raise InputError(f"--kernel-log {k}: is a directory; give the log file")
    if kernel_logs and scenario:
        raise InputError("--kernel-log cannot be combined with --scenario (a simulated node has its own log)")


def _validate(
    paths: list[str],
    from_paths: tuple[str, ...],
    scenario: str | None,
    show_unread: bool,
    bmc: dict[str, Any],
) -> None:
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


def _snapshot(
    scenario: str | None,
    paths: list[str],
    *,
    quick: bool,
    deep: bool,
    network: bool,
    kernel_logs: tuple[str, ...],
    expect_gpus: int | None,
    bmc: dict[str, Any],
) -> Snapshot:
    if scenario:
        from gpuclinic.sources.scenarios import load_scenario

        return load_scenario(scenario)
    if paths:
        from gpuclinic.sources.evidence import load_evidence

        return load_evidence(paths)
    from gpuclinic.cli.bmc_opts import bmc_target
    from gpuclinic.collect import CollectOptions, collect_live

    return collect_live(
        CollectOptions(
            quick=quick,
            deep=deep,
            network=network,
            kernel_logs=list(kernel_logs),
            expect_gpus=expect_gpus,
            bmc=bmc_target(**bmc),
        )
    )


def run_doctor(
    from_paths: tuple[str, ...] = (),
    more_paths: tuple[str, ...] = (),
    scenario: str | None = None,
    list_scenarios: bool = False,
    as_json: bool = False,
    as_markdown: bool = False,
    expect_gpus: int | None = None,
    kernel_logs: tuple[str, ...] = (),
    quick: bool = False,
    deep: bool = False,
    network: bool = False,
    show_unread: bool = False,
    **bmc: Any,
) -> int:
    """The doctor command: diagnose, print the report, return the exit code of its verdict."""
    fmt = output_format(as_json, as_markdown)
    if list_scenarios:
        from gpuclinic.sources.scenarios import format_list

        echo(format_list())
        return 0
    paths = list(from_paths) + list(more_paths)
    _validate(paths, from_paths, scenario, show_unread, bmc)
    _check_kernel_logs(kernel_logs, scenario)
    if kernel_logs and paths:
        paths += [k for k in kernel_logs if k not in paths]  # saved evidence: read like any other file
    snap = _snapshot(
        scenario, paths, quick=quick, deep=deep, network=network, kernel_logs=kernel_logs,
        expect_gpus=expect_gpus, bmc=bmc,
    )
    if expect_gpus is not None:
        snap.expect_gpus = expect_gpus
    from gpuclinic.diagnose import diagnose

    report = diagnose(snap)
    try:
        emit(report, fmt)
        if show_unread:
            from gpuclinic.render.unread import unread_text

            echo(unread_text(snap), err=fmt != "terminal")
    except BrokenPipeError:
        sys.stderr.close()
    return report.exit_code
