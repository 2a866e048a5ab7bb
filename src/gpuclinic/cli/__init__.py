"""Command line: ``gpuclinic <command>``.

Commands live in their own modules and load lazily, so ``gpuclinic doctor`` never pays for the
download engine or the web dashboard.  Every error reaches the user as one line and an exit code;
set ``GPUCLINIC_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from gpuclinic import __version__
from gpuclinic.errors import EXIT_USAGE, GpuclinicError


class _NeverRaised(click.UsageError):
    pass


# click >= 8.2 raises this for a group called without a command; older click printed the help itself
NoArgsIsHelp: type[click.UsageError] = getattr(click.exceptions, "NoArgsIsHelpError", _NeverRaised)

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
    "history": ("gpuclinic.cli.watch", "history", "Print or export a metric's history from the watch store."),
    "events": ("gpuclinic.cli.watch", "events", "List events recorded by the watch agent."),
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


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        mod_name, attr, help_text = spec
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as e:
            # gpuclinic's own modules are always present: a failure there is a bug and must surface.
            # Only a missing third-party optional dependency becomes a clean one-line error.
            missing = (e.name or "").split(".")[0]
            if not missing or missing == "gpuclinic" or os.environ.get("GPUCLINIC_DEBUG"):
                raise
            reason = f"needs the Python package '{missing}': pip install {missing}"

            @click.command(cmd_name, help=help_text, context_settings={"ignore_unknown_options": True})
            @click.argument("args", nargs=-1, type=click.UNPROCESSED)
            def unavailable(args: Any) -> None:
                raise GpuclinicError(f"'{cmd_name}' {reason}")

            return unavailable
        cmd = getattr(mod, attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, spec[2]) for name, spec in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuclinic")
def cli() -> None:
    """gpuclinic: find what is hurting this GPU server now, show the evidence, say what to do."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors, stable exit codes, no tracebacks."""
    try:
        rv = cli.main(args=argv, prog_name="gpuclinic", standalone_mode=False)
    except GpuclinicError as e:
        click.echo(f"gpuclinic: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("gpuclinic: aborted", err=True)
        sys.exit(130)
    except NoArgsIsHelp as e:  # plain `gpuclinic` (or `gpuclinic get`): the help, not an error
        click.echo(e.ctx.get_help() if e.ctx is not None else cli.get_help(click.Context(cli)))
        sys.exit(0)
    except click.ClickException as e:
        click.echo(f"gpuclinic: error: {e.format_message()}", err=True)
        sys.exit(EXIT_USAGE)  # a bad flag or value: never a verdict code (2 would drain a node)
    except KeyboardInterrupt:
        click.echo("gpuclinic: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:
        if os.environ.get("GPUCLINIC_DEBUG"):
            raise
        click.echo(
            f"gpuclinic: internal error: {type(e).__name__}: {e} (set GPUCLINIC_DEBUG=1 for details)",
            err=True,
        )
        sys.exit(3)
    sys.exit(rv if isinstance(rv, int) else 0)
