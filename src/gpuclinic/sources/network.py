"""Network source: how the path to GitHub, Hugging Face, PyPI and their mirrors behaves, measured.

For every endpoint: DNS time, TCP connect time over several samples (median, jitter, failure rate),
TLS handshake time, time to first byte, and for endpoints with a known large object a throughput
sample over ONE connection and over SEVERAL parallel connections in the same time window.  The
ratio of the two tells a per-connection cap (parallel >> single: use parallel downloads) from a
link cap (parallel ~= single: only a closer mirror or a faster link helps).

Every step has its own timeout and the whole run has a deadline; DNS runs in a daemon thread so a
hung resolver cannot hold the process.  The resolver, connector, route check and TLS context are
injectable, so tests reach only 127.0.0.1 and simulate an offline machine without sending traffic.
Proxy settings (env, pip, git, Hugging Face) are read the way the tools read them, probes go
through an HTTP(S) CONNECT proxy when the tools would, and credentials never leave this module.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urlsplit

from gpuclinic.facts.network import Endpoint, EndpointProbe, NetworkFacts, ProxySettings
from gpuclinic.facts.snapshot import Snapshot

# the parts live in sibling modules by concern; their public names stay importable from here
from gpuclinic.sources.netprobe import (
    MIB,
    USER_AGENT,
    Addr,
    Connector,
    ProbeConfig,
    ProbeError,
    Resolver,
    _Deadline,
    default_connector,
    default_resolver,
    default_route_present,
    describe_error,
    parse_head,
    probe_latency,
)
from gpuclinic.sources.netproxy import (
    ProxyRoute,
    bypasses_proxy,
    read_git_config,
    read_proxy_settings,
    redact_url,
    route_for,
)
from gpuclinic.sources.netthroughput import _throughput_order, measure_throughput, probe_throughput

__all__ = [
    "MIB",
    "USER_AGENT",
    "Addr",
    "Connector",
    "ProbeConfig",
    "ProbeError",
    "ProxyRoute",
    "Resolver",
    "bypasses_proxy",
    "collect",
    "config_for",
    "configured_endpoints",
    "default_connector",
    "default_resolver",
    "default_route_present",
    "describe_error",
    "measure_throughput",
    "parse_head",
    "probe_endpoints",
    "probe_latency",
    "probe_throughput",
    "read_git_config",
    "read_proxy_settings",
    "redact_url",
    "route_for",
]


def probe_endpoints(
    endpoints: list[Endpoint], cfg: ProbeConfig | None = None, proxy: ProxySettings | None = None
) -> NetworkFacts:
    """Probe every endpoint (latency in parallel, throughput one endpoint at a time) within the deadline."""
    cfg = cfg or ProbeConfig()
    dl = _Deadline(cfg.deadline_s)
    t0 = time.monotonic()
    nf = NetworkFacts(
        proxy=proxy, quick=not cfg.throughput, deadline_s=cfg.deadline_s, parallel_connections=cfg.parallel
    )
    try:
        nf.default_route = cfg.route_check()
    except Exception:
        nf.default_route = None
    pool = ThreadPoolExecutor(
        max_workers=max(1, min(cfg.max_workers, len(endpoints) or 1)), thread_name_prefix="netprobe"
    )
    futs: list[tuple[Endpoint, Future[EndpointProbe]]] = [
        (ep, pool.submit(probe_latency, ep, cfg, dl)) for ep in endpoints
    ]
    probes: list[EndpointProbe] = []
    for ep, fut in futs:
        try:
            probes.append(fut.result(timeout=max(0.0, dl.left()) + 0.5))
        except Exception:
            p = urlsplit(ep.url)
            probes.append(EndpointProbe(endpoint=ep, host=p.hostname or "", deadline_hit=True))
    pool.shutdown(wait=False, cancel_futures=True)
    nf.probes = probes
    if cfg.throughput:
        # Origins first; a mirror only when the origin it stands in for is slow or unreachable.
        origin_fast: dict[str, bool] = {}
        for pr in _throughput_order([p for p in probes if p.endpoint.kind == "origin"], cfg):
            if dl.left() < cfg.window_s * 2 + 1:
                break
            probe_throughput(pr, cfg, dl)
            rate = pr.best_rate()
            if rate is not None:
                origin_fast[pr.endpoint.service] = (
                    origin_fast.get(pr.endpoint.service, False) or rate >= cfg.fast_enough_bps
                )
        for pr in _throughput_order([p for p in probes if p.endpoint.kind != "origin"], cfg):
            if origin_fast.get(pr.endpoint.service):
                continue
            if dl.left() < cfg.window_s * 2 + 1:
                break
            probe_throughput(pr, cfg, dl)
    _decide_offline(nf)
    nf.elapsed_s = time.monotonic() - t0
    return nf


def _decide_offline(nf: NetworkFacts) -> None:
    probes = [p for p in nf.probes if not p.deadline_hit]
    if not nf.probes or any(p.reachable or p.connect_ms for p in nf.probes):
        nf.offline = False
        return
    if not probes:
        nf.offline = None
        return
    if all(p.via_proxy and "SOCKS" not in p.via_proxy for p in probes):
        nf.offline = False  # the proxy is what fails: network.proxy_misconfigured says so
    elif nf.default_route is False:
        nf.offline, nf.offline_reason = True, "no default route (no network interface leads out)"
    elif all(p.dns_error for p in probes):
        nf.offline, nf.offline_reason = True, "no name resolves: " + (probes[0].dns_error or "")
    elif all(p.dns_error or p.connect_failures for p in probes):
        errs = {p.connect_error or p.dns_error for p in probes}
        nf.offline, nf.offline_reason = (
            True,
            "no host accepts connections: " + "; ".join(sorted(e for e in errs if e))[:200],
        )
    else:
        nf.offline = False


def config_for(opts_quick: bool, timeout_s: float | None = None) -> ProbeConfig:
    """Default limits: ``--quick`` measures latency only, with fewer samples."""
    if opts_quick:
        return ProbeConfig(
            deadline_s=timeout_s or 10.0,
            connect_samples=3,
            throughput=False,
            dns_timeout_s=2.0,
            connect_timeout_s=2.0,
            tls_timeout_s=3.0,
            http_timeout_s=3.0,
        )
    return ProbeConfig(deadline_s=timeout_s or 45.0)


def configured_endpoints(ps: ProxySettings, known: Iterable[Endpoint] = ()) -> list[Endpoint]:
    """Endpoints the user's tools are configured to use (HF_ENDPOINT, pip index-url, git insteadOf).

    These are probed too (kind ``configured``): a dead mirror in the config breaks every download.
    Only scheme, host and path are kept; credentials were redacted before this point.
    """
    known_urls = {e.url.rstrip("/") for e in known}
    out: list[Endpoint] = []

    def add(eid: str, service: str, url: str | None, probe: str, tput: str | None, what: str) -> None:
        if not url or "***@" in url:
            return
        p = urlsplit(url)
        if p.scheme not in ("http", "https") or not p.hostname:
            return
        base = f"{p.scheme}://{p.netloc}"
        if base in known_urls and eid != "configured:pip":
            return
        known_urls.add(base)
        out.append(
            Endpoint(
                id=eid,
                url=base,
                service=service,
                kind="configured",
                role="web",
                name=what,
                probe_path=probe,
                throughput_path=tput,
                mirror_url=url,
                source=what,
            )
        )

    if ps.hf_endpoint:
        add(
            "configured:HF_ENDPOINT",
            "huggingface",
            ps.hf_endpoint.rstrip("/"),
            "/robots.txt",
            "/openai-community/gpt2/resolve/main/model.safetensors",
            f"HF_ENDPOINT={ps.hf_endpoint}",
        )
    if ps.pip_index_url:
        path = urlsplit(ps.pip_index_url).path.rstrip("/") + "/pip/"
        add("configured:pip", "pypi", ps.pip_index_url, path, None, f"pip index-url {ps.pip_index_url}")
    for prefix, base in ps.git_insteadof.items():
        if "github.com" in prefix:
            add(f"configured:git:{base}", "github", base, "/", None, f"git url.{base}.insteadOf {prefix}")
    return out


def collect(snap: Snapshot, opts: object) -> None:
    """Live source entry point (runs only when ``CollectOptions.network`` is set, i.e. ``doctor --net``):
    the endpoints and, beside them under the same deadline, the registries a plain ``net`` probes
    (sources/registry_run.py), so both commands report the same ``network.registry_*`` findings."""
    from gpuclinic.knowledge.endpoints import load_endpoints
    from gpuclinic.sources.registry_run import RegistryRun, plan

    quick = bool(getattr(opts, "quick", False))
    proxy = read_proxy_settings()
    endpoints = load_endpoints()
    endpoints += configured_endpoints(proxy, endpoints)
    cfg = config_for(quick)
    reg_run = RegistryRun(*plan([], False), cfg.deadline_s, quick, cfg.parallel)
    reg_run.start()
    snap.network = probe_endpoints(endpoints, cfg, proxy)
    reg_run.finish(snap.network)
    if quick:
        snap.skip("network throughput", "--quick: latency only, no throughput samples")
