"""``gpuclinic watch`` (the agent), ``gpuclinic history`` and ``gpuclinic events`` (reading its store)."""

from __future__ import annotations

import csv
import datetime as _dt
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from gpuclinic.cli.bmc_opts import bmc_options, bmc_target
from gpuclinic.cli.params import Seconds
from gpuclinic.errors import EXIT_USAGE, GpuclinicError, InputError


def _parse_since(value: str | None, now: float, option: str = "--since") -> float | None:
    """``2h``/``30m``/``7d`` before now, or an ISO 8601 time (naive = UTC)."""
    if value is None:
        return None
    from gpuclinic.watch.config import parse_duration

    v = value.strip()
    if v and v[0].isdigit() and v[-1] in "smhdw" and "T" not in v and "-" not in v:
        return now - parse_duration(v, what=option)
    try:
        dt = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"bad {option} {value!r}: use a duration (90s, 2h, 7d) or an ISO time "
                         "(2026-01-31T12:00:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=_dt.timezone.utc)
    return dt.timestamp()


def _open_store_for_reading(db: str | None) -> Any:
    from gpuclinic.store import default_db_path
    from gpuclinic.watch.store import StoreError, WatchStore

    path = Path(db) if db else default_db_path()
    if not path.exists():
        raise InputError(f"no watch store at {path} (start `gpuclinic watch` first, or pass --db PATH)")
    try:
        return WatchStore(path)
    except StoreError as e:
        # not a watch store: an unreadable input file (64), like report --db
        raise InputError(str(e)) from None


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return (
        _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


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
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="TOML config: thresholds, retention, notification channels.",
)
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
@click.option(
    "--kernel-log",
    "kernel_logs",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Follow this kernel log file instead of the live kernel log (repeatable; survives rotation).",
)
@click.option("--no-kernel-log", is_flag=True, help="Do not follow the kernel log.")
@click.option(
    "--doctor-interval",
    metavar="DURATION",
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
@click.option(
    "--duration",
    metavar="DURATION",
    help="Stop after this long (agent time), e.g. 90s, 2h (a bare number is seconds).",
)
@click.option(
    "--peers",
    envvar="GPUCLINIC_WATCH_PEERS",
    metavar="HOST:PORT,...",
    help="Other agents to show on this dashboard's /fleet page (token: GPUCLINIC_PEER_TOKEN, else --token).",
)
@click.option(
    "--peers-file", type=click.Path(dir_okay=False), metavar="FILE", help="Peers, one HOST:PORT per line."
)
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


def _list_metrics() -> None:
    from gpuclinic.sources.bmc.poller import ROOM_METRICS
    from gpuclinic.watch.store import METRICS

    for m in METRICS:
        click.echo(f"{m.name:24} {m.unit:9} {m.help}")
    for name, (_, _, unit, text) in ROOM_METRICS.items():
        click.echo(f"{name:24} {unit:9} {text}")


@click.command("history")
@click.argument("metric", required=False)
@click.option("--gpu", type=click.IntRange(min=0), metavar="I", help="Only this GPU index.")
@click.option(
    "--since", default="1h", show_default=True, metavar="2h|ISO", help="Start: a duration ago or an ISO time."
)
@click.option("--until", metavar="ISO|DURATION", help="End (default now).")
@click.option("--json", "as_json", is_flag=True, help="JSON (the same as --format json).")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)
@click.option("--db", metavar="PATH", help="The watch store (default: the agent's).")
@click.option("--sensor", metavar="NAME", help="Only this BMC sensor, fan or PSU (room metrics, e.g. FAN1).")
@click.option("--list", "list_metrics", is_flag=True, help="List metric names and exit.")
def history(
    metric: str | None,
    gpu: int | None,
    since: str,
    until: str | None,
    as_json: bool,
    fmt: str,
    db: str | None,
    sensor: str | None,
    list_metrics: bool,
) -> int:
    """Print or export one metric's history from the watch store.

    GPU metrics per GPU; room metrics (inlet_c, fan_rpm, psu_ok, ...) per BMC sensor, as the agent's
    --bmc/--redfish poller recorded them.  Older than the raw retention, the store keeps 1-minute
    averages: those rows are marked "1m avg" (kind "1m" in CSV and JSON), the samples "raw".
    """
    from gpuclinic.sources.bmc.poller import ROOM_METRICS

    if as_json:
        if fmt not in ("table", "json"):
            raise InputError(f"--json and --format {fmt} contradict each other")
        fmt = "json"
    from gpuclinic.watch.store import METRIC_BY_NAME, METRICS

    if list_metrics or metric is None:
        _list_metrics()
        if not list_metrics:
            raise InputError(
                "name a METRIC (the list above), e.g. `gpuclinic history temperature --since 2h`"
            )
        return 0
    if metric in ROOM_METRICS:
        if gpu is not None:
            raise InputError(f"{metric} is a BMC metric: use --sensor NAME, not --gpu", exit_code=EXIT_USAGE)
        return _room_history(metric, sensor, since, until, fmt, db)
    if sensor is not None:
        raise InputError(
            f"--sensor is for BMC metrics ({', '.join(ROOM_METRICS)}), not {metric}", exit_code=EXIT_USAGE
        )
    if metric not in METRIC_BY_NAME:
        raise InputError(
            f"unknown metric {metric!r}; one of: {', '.join([*(m.name for m in METRICS), *ROOM_METRICS])}"
        )
    m = METRIC_BY_NAME[metric]
    now = time.time()
    lo = _parse_since(since, now)
    hi = _parse_since(until, now, "--until") if until else None
    st = _open_store_for_reading(db)
    try:
        rows = st.query_marked(m.name, gpu=gpu, since=lo, until=hi)
    finally:
        st.close()
    out = sys.stdout
    decimals = _decimals([v for _, _, v, _ in rows])
    if fmt == "json":
        json.dump(
            {
                "metric": m.name,
                "unit": m.unit,
                "since": lo,
                "until": hi,
                "points": [
                    {"time": _iso(t), "ts": t, "gpu": g, "value": v, "kind": k} for t, g, v, k in rows
                ],
            },
            out,
        )
        out.write("\n")
    elif fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["time", "gpu", "kind", f"{m.name}_{m.unit}"])
        for t, g, v, k in rows:
            w.writerow([_iso(t), g, k, "" if v is None else v])
    else:
        if not rows:
            click.echo(f"no {m.name} samples since {_iso(lo)}")
            return 0
        click.echo(f"{'time (UTC)':22} {'gpu':>3}  {'kind':7}  {m.name} ({m.unit})")
        for t, g, v, k in rows:
            kind = "1m avg" if k == "1m" else "raw"
            click.echo(f"{_iso(t):22} {g:>3}  {kind:7}  {'-' if v is None else _fmt_val(v, decimals):>8}")
    return 0


def _decimals(values: list[float | None]) -> int:
    """One precision for the whole column: 0 when every value is whole, else 1."""
    return 0 if all(v is None or float(v).is_integer() for v in values) else 1


def _fmt_val(v: float, decimals: int = 1) -> str:
    return f"{v:.{decimals}f}"


def _room_history(
    metric: str, sensor: str | None, since: str, until: str | None, fmt: str, db: str | None
) -> int:
    """``history`` for a room metric: rows from the BMC poller's ``room_samples`` table, per sensor."""
    from gpuclinic.sources.bmc.poller import ROOM_METRICS, room_query

    unit = ROOM_METRICS[metric][2]
    now = time.time()
    lo = _parse_since(since, now)
    hi = _parse_since(until, now, "--until") if until else None
    st = _open_store_for_reading(db)  # the same file and the same "no store" error as GPU metrics
    path = str(st.path)
    st.close()
    rows = room_query(path, metric, sensor=sensor, since=lo or 0.0, until=hi)
    out = sys.stdout
    if fmt == "json":
        json.dump(
            {
                "metric": metric,
                "unit": unit,
                "since": lo,
                "until": hi,
                "points": [{"time": _iso(t), "ts": t, "sensor": s, "value": v} for t, s, v in rows],
            },
            out,
        )
        out.write("\n")
    elif fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["time", "sensor", f"{metric}_{unit}"])
        for t, s, v in rows:
            w.writerow([_iso(t), s, "" if v is None else v])
    else:
        if not rows:
            which = f" for sensor {sensor}" if sensor else ""
            click.echo(
                f"no {metric} samples{which} since {_iso(lo)} (does the agent poll a BMC? watch "
                "--bmc/--redfish)"
            )
            return 0
        width = max(6, *(len(s) for _, s, _ in rows))
        decimals = _decimals([v for _, _, v in rows])
        click.echo(f"{'time (UTC)':22} {'sensor':{width}}  {metric} ({unit})")
        for t, s, v in rows:
            click.echo(f"{_iso(t):22} {s:{width}}  {'-' if v is None else _fmt_val(v, decimals):>8}")
    return 0


@click.command("events")
@click.option(
    "--since",
    default="24h",
    show_default=True,
    metavar="2h|ISO",
    help="Events open now or opened/resolved since then.",
)
@click.option("--open", "open_only", is_flag=True, help="Only events still open.")
@click.option("--json", "as_json", is_flag=True, help="JSON list.")
@click.option("--db", metavar="PATH", help="The watch store (default: the agent's).")
def events(since: str, open_only: bool, as_json: bool, db: str | None) -> int:
    """List events recorded by the watch agent, with their evidence and what to do."""
    lo = _parse_since(since, time.time())
    st = _open_store_for_reading(db)
    try:
        evs = st.events(since=lo, open_only=open_only)
    finally:
        st.close()
    if as_json:
        click.echo(
            json.dumps(
                [{**e.to_dict(), "opened_at": _iso(e.opened), "resolved_at": _iso(e.resolved)} for e in evs],
                indent=1,
            )
        )
        return 0
    if not evs:
        click.echo(f"no events since {_iso(lo)}")
        return 0
    for e in evs:
        state = (
            "OPEN"
            if e.resolved is None
            else f"resolved {_iso(e.resolved)} after {_dur(e.resolved - e.opened)}"
        )
        gpu = f" GPU {e.gpu}" if e.gpu is not None else ""
        click.echo(f"{_iso(e.opened)}  {e.severity.label.upper():8} {e.code}{gpu}  [{state}]")
        click.echo(f"  {e.title}" + (f"  (x{e.count})" if e.count > 1 else ""))
        for line in e.evidence:
            click.echo(f"    - {line}")
        if e.remedy:
            click.echo(f"  what to do: {e.remedy}")
    return 0


def _dur(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"
