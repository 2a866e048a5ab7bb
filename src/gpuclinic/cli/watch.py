"""``gpuclinic watch``: the agent's options, checks of them, and its start and stop.

Reading its store (``history``, ``events``) is :mod:`.history`."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from gpuclinic.cli.bmc_opts import bmc_options, bmc_target
from gpuclinic.cli.params import Seconds, duration_option, file_option
from gpuclinic.errors import GpuclinicError, InputError


def _check_agent_options(
    listen: str,
    no_http: bool,
    kernel_logs: tuple[str, ...],
    webhooks: tuple[str, ...],
    db: str | None,
    no_store: bool,
) -> None:
    """Refuse mistakes in the options before touching the GPU, so they show on any machine."""
    from urllib.parse import urlsplit

    if not no_http:
        from gpuclinic.watch.server import parse_listen

        parse_listen(listen)
    for kl in kernel_logs:
        p = Path(kl)
        if not p.exists():
            raise InputError(
                f"--kernel-log {kl}: no such file (give a log file to follow, e.g. /var/log/kern.log)"
            )
        if p.is_dir():
            raise InputError(f"--kernel-log {kl}: is a directory, not a log file")
    for url in webhooks:
        try:
            parts = urlsplit(url)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok = False
        if not ok:
            # never echo the value: a webhook URL is a secret
            raise InputError("--webhook: not an http(s) URL (expected https://host/path)")
    if db and not no_store and Path(db).is_dir():
        raise InputError(f"--db {db}: is a directory; give a file path such as {Path(db) / 'gpuclinic.db'}")


@click.command("watch")
@click.option(
    "--scenario", metavar="NAME", help="Drive the agent from a simulated timeline (see --list-scenarios)."
)
@click.option("--list-scenarios", is_flag=True, help="List simulated scenarios and exit.")
@click.option(
    "--time-scale",
    type=click.FloatRange(min=0.001),
    default=1.0,
    show_default=True,
    help="With --scenario: run simulated time this many times faster (tests, demos).",
)
@click.option(
    "--hold-fault",
    is_flag=True,
    help="With --scenario: a transient fault (overheating, straggler...) stays instead of recovering.",
)
@click.option(
    "--interval",
    type=Seconds(min=0.05),
    metavar="SECONDS",
    help="Sampling interval (default 1 s, or [agent] interval in --config).",
)
@click.option("--db", metavar="PATH", help="SQLite store (default $XDG_STATE_HOME/gpuclinic/gpuclinic.db).")
@click.option(
    "--no-store", is_flag=True, help="Keep nothing on disk (metrics, alerts and dashboard still work)."
)
@file_option("--config", "config_path", help="TOML config: thresholds, retention, notification channels.")
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default="127.0.0.1:9847",
    show_default=True,
    help="Dashboard, JSON API and /metrics. A non-loopback address requires a token.",
)
@click.option("--no-http", is_flag=True, help="Do not serve the dashboard or /metrics.")
@click.option(
    "--token",
    envvar="GPUCLINIC_WATCH_TOKEN",
    metavar="TOKEN",
    help="Token required by the HTTP server (env GPUCLINIC_WATCH_TOKEN); generated when needed.",
)
@file_option(
    "--kernel-log",
    "kernel_logs",
    multiple=True,
    help="Follow this kernel log file instead of the live kernel log (repeatable; survives rotation).",
)
@click.option("--no-kernel-log", is_flag=True, help="Do not follow the kernel log.")
@duration_option(
    "--doctor-interval",
    help="Full doctor checks this often (default 5m; 0 = off; a bare number is seconds).",
)
@click.option(
    "--webhook",
    "webhooks",
    multiple=True,
    metavar="URL",
    envvar="GPUCLINIC_WATCH_WEBHOOK",
    help="Also send alerts as JSON to this URL (repeatable; env GPUCLINIC_WATCH_WEBHOOK keeps it out of "
    "`ps`; Slack, Feishu, DingTalk, WeCom, e-mail via --config).",
)
@click.option(
    "--expect-gpus", type=click.IntRange(min=0), metavar="N", help="Alert when fewer than N GPUs are visible."
)
@duration_option(
    "--duration",
    help="Stop after this long (agent time), e.g. 90s, 2h (a bare number is seconds).",
)
@click.option(
    "--peers",
    envvar="GPUCLINIC_WATCH_PEERS",
    metavar="HOST:PORT,...",
    help="Other agents to show on this dashboard's /fleet page (token: GPUCLINIC_PEER_TOKEN, else --token).",
)
@file_option("--peers-file", help="Peers, one HOST:PORT per line.")
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only errors (and, at start, where the dashboard is)."
)
@click.option(
    "--bmc-interval",
    type=Seconds(1, 3600),
    default=45.0,
    show_default=True,
    metavar="S",
    help="Poll the BMC (--bmc/--redfish) this often; 30-60 s suits most BMCs.",
)
@bmc_options
def watch(
    scenario: str | None,
    list_scenarios: bool,
    time_scale: float,
    hold_fault: bool,
    interval: float | None,
    db: str | None,
    no_store: bool,
    config_path: str | None,
    listen: str,
    no_http: bool,
    token: str | None,
    kernel_logs: tuple[str, ...],
    no_kernel_log: bool,
    doctor_interval: str | None,
    webhooks: tuple[str, ...],
    expect_gpus: int | None,
    duration: str | None,
    peers: str | None,
    peers_file: str | None,
    quiet: bool,
    bmc_interval: float,
    **bmc: Any,
) -> int:
    """Always-on agent: sample GPUs every second, follow the kernel log, run the doctor every few minutes,
    store history, send alerts, export Prometheus metrics and serve a live dashboard.

    Stop with Ctrl-C (or SIGTERM).
    """
    from gpuclinic.watch.config import ChannelConfig, load_config, parse_duration

    if list_scenarios:
        from gpuclinic.sources.scenarios import format_list

        click.echo(format_list())
        return 0
    peer_list = _peer_list(peers, peers_file) if peers or peers_file else []
    cfg = load_config(config_path)
    backend, clock = _backend(cfg, scenario, time_scale, config_path, hold_fault)
    if interval is not None:
        cfg.agent.interval_s = interval
    if doctor_interval is not None:
        cfg.agent.doctor_interval_s = parse_duration(doctor_interval, what="--doctor-interval")
    if expect_gpus is not None:
        cfg.agent.expect_gpus = expect_gpus
    for url in webhooks:
        cfg.notify.channels.append(ChannelConfig(type="webhook", url=url))
    run_for = parse_duration(duration, what="--duration") if duration else None
    log = (lambda m: None) if quiet else (lambda m: click.echo(m, err=True))
    _check_agent_options(listen, no_http, kernel_logs, webhooks, db, no_store)
    opened = backend.open()  # before creating anything on disk: no GPU, no store file

    store = None if no_store else _open_store(cfg, db)
    notifier = _notifier(cfg, db, log) if cfg.notify.channels else None

    from gpuclinic.watch.agent import Agent

    follow_live = not no_kernel_log and not kernel_logs and not scenario
    target = bmc_target(**bmc) if (bmc.get("bmc_host") or bmc.get("redfish_url")) else None
    agent = Agent(
        cfg,
        backend,
        clock=clock,
        store=store,
        notifier=notifier,
        kernel_logs=[] if no_kernel_log else list(kernel_logs),
        follow_live_kernel=follow_live,
        log=log,
        bmc=target,
        bmc_interval_s=bmc_interval,
    )
    agent.start(opened)
    server = None if no_http else _serve(agent, cfg, listen, token, peer_list)
    if not quiet:
        click.echo(f"gpuclinic watch: store {store.path if store else '(none)'}", err=True)

    def _stop(signum: int, frame: Any) -> None:
        agent.stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    try:
        agent.run(duration_s=run_for)
    finally:
        if server is not None:
            server.stop()
        if notifier is not None:
            notifier.flush(timeout=3)
            notifier.close()
        if store is not None:
            store.close()
    return 0


def _peer_list(peers: str | None, peers_file: str | None) -> list[str]:
    from gpuclinic.fleet.agents import parse_agents

    items = (peers or "").split(",")
    if peers_file:
        try:
            items += Path(peers_file).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise InputError(f"--peers-file {peers_file}: cannot read ({e.strerror or e})") from None
    return list(parse_agents(items))


def _backend(
    cfg: Any, scenario: str | None, time_scale: float, config_path: str | None, hold_fault: bool = False
) -> tuple[Any, Any]:
    """(sampler backend, clock): a scripted scenario, or NVML on this machine."""
    from gpuclinic.watch.backend import NvmlBackend, RealClock, ScaledClock

    if not scenario:
        if time_scale != 1.0:
            raise InputError("--time-scale only applies with --scenario")
        if hold_fault:
            raise InputError("--hold-fault only applies with --scenario")
        return NvmlBackend(call_timeout_s=max(0.5, cfg.agent.sample_timeout_s * 0.6)), RealClock()
    from gpuclinic.watch.config import _fill
    from gpuclinic.watch.simulate import ScenarioBackend, load_watch_scenario

    sc = load_watch_scenario(scenario, hold=hold_fault)
    if sc.rules:
        # the scenario's own thresholds (short demo timings) apply unless the config file set them
        file_rules: dict[str, Any] = {}
        if config_path:
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover
                import tomli as tomllib

            file_rules = tomllib.loads(Path(config_path).read_text(encoding="utf-8")).get("rules", {})
        _fill(cfg.rules, {k: v for k, v in sc.rules.items() if k not in file_rules}, "scenario.rules")
    clock = ScaledClock(time_scale)
    return ScenarioBackend(sc, clock), clock


def _open_store(cfg: Any, db: str | None) -> Any:
    from gpuclinic.store import default_db_path
    from gpuclinic.watch.store import StoreError, WatchStore

    path = Path(db) if db else default_db_path()
    try:
        return WatchStore(
            path,
            raw_retention_s=cfg.store.raw_retention_s,
            rollup_retention_s=cfg.store.rollup_retention_s,
            max_buffered=cfg.store.max_buffered_samples,
        )
    except StoreError as e:
        raise GpuclinicError(str(e)) from None
    except OSError as e:
        raise GpuclinicError(f"cannot create store {path}: {e.strerror or e}") from None


def _notifier(cfg: Any, db: str | None, log: Any) -> Any:
    from gpuclinic.watch.notify import Notifier

    spool = cfg.notify.spool_dir
    if spool is None:
        base = (
            Path(db).parent
            if db
            else Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "gpuclinic"
        )
        spool = str(base / "alert-spool")
    return Notifier(cfg.notify, spool_dir=spool, log=log)


def _serve(agent: Any, cfg: Any, listen: str, token: str | None, peer_list: Any) -> Any:
    """Start the dashboard / API / metrics server and say where it is (and how to pass a token)."""
    from gpuclinic.watch.server import serve, token_howto

    server, generated = serve(
        agent, listen, token=token or cfg.server.token, metrics_require_token=cfg.server.metrics_require_token
    )
    if generated:
        click.echo(f"gpuclinic watch: access token (shown once): {generated}", err=True)
    if peer_list:
        from gpuclinic.fleet.page import FleetPage

        server.fleet_page = FleetPage(
            agent, peer_list, os.environ.get("GPUCLINIC_PEER_TOKEN") or server.token
        )
    click.echo(
        f"gpuclinic watch: dashboard {server.url}/  metrics {server.url}/metrics  "
        f"({agent.info.name}, every {cfg.agent.interval_s:g}s)",
        err=True,
    )
    if server.token is not None:
        click.echo(f"gpuclinic watch: a token is required here. {token_howto(server.url)}", err=True)
    return server


