"""``gpuclinic fleet``: which nodes to drain, which GPUs degrade, what sits idle, across many servers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from gpuclinic.cli.params import Seconds, duration_option, file_option, split_credentials
from gpuclinic.errors import EXIT_USAGE, InputError


def _read_secret(path: str, what: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise InputError(f"{what} {path}: cannot read ({e.strerror or e})", exit_code=EXIT_USAGE) from None
    if not text:
        raise InputError(f"{what} {path}: empty", exit_code=EXIT_USAGE)
    return text


@click.command("fleet")
@click.option(
    "--prometheus", "prom_url", metavar="URL", help="Prometheus that scrapes the agents (job --job)."
)
@click.option("--job", default="gpuclinic", show_default=True, help="Prometheus job name of the agents.")
@file_option("--basic-auth-file", help="Prometheus basic auth: a file holding USER:PASSWORD.")
@file_option("--bearer-token-file", help="Prometheus bearer token from a file.")
@click.option("--agents", metavar="HOST:PORT,...", help="Ask these agents directly (no Prometheus).")
@file_option("--agents-file", help="One HOST:PORT per line.")
@file_option("--token-file", help="Agent token (else env GPUCLINIC_WATCH_TOKEN).")
@duration_option("--window", help="Trend and idle window (default 24h).")
@click.option("--price-per-gpu-hour", type=click.FloatRange(min=0), metavar="PRICE",
              help="Cost of one GPU-hour: idle GPU-hours get a price.")
@click.option("--timeout", "timeout_s", type=Seconds(min=0.1), default=10.0, show_default=True,
              help="Seconds per request.")
@click.option("--json", "as_json", is_flag=True, help="JSON, schema gpuclinic.fleet/1.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Markdown table.")
def fleet(
    prom_url: str | None,
    job: str,
    basic_auth_file: str | None,
    bearer_token_file: str | None,
    agents: str | None,
    agents_file: str | None,
    token_file: str | None,
    window: str | None,
    price_per_gpu_hour: float | None,
    timeout_s: float,
    as_json: bool,
    as_markdown: bool,
) -> int:
    """Many nodes at once, worst first: verdict, open incidents (code, GPU, age), GPUs seen vs expected,
    degrading trends, idle GPU-hours (and cost), interruptions and goodput.

    A node that does not answer is "unreachable", never healthy. Exit codes: 2 a node to drain,
    1 warnings or unreachable nodes, 0 all healthy, 3 the source could not be read.
    """
    from gpuclinic.fleet.model import Fleet
    from gpuclinic.fleet.render import render_json, render_markdown, render_terminal
    from gpuclinic.knowledge import load_data
    from gpuclinic.watch.config import parse_duration

    if as_json and as_markdown:
        raise InputError("choose one of --json and --markdown", exit_code=EXIT_USAGE)
    if bool(prom_url) == bool(agents or agents_file):
        raise InputError("give either --prometheus URL or --agents/--agents-file", exit_code=EXIT_USAGE)
    try:
        window_s = parse_duration(
            window or load_data("cluster.json")["fleet"]["default_window"], what="--window"
        )
    except InputError as e:
        raise InputError(str(e), exit_code=EXIT_USAGE) from None
    if window_s < 60:
        raise InputError("--window: at least 1m", exit_code=EXIT_USAGE)
    result: Fleet
    if prom_url:
        from gpuclinic.fleet.prom import PromAuth, Prometheus, collect

        prom_url, url_user, url_pw = split_credentials(prom_url)
        if not prom_url.startswith(("http://", "https://")):
            raise InputError(f"--prometheus {prom_url!r}: expected an http(s) URL", exit_code=EXIT_USAGE)
        auth = PromAuth(basic=(url_user or "", url_pw or "") if url_user or url_pw else None)
        if basic_auth_file:
            user, sep, pw = _read_secret(basic_auth_file, "--basic-auth-file").partition(":")
            if not sep:
                raise InputError("--basic-auth-file: expected USER:PASSWORD", exit_code=EXIT_USAGE)
            auth.basic = (user, pw)
        if bearer_token_file:
            auth.bearer = _read_secret(bearer_token_file, "--bearer-token-file")
        prom = Prometheus(prom_url, auth, timeout_s=timeout_s)
        try:
            result = collect(prom, job=job, window_s=window_s, price=price_per_gpu_hour)
        finally:
            prom.close()
    else:
        from gpuclinic.fleet.agents import collect as collect_agents
        from gpuclinic.fleet.agents import parse_agents

        items = (agents or "").split(",")
        if agents_file:
            items += _read_secret(agents_file, "--agents-file").splitlines()
        token = (
            _read_secret(token_file, "--token-file")
            if token_file
            else os.environ.get("GPUCLINIC_WATCH_TOKEN")
        )
        result = collect_agents(parse_agents(items), token=token, timeout_s=timeout_s)
        result.price_per_gpu_hour = price_per_gpu_hour
    try:
        if as_json:
            click.echo(render_json(result))
        elif as_markdown:
            click.echo(render_markdown(result), nl=False)
        else:
            render_terminal(result)
    except BrokenPipeError:
        sys.stderr.close()
    return result.exit_code()
