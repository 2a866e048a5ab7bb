"""``gpuclinic accept``: the acceptance scorecard for a new or suspect GPU server."""

from __future__ import annotations

import json
import os
import sys

import click

from gpuclinic.accept.specs import mode_settings
from gpuclinic.cli.params import Seconds, file_option
from gpuclinic.errors import EXIT_USAGE, InputError

_Q, _S, _F = (mode_settings(m) for m in ("quick", "standard", "full"))


def _check_inputs(quick: bool, full: bool, as_json: bool, as_markdown: bool, data_dir: str | None,
                  html_file: str | None, scenario: str | None) -> None:
    """Usage errors before anything is measured (exit 64)."""
    if quick and full:
        raise InputError("choose one of --quick and --full", exit_code=EXIT_USAGE)
    if as_json and as_markdown:
        raise InputError("choose one of --json and --markdown", exit_code=EXIT_USAGE)
    if data_dir is not None and not os.path.isdir(data_dir):
        raise InputError(f"--data-dir {data_dir}: no such directory", exit_code=EXIT_USAGE)
    if html_file is not None:
        parent = os.path.dirname(os.path.abspath(html_file))
        if not os.path.isdir(parent):
            raise InputError(f"--html {html_file}: folder {parent} does not exist", exit_code=EXIT_USAGE)
    if scenario:
        from gpuclinic.sources.scenarios import list_scenarios

        names = [n for n, _ in list_scenarios()]
        if scenario not in names:
            raise InputError(
                f"unknown scenario {scenario!r}; valid: {', '.join(names)}", exit_code=EXIT_USAGE
            )


@click.command("accept")
@click.option(
    "--quick",
    is_flag=True,
    help=f"Short measurements ({_Q['matmul_s']:g} s each), a {_Q['burn_s']:g} s burn, "
    f"no network probes, dcgmi diag -r {_Q['dcgm_level']}.",
)
@click.option(
    "--full",
    is_flag=True,
    help=f"Longer measurements ({_F['matmul_s']:g} s each), every GPU pair, a "
    f"{_F['burn_s']:g} s burn, dcgmi diag -r {_F['dcgm_level']}.",
)
@click.option(
    "--scenario", metavar="NAME", help="Simulate a node from the scenario catalog (doctor --list-scenarios)."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the scorecard as JSON (schema gpuclinic.accept/1)."
)
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the scorecard as a Markdown table.")
@file_option("--html", "html_file", help="Also write a self-contained HTML page with plots of the burn.")
@click.option("--compare", is_flag=True, help="Show changes against the previous run of this host.")
@click.option("--force", is_flag=True, help="Load GPUs even when other processes are running on them.")
@click.option(
    "--burn",
    "burn_s",
    type=Seconds(min=0, max=86400),
    metavar="SECONDS",
    help=f"Length of the sustained burn (default: {_Q['burn_s']:g} quick, {_S['burn_s']:g}, "
    f"{_F['burn_s']:g} full; 0 = none).",
)
@click.option(
    "--python",
    "python",
    metavar="PATH",
    help="Python whose PyTorch/CuPy runs the workload (default: this one). Nothing is installed.",
)
@click.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    show_default=True,
    help="cpu: run the workload's code path on the CPU (for tests without a GPU).",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "torch", "cupy"]),
    default="auto",
    show_default=True,
    help="Workload library: PyTorch when importable, else CuPy.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Where the dataset lives, for the disk read test (default: the current directory).",
)
@click.option(
    "--net-endpoint",
    "net_endpoints",
    multiple=True,
    metavar="[SERVICE=]URL",
    help="Probe this URL instead of the default endpoints (repeatable; as `net --endpoint`).",
)
@click.option("--no-store", is_flag=True, help="Do not record this run in the local store.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Print each step and figure to stderr as it happens (default: only when stderr is a terminal; "
    "--progress for a log file or a batch job).",
)
def accept(
    quick: bool,
    full: bool,
    scenario: str | None,
    as_json: bool,
    as_markdown: bool,
    html_file: str | None,
    compare: bool,
    force: bool,
    burn_s: float | None,
    python: str | None,
    device: str,
    backend: str,
    data_dir: str | None,
    net_endpoints: tuple[str, ...],
    no_store: bool,
    progress: bool | None,
) -> int:
    """Is this rented server what you paid for?  Measure it and score every item against the GPU's
    datasheet (with its source) or its identical peers: health, network, matmul TFLOPS, memory and
    PCIe bandwidth, GPU<->GPU and NCCL bandwidth, a sustained burn, the host.

    Never changes clocks or power limits; refuses to load GPUs running other processes unless
    --force.  Exit codes: 0 all pass, 1 warning, 2 failure, 3 no GPU item could be judged (no GPU, no
    backend, GPUs busy), 64 bad input, 130 Ctrl-C.
    """
    from gpuclinic.accept.run import AcceptOptions, run_accept

    _check_inputs(quick, full, as_json, as_markdown, data_dir, html_file, scenario)
    show = sys.stderr.isatty() if progress is None else progress
    opts = AcceptOptions(
        mode="quick" if quick else "full" if full else "standard",
        scenario=scenario,
        python=python,
        device=device,
        backend=backend,
        force=force,
        burn_s=burn_s,
        data_dir=data_dir,
        net_endpoints=list(net_endpoints),
        progress=(lambda s: click.echo(s, err=True)) if show else None,
    )
    sc = run_accept(opts)
    interrupted = any(n.startswith("interrupted") for n in sc.notes)
    prev = None
    deltas: list[dict[str, object]] = []
    if not no_store:
        from gpuclinic.accept.history import compare as _compare
        from gpuclinic.accept.history import previous_run, save_run

        try:
            save_run(sc)
            if compare:
                prev = previous_run(sc)
                deltas = _compare(prev, sc) if prev else []
        except Exception as e:  # the scorecard matters more than its history
            sc.notes.append(f"could not use the local store: {type(e).__name__}: {e}")
    elif compare:
        sc.notes.append("--compare needs the store (drop --no-store)")
    if html_file:
        from gpuclinic.accept.html import render_html

        with open(html_file, "w", encoding="utf-8") as fh:
            fh.write(render_html(sc))
    from gpuclinic.accept.render import render_compare, render_markdown, render_text

    try:
        if as_json:
            d = sc.to_dict()
            if compare:
                d["compare"] = {"previous_run": prev.get("run_id") if prev else None, "deltas": deltas}
            click.echo(json.dumps(d, indent=1))
        elif as_markdown:
            click.echo(render_markdown(sc))
            if compare:
                click.echo("\n```\n" + render_compare(prev, deltas) + "\n```")
        else:
            click.echo(render_text(sc))
            if compare:
                click.echo("\n" + render_compare(prev, deltas))
    except BrokenPipeError:
        sys.stderr.close()
    return 130 if interrupted else sc.exit_code
