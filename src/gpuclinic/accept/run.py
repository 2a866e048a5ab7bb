"""The accept run: facts -> health -> host -> network -> GPU workload and burn -> dcgmi -> scorecard.

Why this order: cheap read-only checks first, so a node that is already sick is reported even
if the user stops the run; the GPU load comes last but one (dcgmi diag loads GPUs too) and only
on GPUs nobody else is using.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuclinic.accept import host as hostm
from gpuclinic.accept.burn import BurnMonitor, score_burn, simulate
from gpuclinic.accept.checks import dcgm_items, health_item, network_items
from gpuclinic.accept.model import Item, Scorecard, skipped
from gpuclinic.accept.runner import Child, ChildResult, drive, resolve_python
from gpuclinic.accept.score import Measurements, score_cpu_device, score_gpu_perf
from gpuclinic.accept.specs import match_spec, mode_settings
from gpuclinic.diagnose import diagnose
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot

if TYPE_CHECKING:
    from gpuclinic.sources.nvml import NvmlReader

GPU_TESTS = ("matmul", "hbm", "pcie", "p2p", "allreduce")


@dataclass
class AcceptOptions:
    mode: str = "standard"  # quick | standard | full
    scenario: str | None = None
    python: str | None = None  # default: this interpreter
    device: str = "cuda"  # cuda | cpu (the workload's code path on the CPU, for tests)
    backend: str = "auto"
    force: bool = False
    burn_s: float | None = None  # None: the mode's default
    data_dir: str | None = None
    net_endpoints: list[str] = field(default_factory=list)
    progress: Callable[[str], None] | None = None


def _say(opts: AcceptOptions, msg: str) -> None:
    if opts.progress:
        opts.progress(msg)


def busy_gpus(gpus: list[GpuFacts]) -> dict[int, str]:
    """GPU index -> why it must not be loaded: compute processes that are not this run's."""
    me = os.getpid()
    out: dict[int, str] = {}
    for g in gpus:
        procs = [p for p in g.processes if p.pid != me]
        if procs:
            desc = ", ".join(f"pid {p.pid} {p.name or '?'}" for p in procs[:3]) + (
                " ..." if len(procs) > 3 else ""
            )
            out[g.index] = (
                f"GPU {g.index} is running other processes ({desc}); not loading it without --force"
            )
    return out


def facts(opts: AcceptOptions) -> Snapshot:
    if opts.scenario:
        from gpuclinic.sources.scenarios import load_scenario

        return load_scenario(opts.scenario)
    from gpuclinic.collect import CollectOptions, collect_live

    return collect_live(
        CollectOptions(
            quick=opts.mode == "quick", sources=["nvml", "pci", "kernel_log", "software", "container", "host"]
        )
    )


def run_accept(opts: AcceptOptions) -> Scorecard:
    t_start = time.monotonic()
    ms = mode_settings(opts.mode)
    python = resolve_python(opts.python) if opts.python else sys.executable
    sc = Scorecard(
        mode=opts.mode,
        origin="scenario" if opts.scenario else "live",
        scenario=opts.scenario,
        device=opts.device,
        python=python,
        started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    _say(opts, "reading the node (doctor)...")
    snap = facts(opts)
    sc.hostname = snap.hostname or socket.gethostname()
    gpus = [g for g in snap.gpus]
    for g in gpus:
        sp = match_spec(g.name)
        sc.gpus.append(
            {
                "index": g.index,
                "name": g.name,
                "pci_bus_id": g.pci_bus_id,
                "sku": sp.sku if sp else None,
                "spec_source": sp.source if sp else None,
            }
        )
    report = diagnose(snap, command="accept")
    health = [health_item(report)]
    busy = {} if opts.force else busy_gpus([g for g in gpus if not g.lost])
    if opts.force and busy_gpus(gpus):
        sc.notes.append("--force: loading GPUs that run other processes")
    host_items = _host(opts, snap, gpus, ms)
    net_items = _network(opts, ms)
    gpu_items, burn_items, interrupted = _gpu(opts, sc, python, gpus, busy, ms)
    dcgm: list[Item]
    if interrupted:
        dcgm = [skipped("dcgm", "dcgmi diag", "dcgm", "interrupted (Ctrl-C)")]
    elif opts.scenario:
        dcgm = [skipped("dcgm", "dcgmi diag", "dcgm", "simulated node: dcgmi not run")]
    elif busy:
        dcgm = [
            skipped(
                "dcgm", "dcgmi diag", "dcgm", "GPUs run other processes; not loading them without --force"
            )
        ]
    else:
        _say(opts, f"dcgmi diag -r {ms['dcgm_level']} (when installed)...")
        dcgm = dcgm_items(int(ms["dcgm_level"]))
    sc.items = health + net_items + gpu_items + burn_items + host_items + dcgm
    if interrupted:
        sc.notes.append("interrupted by Ctrl-C: the workload was stopped; partial scorecard")
    sc.elapsed_s = round(time.monotonic() - t_start, 1)
    return sc


def _host(opts: AcceptOptions, snap: Snapshot, gpus: list[GpuFacts], ms: dict[str, object]) -> list[Item]:
    h = snap.host
    items = [
        hostm.score_cpu(h, len(gpus), None if opts.scenario else hostm.cpu_model()),
        hostm.score_ram(h, gpus),
    ]
    if opts.scenario:
        why = "simulated node: not measured"
        items += [
            hostm.score_memcpy(None, why),
            skipped("host.disk.seq", "dataset disk sequential read", "host", why, None, "MB/s"),
            skipped("host.shm", "/dev/shm size", "host", why, None, "GiB"),
        ]
    else:
        _say(opts, "host: memory copy, dataset disk, /dev/shm...")
        items.append(hostm.score_memcpy(hostm.memcpy_gbs(128 if opts.mode == "quick" else 256)))
        d = opts.data_dir or os.getcwd()
        try:
            res = hostm.measure_disk(d, int(str(ms["disk_mb"])))
        except OSError as e:
            res = hostm.DiskResult(error=f"could not write a temp file in {d}: {e.strerror or e}")
        items += hostm.score_disk(res, d)
        items.append(hostm.score_shm(hostm.shm_bytes()))
    items.append(hostm.score_numa(h, gpus))
    return items


def _network(opts: AcceptOptions, ms: dict[str, object]) -> list[Item]:
    if opts.scenario:
        return [skipped("network", "network paths", "network", "simulated node: no probes")]
    if not ms["network"] and not opts.net_endpoints:
        return [
            skipped(
                "network",
                "network paths",
                "network",
                "--quick: not probed (run `gpuclinic net`, or accept without --quick)",
            )
        ]
    from gpuclinic.checks import run_checks
    from gpuclinic.cli.net import _network_checks
    from gpuclinic.diagnose import build_report
    from gpuclinic.knowledge.endpoints import load_endpoints
    from gpuclinic.sources.network import (
        config_for,
        configured_endpoints,
        probe_endpoints,
        read_proxy_settings,
    )

    _say(opts, "network: probing Hugging Face, GitHub, PyPI...")
    eps = load_endpoints(list(opts.net_endpoints))
    proxy = read_proxy_settings()
    if not opts.net_endpoints:
        eps += configured_endpoints(proxy, eps)
    nf = probe_endpoints(eps, config_for(opts.mode != "full"), proxy)
    snap = Snapshot(origin="live", network=nf)
    findings, skipped_ = run_checks(snap, only=_network_checks())
    return network_items(nf, build_report(snap, findings, skipped_, command="net"))


def _child_args(opts: AcceptOptions, ms: dict[str, object], burn_s: float) -> list[str]:
    cpu = opts.device == "cpu"
    return [
        "--device",
        opts.device,
        "--backend",
        opts.backend,
        "--tests",
        ",".join(GPU_TESTS),
        "--dtypes",
        "bf16,fp16,tf32,fp8" if not cpu else "bf16,fp32",
        "--matmul-n",
        str(256 if cpu else ms["matmul_n"]),
        "--matmul-s",
        str(0.3 if cpu else ms["matmul_s"]),
        "--mb",
        str(32 if cpu else ms["hbm_mb"]),
        "--p2p",
        str(ms["p2p"]),
        "--burn",
        f"{burn_s:g}",
    ]


def _busy_skips(sc: Scorecard, gpus: list[GpuFacts], busy: dict[int, str]) -> list[dict[str, Any]]:
    """Skips for GPUs that run other processes (and for the peer tests, which need them all)."""
    busy_skips: list[dict[str, Any]] = [
        {"test": t, "gpu": str(g.index), "why": busy[g.index]}
        for g in gpus
        if g.index in busy
        for t in ("matmul", "hbm", "pcie")
    ]
    if busy:
        busy_skips += [
            {
                "test": t,
                "gpu": None,
                "why": "some GPUs run other processes; peer tests need them all "
                "(stop those jobs or use --force)",
            }
            for t in ("p2p", "allreduce")
        ]
        sc.notes.append(
            f"GPU(s) {', '.join(str(i) for i in sorted(busy))} run other processes: not loaded, their "
            "measurements are skipped (stop those jobs, or --force)"
        )
    return busy_skips


def _absorb_child(sc: Scorecard, res: ChildResult) -> None:
    """The workload child's backend, errors and burn stop into the scorecard; missing tests as skips."""
    sc.backend = (sc.backend + "; workload: " if sc.backend else "") + (
        res.backend or f"none ({res.nobackend or res.error})"
    )
    if res.error:
        sc.notes.append(res.error)
    if res.stopped:
        sc.burn_stopped = res.stopped
    if res.backend is None:
        why = f"no GPU backend: {res.nobackend}" if res.nobackend else str(res.error)
        res.m.skips += [{"test": t, "gpu": None, "why": why} for t in GPU_TESTS]
    elif res.error:
        res.m.skips += [{"test": t, "gpu": None, "why": res.error} for t in GPU_TESTS]


def _gpu(
    opts: AcceptOptions,
    sc: Scorecard,
    python: str,
    gpus: list[GpuFacts],
    busy: dict[int, str],
    ms: dict[str, object],
) -> tuple[list[Item], list[Item], bool]:
    burn_s = float(opts.burn_s if opts.burn_s is not None else float(str(ms["burn_s"])))
    usable = [g for g in gpus if not g.lost and g.index not in busy]
    labels = {g.index: str(g.index) for g in usable}
    monitor = BurnMonitor(labels, {str(g.index): g for g in usable})
    m = Measurements()
    items: list[Item] = []
    interrupted = False
    sampler: Callable[[float], list[GpuFacts]] | None = None
    reader: NvmlReader | None = None
    if opts.scenario:
        from gpuclinic.accept.simulate import ScenarioBurn, measurements

        sim_m = measurements(usable)
        sb = ScenarioBurn(usable)
        sc.backend = "simulated from the scenario's NVML facts"

        def sim_sampler(t: float) -> list[GpuFacts]:
            out = sb.sample(t)
            for s in out:
                v = sb.tflops(next(g for g in usable if g.index == s.index), s)
                if v is not None and t > 0:
                    monitor.on_tflops(str(s.index), t, v)
            return out

        sampler = sim_sampler

        m = sim_m
        if opts.device != "cpu" and usable and burn_s > 0:
            _say(opts, f"burn: {burn_s:g} s simulated...")
            simulate(monitor, sim_sampler, lambda i, s: None, burn_s)
    elif opts.device == "cuda" and usable:
        reader = _nvml_reader()
        if reader is not None:
            sampler = lambda t: reader.sample()  # noqa: E731
        elif burn_s > 0:
            burn_s = 0  # never burn blind: without NVML nothing would stop an overheating GPU
            sc.notes.append("NVML could not be opened for the burn's temperature watch: burn skipped")
    busy_skips = _busy_skips(sc, gpus, busy)
    m.skips[:0] = busy_skips
    res: ChildResult | None = None
    if opts.device == "cpu" or (not opts.scenario and usable):
        try:
            res = _run_child(opts, python, usable, ms, burn_s, monitor, sampler, busy)
        finally:
            if reader is not None:
                reader.close()
        interrupted = res.interrupted
        _absorb_child(sc, res)
        if opts.device == "cpu":
            items += score_cpu_device(res.m)
        else:
            m = res.m
            m.skips[:0] = busy_skips
    elif not gpus:
        why = "no GPUs visible to NVML" + (
            " (try --device cpu to test the workload path)" if not opts.scenario else ""
        )
        return (
            [skipped("gpu", "GPU performance", "gpu", why)],
            [skipped("burn", "sustained burn", "burn", why)],
            False,
        )
    if gpus and not (opts.device == "cpu" and not opts.scenario):
        items = score_gpu_perf(gpus, m) + items
    elif opts.device == "cpu" and gpus and not opts.scenario:
        items.append(skipped("gpu", "GPU performance", "gpu", "--device cpu: the GPUs were not measured"))
    sc.burn_stopped = sc.burn_stopped or monitor.stopped
    burn_items = _burn_items(opts, sc, ms, burn_s, monitor, usable, busy, interrupted)
    return items, burn_items, interrupted


def _burn_items(
    opts: AcceptOptions,
    sc: Scorecard,
    ms: dict[str, object],
    burn_s: float,
    monitor: BurnMonitor,
    usable: list[GpuFacts],
    busy: dict[int, str],
    interrupted: bool,
) -> list[Item]:
    """The burn's scorecard lines: why it did not run, or its score."""
    if burn_s <= 0:
        why = (
            "--burn 0: no burn"
            if (opts.burn_s == 0 or float(str(ms["burn_s"])) == 0)
            else "no NVML to watch temperatures during a burn"
        )
        return [skipped("burn", "sustained burn", "burn", why)]
    elif not monitor.series and not usable:
        return [
            skipped("burn", "sustained burn", "burn", "no GPU could be loaded" if busy else "no GPUs")
        ]
    else:
        sc.burn = [s for s in monitor.series.values() if s.t or s.tflops]
        return score_burn(sc.burn, burn_s, sc.burn_stopped, monitor.stopped_gpu, interrupted)


def _nvml_reader() -> NvmlReader | None:
    """NVML for the burn's 1 Hz samples (read-only calls, each time-boxed)."""
    from gpuclinic.sources.nvml import NvmlReader

    reader = NvmlReader(call_timeout_s=2.0)
    try:
        reader.open()
    except Exception:
        reader.close()
        return None
    return reader


def _run_child(
    opts: AcceptOptions,
    python: str,
    usable: list[GpuFacts],
    ms: dict[str, object],
    burn_s: float,
    monitor: BurnMonitor,
    sampler: Callable[[float], list[GpuFacts]] | None,
    busy: dict[int, str],
) -> ChildResult:
    env = dict(os.environ)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's default order is fastest-first, not NVML's
    if opts.device == "cuda" and (busy or "CUDA_VISIBLE_DEVICES" not in env):
        # only the GPUs nobody else uses: by UUID, else by NVML index (= CUDA index in PCI order)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid or str(g.index) for g in usable)
    args = _child_args(opts, ms, burn_s)
    n = max(1, len(usable))
    per_gpu = 8 * float(str(ms["matmul_s"])) + 20
    deadline = per_gpu * n + (n * n if ms["p2p"] == "all" else n) * float(str(ms["matmul_s"])) + burn_s + 180
    _say(opts, f"workload: {python} {' '.join(args)}")
    child = Child(python, args, env)
    res = ChildResult()
    nvml = [(g.index, g.pci_bus_id, g.uuid) for g in usable]
    if opts.device == "cpu":
        monitor.labels = {g.index: str(g.index) for g in usable}
    return drive(child, res, nvml, opts.device, monitor, sampler, deadline, opts.progress)
