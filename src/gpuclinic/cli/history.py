"""``gpuclinic history`` and ``gpuclinic events``: read what the watch agent stored, without an agent running.

Kept apart from ``gpuclinic watch`` (:mod:`.watch`, the agent's options and lifecycle): these commands only
open the store and print what it holds, so they share none of the agent's start-up.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from gpuclinic.errors import EXIT_USAGE, InputError


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
