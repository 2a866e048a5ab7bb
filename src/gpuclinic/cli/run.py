"""``gpuclinic run -- CMD ...`` (supervise a training job) and ``gpuclinic report interruptions``."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import shutil
import sys
import time
from pathlib import Path

import click

from gpuclinic.cli.params import duration_option, file_option
from gpuclinic.errors import GpuclinicError, InputError
from gpuclinic.knowledge.runbooks import remedy

_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``1d`` -> seconds.  A bare number is seconds, in every command
    (README "Durations"): ``--hang-timeout 2`` once meant 2 minutes while ``watch --duration 2`` meant 2 s."""
    m = _DUR.match(text)
    if not m:
        raise InputError(f"not a duration: {text!r} (use e.g. 90s, 30m, 2h; a bare number is seconds)")
    unit = (m.group(2) or "s").lower()
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


# the run ledger, the same option for `run` and `report interruptions`
_ledger_db = file_option("--db", "db_path", help="Ledger database (default: the shared store).")


def _say(msg: str) -> None:
    click.echo(f"gpuclinic: {msg}", err=True)


def _preflight(*, quick: bool, force: bool, scenario: str | None, kernel_logs: list[str]) -> None:
    """Doctor before the job: refuse on a drain verdict for the job's GPUs, warn on warnings.

    ``quick`` (the default) skips the timed measurements, so a job start costs ~0.2 s, not 2-3 s:
    what blocks a job (a lost GPU, pending row remaps, XIDs) needs no sampling window.
    """
    t0 = time.monotonic()
    from gpuclinic.diagnose import diagnose
    from gpuclinic.model import Severity, Verdict
    from gpuclinic.supervise.gpus import parse_visible, resolve

    if scenario:
        from gpuclinic.sources.scenarios import load_scenario

        snap = load_scenario(scenario)
    else:
        from gpuclinic.collect import CollectOptions, collect_live

        snap = collect_live(CollectOptions(quick=quick, kernel_logs=list(kernel_logs)))
    report = diagnose(snap)
    tokens = parse_visible(os.environ.get("CUDA_VISIBLE_DEVICES"))
    job = resolve(tokens, snap.gpus) if tokens is not None else []
    job_keys = {k for g in job for k in (g.uuid, g.pci_bus_id) if k}

    def on_job(f: object) -> bool:
        gpu = getattr(f, "gpu", None)
        if gpu is None or not job_keys:
            return True
        return bool({gpu.uuid, gpu.pci_bus_id} & job_keys)

    blocking = [f for f in report.findings if f.severity == Severity.CRITICAL and on_job(f)]
    # one line per incident (its symptoms folded in, its runbook's first step), not one per finding
    blocking_ids = {f.incident for f in blocking}
    drain = report.verdict == Verdict.DRAIN and bool(blocking)
    for inc in report.incidents:
        if inc.severity < Severity.WARNING:
            continue
        where = f"{inc.gpu.label()}: " if inc.gpu else ""
        what = f"{inc.code}; explains {', '.join(inc.symptoms)}" if inc.symptoms else inc.code
        if drain and inc.id in blocking_ids:
            _say(f"pre-flight: {where}{inc.title} [{what}] -> {remedy(inc.code, inc.gpu, inc.first_step)}")
        else:
            _say(f"pre-flight warning: {where}{inc.title} [{what}]")
    if drain:
        if not force:
            raise GpuclinicError(
                "pre-flight doctor says drain: not starting the job (fix it, or use --force)", exit_code=2
            )
        _say("pre-flight says drain; starting anyway (--force)")
    else:
        hint = "" if not quick else " (--full-preflight adds the timed checks)"
        _say(f"pre-flight: {report.verdict.value} in {time.monotonic() - t0:.1f}s{hint}")


def _list(ctx: click.Context, value: bool) -> None:
    if value:
        from gpuclinic.sources.scenarios import format_list

        click.echo(format_list())
        ctx.exit(0)


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Restart at most this many times.",
)
@duration_option("--backoff", "backoff", default="10s", help="First restart delay; doubles each restart.")
@duration_option("--backoff-max", default="10m", help="Cap for the delay.")
@click.option(
    "--retry-on",
    default=None,
    metavar="CLASSES",
    help="Interruption classes that are restarted, as a comma list (default: the classes "
    "knowledge/data/interruptions.json marks retry: gpu hardware, NCCL/network, download, hang, killed; "
    "an unknown name lists every class).",
)
@click.option(
    "--exclude-bad-gpu", is_flag=True, help="After a GPU fault, restart without that GPU (by UUID)."
)
@click.option(
    "--min-gpus",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --exclude-bad-gpu: give up rather than run on fewer GPUs.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Resume from the newest complete checkpoint here (GPUCLINIC_RESUME_FROM / {resume}).",
)
@duration_option(
    "--hang-timeout",
    help="Treat the job as hung after this long without output and GPU activity, or with a stale "
    "heartbeat, e.g. 30m (a bare number is seconds). Off by default.",
)
@duration_option(
    "--gpu-fault-grace",
    default="60s",
    help="When one of the job's GPUs fails fatally (fell off the bus, XID 48/79/95...) and the job is "
    "still running this long after, stop it instead of waiting for an NCCL timeout ('off' to disable).",
)
@file_option(
    "--heartbeat",
    help="Heartbeat file the job touches (exported as GPUCLINIC_HEARTBEAT; default: one per run).",
)
@duration_option(
    "--stop-timeout",
    default="30s",
    help="After SIGINT/SIGTERM, wait this long before killing the job's process group.",
)
@file_option("--log", "log_path", help="Also write the job's output here (default: under the state dir).")
@file_option(
    "--kernel-log",
    "kernel_logs",
    multiple=True,
    help="Kernel log file(s) to watch for XIDs and OOM kills (default: /dev/kmsg or journalctl).",
)
@duration_option("--sample-interval", default="5s", help="GPU sampling period.")
@click.option("--skip-preflight", is_flag=True, help="Do not run the doctor before starting.")
@click.option("--force", is_flag=True, help="Start even when the pre-flight doctor says drain.")
@click.option(
    "--full-preflight",
    is_flag=True,
    help="Pre-flight with the doctor's timed measurements (2-3 s more); default: the quick checks (<1 s).",
)
@click.option(
    "--quick", is_flag=True, hidden=True, help="Kept for old scripts: the pre-flight is quick by default."
)
@file_option("--config", "config_path", help="watch TOML config: send interruptions through its notifiers.")
@_ledger_db
@click.option("--scenario", metavar="NAME", help="Simulated node for pre-flight and GPU watching (testing).")
@click.option(
    "--slurm-requeue/--no-slurm-requeue",
    default=True,
    show_default=True,
    help="Inside a Slurm job (SLURM_JOB_ID): after a GPU fault a restart here cannot fix, drain this "
    "node and `scontrol requeue` the job instead of restarting in place.",
)
@click.option(
    "--list-scenarios",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _p, v: _list(ctx, v),
    help="List simulated scenarios (the same as doctor and watch) and exit.",
)
@file_option(
    "--gpu-facts",
    hidden=True,
    help="Simulated GPUs from a JSON file re-read every sample (testing).",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    max_restarts: int,
    backoff: str,
    backoff_max: str,
    retry_on: str | None,
    exclude_bad_gpu: bool,
    min_gpus: int,
    checkpoint_dir: str | None,
    hang_timeout: str | None,
    gpu_fault_grace: str,
    heartbeat: str | None,
    stop_timeout: str,
    log_path: str | None,
    kernel_logs: tuple[str, ...],
    sample_interval: str,
    skip_preflight: bool,
    force: bool,
    full_preflight: bool,
    quick: bool,
    config_path: str | None,
    db_path: str | None,
    scenario: str | None,
    slurm_requeue: bool,
    gpu_facts: str | None,
    cmd: tuple[str, ...],
) -> int:
    """Run a training job and keep it alive through GPU faults: gpuclinic run [OPTIONS] -- CMD [ARGS]...

    Pre-flight doctor, output pass-through and log, GPU/kernel/hang watching, classified interruptions,
    restarts with back-off from the newest checkpoint, and a ledger for `gpuclinic report interruptions`.
    Exits with the job's exit code (128+N when a signal ended it).
    """
    from gpuclinic.supervise.classify import CLASSES, default_retry
    from gpuclinic.supervise.gpus import open_source
    from gpuclinic.supervise.jobspec import RunOptions
    from gpuclinic.supervise.runner import Supervisor

    argv = list(cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise InputError("no command given: gpuclinic run [OPTIONS] -- CMD [ARGS]...")
    classes = [c.strip() for c in (retry_on or ",".join(default_retry())).split(",") if c.strip()]
    bad = [c for c in classes if c not in CLASSES or c == "planned"]
    if bad:
        choices = ", ".join(c for c in CLASSES if c != "planned")
        raise InputError(f"--retry-on: unknown class {bad[0]!r} (choose from {choices})")
    for p in kernel_logs:
        if not Path(p).exists():
            raise InputError(f"--kernel-log: no such file: {p}")
    _check_executable(argv[0])
    if log_path:
        _check_writable("--log", Path(log_path))
    if heartbeat:
        _check_writable("--heartbeat", Path(heartbeat))
    notifier = None
    if config_path:
        if not Path(config_path).is_file():
            raise InputError(f"--config: no such file: {config_path}")
        from gpuclinic.supervise.notify import load_notifier

        notifier = load_notifier(config_path, log=_say)
    opts = RunOptions(
        cmd=argv,
        max_restarts=max_restarts,
        backoff_s=parse_duration(backoff),
        backoff_max_s=parse_duration(backoff_max),
        retry_on=frozenset(classes),
        exclude_bad_gpu=exclude_bad_gpu,
        min_gpus=min_gpus,
        checkpoint_dir=Path(checkpoint_dir).absolute() if checkpoint_dir else None,
        hang_timeout_s=parse_duration(hang_timeout) if hang_timeout else None,
        gpu_fault_grace_s=None
        if gpu_fault_grace.strip().lower() in ("off", "none", "never")
        else parse_duration(gpu_fault_grace),
        heartbeat=Path(heartbeat) if heartbeat else None,
        stop_timeout_s=parse_duration(stop_timeout),
        log_path=Path(log_path) if log_path else None,
        kernel_logs=list(kernel_logs),
        sample_interval_s=max(0.05, parse_duration(sample_interval)),
        db_path=Path(db_path) if db_path else None,
    )
    if not skip_preflight:
        _preflight(quick=not full_preflight, force=force, scenario=scenario, kernel_logs=list(kernel_logs))
    source = open_source(gpu_facts=gpu_facts, scenario=scenario)
    from gpuclinic.slurm.job import SlurmSupervisor, finish_requeue, slurm_job_from_env

    job = slurm_job_from_env()
    if job is None or not slurm_requeue:
        return Supervisor(opts, source=source, notifier=notifier, say=_say).run()
    _say(job.describe())
    sup = SlurmSupervisor(opts, job=job, source=source, notifier=notifier, say=_say)
    rc = sup.run()
    finish_requeue(sup, say=_say)
    return rc


def _check_executable(prog: str) -> None:
    """The job's program, checked before the pre-flight and the ledger: a typo is one error line
    (exit 127/126 like a shell), not a recorded interruption."""
    if os.sep in prog:
        if not os.path.exists(prog):
            raise InputError(f"cannot run {prog}: no such file", exit_code=127)
        if os.path.isdir(prog) or not os.access(prog, os.X_OK):
            raise InputError(f"cannot run {prog}: not an executable file", exit_code=126)
    elif shutil.which(prog) is None:
        raise InputError(f"cannot run {prog}: command not found in PATH", exit_code=127)


def _check_writable(opt: str, path: Path) -> None:
    """Open an explicitly named output file for append once, so that a bad path fails now."""
    existed = path.exists()
    try:
        path.absolute().parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab"):
            pass
    except OSError as e:
        raise InputError(f"{opt} {path}: cannot write ({e.strerror or e})") from None
    if not existed:
        with contextlib.suppress(OSError):
            path.unlink()


def parse_since(text: str | None, now: float) -> float | None:
    """``7d``/``12h``/``30m`` ago, or an ISO date/time."""
    if not text:
        return None
    if _DUR.match(text):
        return now - parse_duration(text)
    try:
        dt = _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise InputError(f"--since: not a duration or ISO date: {text!r}") from e
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=_dt.timezone.utc)
    return dt.timestamp()


@click.group("report")
def report() -> None:
    """Reports over the run ledger."""


@report.command("interruptions")
@click.option(
    "--since",
    metavar="WHEN",
    help="Only runs started since: 7d, 12h, 30m ago (a bare number is seconds), or an ISO date.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Markdown table for a ticket or wiki.")
@click.option(
    "--recent",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Also list this many most recent interruptions.",
)
@_ledger_db
def interruptions(
    since: str | None, as_json: bool, as_markdown: bool, recent: int, db_path: str | None
) -> int:
    """Llama-3-style table: interruptions by root cause, planned vs unexpected, MTBI and goodput."""
    import sqlite3

    from gpuclinic.store import connect
    from gpuclinic.supervise import ledger

    if as_json and as_markdown:
        raise InputError("choose one of --json and --markdown")
    now = time.time()
    since_ts = parse_since(since, now)
    if db_path and not Path(db_path).is_file():
        raise InputError(f"--db {db_path}: no such file")
    try:
        conn = connect(db_path)
        try:
            rep = ledger.interruption_report(conn, since=since_ts, now=now, recent=recent)
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise InputError(f"--db {db_path}: cannot read the run ledger: {e}") from e
    out = (
        ledger.render_json(rep)
        if as_json
        else ledger.render_markdown(rep)
        if as_markdown
        else ledger.render_text(rep)
    )
    try:
        click.echo(out, nl=not out.endswith("\n"))
    except BrokenPipeError:
        sys.stderr.close()
    return 0
