"""Live collection: journalctl, dmesg and the syslog files this user can read, merged."""

from __future__ import annotations

import datetime as _dt
import lzma
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources.kernellog.parse import (
    KernelLogParser,
)
from gpuclinic.sources.kernellog.scan import (
    iter_candidate_lines,
    scan_path,
)

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions

# --------------------------------------------------------------------------------------------------
# Live collection
# --------------------------------------------------------------------------------------------------

SYSLOG_FILES = ("/var/log/kern.log", "/var/log/syslog", "/var/log/messages")
SYSLOG_TAIL_BYTES = 64 << 20
_CMD_TIMEOUT_S = 15.0


@dataclass
class _SourceResult:
    name: str
    events: list[KernelEvent] = field(default_factory=list)
    ok: bool = False
    why: str | None = None


def _run_stream(argv: list[str], name: str, timeout_s: float = _CMD_TIMEOUT_S,
                year: int | None = None) -> _SourceResult:
    """Run a log command (no shell) and parse its stdout as it streams; bounded by ``timeout_s``."""
    res = _SourceResult(name)
    exe = shutil.which(argv[0])
    if exe is None:
        res.why = f"{argv[0]} is not installed"
        return res
    try:
        proc = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"})
    except OSError as e:
        res.why = f"cannot run {argv[0]}: {e.strerror or e}"
        return res
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout_s, _kill)
    timer.start()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        parser = KernelLogParser(origin=name, year=year)
        for line in iter_candidate_lines(proc.stdout, chunk_size=1 << 20):
            res.events.extend(parser.feed(line))
        res.events.extend(parser.flush())
        err = proc.stderr.read(4000).decode("utf-8", "replace").strip()
        rc = proc.wait()
    finally:
        timer.cancel()
    if timed_out.is_set():
        res.why = f"{' '.join(argv)} did not finish within {timeout_s:.0f}s (events read so far are kept)"
        res.ok = bool(res.events)
        return res
    if rc != 0:
        first = err.splitlines()[0] if err else f"exit status {rc}"
        if "Operation not permitted" in err or "Permission denied" in err:
            if argv[0] == "dmesg":
                res.why = ("dmesg is restricted (kernel.dmesg_restrict=1) and this user is not root: "
                           f"{first}")
            else:
                res.why = f"{argv[0]}: permission denied ({first})"
        else:
            res.why = f"{' '.join(argv)} failed: {first}"
        return res
    if argv[0] == "journalctl" and not res.events:
        if "not seeing messages" in err or "insufficient permissions" in err or "No journal files" in err:
            res.why = ("this user may not read the system journal (add it to the 'systemd-journal' or 'adm' "
                       "group, or run as root)")
            return res
        if "No entries" in err:
            res.why = "the journal holds no kernel messages for this boot"
            return res
    res.ok = True
    return res


def _read_file_source(path: str, tail_bytes: int | None = None) -> _SourceResult:
    res = _SourceResult(path)
    try:
        res.events = scan_path(path, tail_bytes=tail_bytes)
        res.ok = True
    except FileNotFoundError:
        res.why = "not present"
    except PermissionError:
        res.why = f"{path} is not readable by this user (permission denied)"
    except (OSError, EOFError, lzma.LZMAError) as e:
        res.why = f"cannot read {path}: {e}"
    return res


def _event_key(ev: KernelEvent) -> tuple[Any, ...]:
    msg = ev.message or ev.line
    return (ev.kind, ev.pci_bus_id, ev.xid, msg)


def merge_sources(results: Sequence[Sequence[KernelEvent]]) -> list[KernelEvent]:
    """Merge events of several sources that may show the same kernel messages.

    For every distinct message the source that holds it most often wins (so a message seen once in
    dmesg and once in kern.log counts once, while kern.log's older history is kept).  Ties go to the
    earlier source, so list the source with the best timestamps first.
    """
    best: dict[tuple[Any, ...], tuple[int, int]] = {}  # key -> (count, source index)
    counts: list[dict[tuple[Any, ...], int]] = []
    for i, evs in enumerate(results):
        c: dict[tuple[Any, ...], int] = {}
        for ev in evs:
            k = _event_key(ev)
            c[k] = c.get(k, 0) + 1
        counts.append(c)
        for k, n in c.items():
            if k not in best or n > best[k][0]:
                best[k] = (n, i)
    out: list[KernelEvent] = []
    for i, evs in enumerate(results):
        for ev in evs:
            if best[_event_key(ev)][1] == i:
                out.append(ev)
    return out


def collect(snap: Snapshot, opts: CollectOptions) -> None:
    """Read every kernel log this user can read, plus ``opts.kernel_logs``; fill ``snap.kernel_events``."""
    year = _dt.datetime.now().year
    results: list[_SourceResult] = []
    journal = _run_stream(
        ["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"], "journalctl -k -b", year=year
    )
    results.append(journal)
    dm = _run_stream(["dmesg", "--time-format", "iso"], "dmesg", year=year)
    if not dm.ok and dm.why and ("unrecognized option" in dm.why or "invalid" in dm.why.lower()):
        dm = _run_stream(["dmesg"], "dmesg", year=year)
    results.append(dm)
    # With this boot already read from the journal or dmesg, the syslog files only add history:
    # read their recent part so a multi-GB syslog cannot slow the run down.
    tail = SYSLOG_TAIL_BYTES if (journal.ok or dm.ok) else None
    for path in SYSLOG_FILES:
        results.append(_read_file_source(path, tail))
    extra: list[_SourceResult] = []
    for path in opts.kernel_logs:
        r = _read_file_source(path)
        if r.why == "not present":
            r.why = f"{path} does not exist"
        extra.append(r)
    ok = [r for r in results + extra if r.ok]
    for r in results:
        if not r.ok and r.why and r.why != "not present":
            snap.skip(f"kernel log via {r.name}", r.why)
    for r in extra:
        if not r.ok:
            snap.skip(f"kernel log {r.name}", r.why or "unreadable")
    if not ok:
        reasons = "; ".join(f"{r.name}: {r.why}" for r in results if r.why)
        snap.skip(
            "the kernel log (Xid, AER, fallen-off-bus messages)",
            "no kernel log is readable here"
            + (f" ({reasons})" if reasons else "")
            + "; run as root, or pass a saved log with --kernel-log FILE",
        )
        return
    snap.kernel_log_read = True
    snap.kernel_log_sources.extend(r.name for r in ok)
    merged = merge_sources([r.events for r in ok])
    mark_before_boot(merged, _boot_time())
    snap.kernel_events.extend(merged)


def _boot_time() -> _dt.datetime | None:
    try:
        with open("/proc/uptime", encoding="ascii") as fh:
            up = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=up)


def mark_before_boot(events: Iterable[KernelEvent], boot: _dt.datetime | None) -> None:
    """Flag events whose absolute time is before this machine's last boot (old kern.log history)."""
    if boot is None:
        return
    for ev in events:
        if not ev.time:
            continue
        try:
            t = _dt.datetime.fromisoformat(ev.time)
        except ValueError:
            continue
        if t.tzinfo is None:
            t = t.astimezone()  # naive syslog/dmesg -T times are local
        if t < boot - _dt.timedelta(seconds=60):
            ev.detail["previous_boot"] = True
