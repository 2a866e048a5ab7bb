"""Command line: ``gpuclinic <command>``.

Commands live in their own modules and load lazily, so ``gpuclinic doctor`` never pays for the
download engine or the web dashboard.  ``gpuclinic doctor`` and ``gpuclinic explain`` with plain flags
do not even load click: :mod:`gpuclinic.cli.doctor_run` and :mod:`gpuclinic.cli.explain_run` parse their
argv and anything they do not take for certain (help, BMC flags, a malformed value) goes to the click
command, which has the last word on usage.  Every error
reaches the user as one line and an exit code; set ``GPUCLINIC_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from gpuclinic.errors import GpuclinicError

if TYPE_CHECKING:
    import click

# command name -> (module, attribute, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "doctor": (
        "gpuclinic.cli.doctor",
        "doctor",
        "Diagnose this server (or saved logs): GPU faults, heat, PCIe, software, host.",
    ),
    "capture": (
        "gpuclinic.cli.capture",
        "capture",
        "Save a snapshot and its raw outputs as one tar.gz for `doctor --from`.",
    ),
    "explain": (
        "gpuclinic.cli.explain",
        "explain",
        "Paste an error or log: get the cause and the exact fix.",
    ),
    "net": (
        "gpuclinic.cli.net",
        "net",
        "Network paths to GitHub, Hugging Face, PyPI, registries, or one SSH host.",
    ),
    "get": (
        "gpuclinic.cli.get",
        "get",
        "Fast, resumable, verified downloads: Hugging Face repos, URLs, git, images.",
    ),
    "watch": (
        "gpuclinic.cli.watch",
        "watch",
        "Always-on agent: history, alerts, Prometheus metrics, dashboard.",
    ),
    "history": (
        "gpuclinic.cli.history",
        "history",
        "Print or export a metric's history from the watch store.",
    ),
    "events": ("gpuclinic.cli.history", "events", "List events recorded by the watch agent."),
    "run": ("gpuclinic.cli.run", "run", "Run a training job and keep it alive through GPU faults."),
    "report": ("gpuclinic.cli.run", "report", "Reports over the ledger (e.g. `report interruptions`)."),
    "runbook": ("gpuclinic.cli.runbook", "runbook", "Print the step-by-step procedure for a failure code."),
    "accept": (
        "gpuclinic.cli.accept",
        "accept",
        "Acceptance scorecard: is this rented server what you paid for?",
    ),
    "fleet": (
        "gpuclinic.cli.fleet",
        "fleet",
        "Many nodes at once: verdicts, incidents, trends, idle GPU-hours.",
    ),
    "slurm": ("gpuclinic.cli.slurm", "slurm", "Slurm integration: health check, prolog and epilog."),
    "k8s": (
        "gpuclinic.cli.k8s",
        "k8s",
        "Kubernetes integration: node-problem-detector plugin, node condition.",
    ),
    "sync": ("gpuclinic.cli.sync", "sync", "Fast laptop <-> server sync over SSH (parallel rsync streams)."),
}


def __getattr__(name: str) -> Any:
    """``gpuclinic.cli.cli`` (the click group) is built on first use: click is ~20 ms of start-up."""
    if name in ("cli", "LazyGroup", "NoArgsIsHelp"):
        from gpuclinic.cli import _group

        return getattr(_group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    cli: click.Group


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors, stable exit codes, no tracebacks."""
    args = sys.argv[1:] if argv is None else list(argv)
    ends_now = argv is None and args[:1] == ["explain"]
    if ends_now:  # the process ends in os._exit: a cycle collection after the run (the first allocation
        gc.disable()  # once run_explain turned them back on) walked a big log's objects for nothing, ~15 ms
    try:
        rv = _dispatch(args)
    except GpuclinicError as e:
        _err(f"gpuclinic: error: {e}")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _err("gpuclinic: interrupted")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:
        if os.environ.get("GPUCLINIC_DEBUG"):
            raise
        _err(f"gpuclinic: internal error: {type(e).__name__}: {e} (set GPUCLINIC_DEBUG=1 for details)")
        sys.exit(3)
    code = rv if isinstance(rv, int) else 0
    if ends_now:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> NoReturn:
    """End an ``explain`` process without tearing the interpreter down: a big log leaves ~250,000 line
    strings and tens of MB of buffers that finalization frees one by one (~10 ms) just before the
    process's memory goes anyway.  Only for a real process (``main()`` called without ``argv``), after
    the report is flushed; explain leaves nothing else pending (no file or thread; the one atexit job,
    writing the regex cache, runs here)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a reader that went away (``| head``), or a closed stderr
        pass
    from gpuclinic import recache

    recache.save()  # (the regexes compiled for the first time: atexit work os._exit would skip)
    os._exit(code)


def _dispatch(args: list[str]) -> Any:
    if args[:1] == ["doctor"]:
        from gpuclinic.cli.doctor_run import parse_plain, run_doctor

        opts = parse_plain(args[1:])
        if opts is not None:
            return run_doctor(**opts)
    if args[:1] == ["explain"]:
        from gpuclinic.cli.explain_run import parse_plain as parse_explain
        from gpuclinic.cli.explain_run import run_explain

        kw = parse_explain(args[1:])
        if kw is not None:
            return run_explain(**kw)
    from gpuclinic.cli import _group

    return _group.run(args)
