"""Sources -> snapshot.  Runs every live source; one that cannot read records why and the rest go on.

Each live source is a module under :mod:`gpuclinic.sources` exposing
``collect(snap: Snapshot, opts: CollectOptions) -> None`` that fills its part of the snapshot.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.facts.snapshot import Snapshot

# (module, what it checks) in the order they run.  NVML first: later sources use its bus ids.
LIVE_SOURCES: tuple[tuple[str, str], ...] = (
    ("nvml", "GPUs through NVML"),
    ("pci", "PCI devices in sysfs"),
    ("kernellog.collect", "the kernel log"),
    ("software", "driver and framework software"),
    ("container", "container and Kubernetes GPU setup"),
    ("host", "host CPU, memory and I/O"),
    ("network", "network paths"),
    ("bmc", "the server room through the BMC and hwmon"),
)


@dataclass
class CollectOptions:
    """What the user asked for; sources read only the fields they care about."""

    quick: bool = False  # skip timed measurements (host window, network)
    deep: bool = False  # allow slow reads (importing frameworks)
    network: bool = False  # probe network endpoints
    kernel_logs: list[str] = field(default_factory=list)  # extra log files to scan
    host_window_s: float = 2.0
    expect_gpus: int | None = None
    sources: Sequence[str] | None = None  # restrict to these module names
    nvml_timeout_s: float = 10.0
    bmc: Any = None  # sources.bmc.live.BmcOptions: --bmc/--redfish targets (None: in-band and hwmon only)


def collect_live(opts: CollectOptions | None = None) -> Snapshot:
    """Read this machine now."""
    opts = opts or CollectOptions()
    snap = Snapshot(
        origin="live",
        taken_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        hostname=socket.gethostname(),
        expect_gpus=opts.expect_gpus,
    )
    for name, what in LIVE_SOURCES:
        if opts.sources is not None and name not in opts.sources:
            continue
        if name == "network" and not opts.network:
            continue
        run_source(snap, name, what, opts)
    return snap


def run_source(snap: Snapshot, name: str, what: str, opts: CollectOptions) -> None:
    """Run one source module, converting any failure into a skipped line."""
    t0 = time.monotonic()
    mod = importlib.import_module(f"gpuclinic.sources.{name}")  # our own module: an ImportError is a bug
    fn = getattr(mod, "collect", None)
    if fn is None:
        snap.skip(what, "source not available")
        return
    try:
        fn(snap, opts)
    except Exception as e:  # a source must never crash the run
        snap.skip(what, f"{type(e).__name__}: {e}")
    snap.notes.append(f"source {name}: {time.monotonic() - t0:.3f}s")
