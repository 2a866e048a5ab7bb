"""Network checks: name the bottleneck on the path to GitHub, Hugging Face and PyPI, and the fix.

They run only on snapshots that carry network probes (``doctor --net``, ``gpuclinic net``, or a
capture that had them); without probes they stay silent rather than printing "could not check".
When the machine is offline only ``network.offline`` speaks: every other finding would be noise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpuclinic.checks import _netpaste, check
from gpuclinic.checks._netpaste import net_threshold
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Family, Finding

if TYPE_CHECKING:  # annotations only: the module loads (and registers its checks) without them
    from gpuclinic.facts.network import Endpoint, EndpointProbe, NetworkFacts


# Imported on use: knowledge.endpoints pulls in pathlib/urllib, a visible share of every doctor run's
# startup, while these checks only speak on snapshots that carry network probes.
def services() -> dict[str, dict[str, Any]]:
    from gpuclinic.knowledge.endpoints import services as _services

    return _services()


def switch_lines(ep: Endpoint) -> dict[str, list[str]]:
    from gpuclinic.knowledge.endpoints import switch_lines as _switch_lines

    return _switch_lines(ep)

NET = Family.NETWORK
DNS_SLOW_MS = 300.0
DNS_VERY_SLOW_MS = 1000.0
JITTER_MS = 50.0
PER_CONN_RATIO = 2.0  # N connections at least this much faster than one: per-connection cap
LINK_RATIO = 1.5  # below this the link (not the connection) is the limit
FAST_SINGLE_BPS = 50e6
MIRROR_GAIN = 1.5


def fmt_rate(bps: float | None) -> str:
    if bps is None:
        return "-"
    if bps >= 1e9:
        return f"{bps / 1e9:.2f} GB/s"
    if bps >= 1e6:
        return f"{bps / 1e6:.1f} MB/s"
    return f"{bps / 1e3:.0f} kB/s"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def _facts(snap: Snapshot) -> NetworkFacts | None:
    nf = snap.network
    if nf is None or not nf.probes:
        return None
    return nf


def _pasted(snap: Snapshot) -> list[dict[str, Any]]:
    """Figures read from a pasted ping/mtr/iperf3/transfer meter (sources/net_paste.py)."""
    return list(snap.network.extra.get("pasted", [])) if snap.network is not None else []


def _live(nf: NetworkFacts) -> Iterator[EndpointProbe]:
    """Probes that count: origins and what the user configured (mirrors are only candidates)."""
    for p in nf.probes:
        if p.endpoint.kind in ("origin", "configured") and not p.deadline_hit:
            yield p


def _label(p: EndpointProbe) -> str:
    return p.host or p.endpoint.url


def _title(service: str) -> str:
    if service == "custom":
        return "Custom endpoints"
    return str(services().get(service, {}).get("title", service))


@check("network.offline", codes=["network.offline"], what="network reachability")
def offline(snap: Snapshot) -> Iterator[Finding]:
    nf = _facts(snap)
    if nf is None or not nf.offline:
        return
    ev = [f"{_label(p)}: {p.error() or 'no answer'}" for p in nf.probes[:6]]
    if nf.default_route is False:
        ev.insert(0, "no default route in /proc/net/route or /proc/net/ipv6_route")
    if nf.proxy and nf.proxy.env:
        ev.append("proxy settings: " + ", ".join(f"{k}={v}" for k, v in nf.proxy.env.items()))
    yield finding(
        "network.offline",
        title=f"No route to the internet: {nf.offline_reason or 'nothing answers'}",
        evidence=ev,
        data={"reason": nf.offline_reason, "default_route": nf.default_route},
    )


@check("network.dns", codes=["network.dns_failed", "network.dns_slow"], what="DNS resolution")
def dns(snap: Snapshot) -> Iterator[Finding]:
    nf = _facts(snap)
    if nf is None or nf.offline:
        return
    probes = list(_live(nf))
    failed = [p for p in probes if p.dns_error]
    if failed:
        yield finding(
            "network.dns_failed",
            title=f"DNS does not resolve {len(failed)} host(s) the download tools need: "
            + ", ".join(_label(p) for p in failed[:4]),
            evidence=[f"{_label(p)}: {p.dns_error}" for p in failed],
            data={"hosts": [_label(p) for p in failed]},
        )
    times = sorted(p.dns_ms for p in probes if p.dns_ms is not None)
    if times:
        med = times[len(times) // 2]
        if med >= DNS_SLOW_MS:
            yield finding(
                "network.dns_slow",
                when="very_slow" if med >= DNS_VERY_SLOW_MS else None,
                title=f"DNS lookups are slow: median {med:.0f} ms over {len(times)} hosts",
                evidence=[f"{_label(p)}: {fmt_ms(p.dns_ms)}" for p in probes if p.dns_ms is not None][:8],
                data={"median_ms": med},
            )


@check(
    "network.reachability",
    codes=["network.endpoint_unreachable", "network.tls_failed", "network.configured_mirror_down"],
    what="endpoint reachability",
)
def reachability(snap: Snapshot) -> Iterator[Finding]:
    nf = _facts(snap)
    if nf is None or nf.offline:
        return
    probes = [p for p in _live(nf) if not p.dns_error]
    tls = [p for p in probes if p.tls_error]
    if tls:
        verify = [p for p in tls if "certificate verify failed" in (p.tls_error or "")]
        yield finding(
            "network.tls_failed",
            title=(
                f"TLS certificate checks fail for {len(tls)} host(s): something intercepts HTTPS or the "
                "clock is wrong"
                if verify
                else f"TLS handshake fails for {len(tls)} host(s)"
            ),
            evidence=[f"{_label(p)}: {p.tls_error}" for p in tls],
            data={"hosts": [_label(p) for p in tls]},
        )
    down = [p for p in probes if not p.tls_error and not p.reachable]
    conf = [p for p in down if p.endpoint.kind == "configured"]
    for p in conf:
        yield finding(
            "network.configured_mirror_down",
            title=f"{p.endpoint.name} points at a host that does not answer",
            evidence=[f"{_label(p)}: {p.error() or 'no answer'}"],
            remedy=_configured_undo(p.endpoint.id, p.endpoint.mirror_url or p.endpoint.url),
            data={"endpoint": p.endpoint.id},
        )
    origins = [p for p in down if p.endpoint.kind == "origin"]
    by_service: dict[str, list[EndpointProbe]] = {}
    for p in origins:
        by_service.setdefault(p.endpoint.service, []).append(p)
    for svc, ps in by_service.items():
        mirror = _best_mirror(nf, svc)
        remedy = (
            f"Allow these hosts through the firewall/proxy: {', '.join(_label(p) for p in ps)}."
            if mirror is None
            else f"{mirror.endpoint.name} answers: see network.mirror_faster for the lines that switch to it."
        )
        yield finding(
            "network.endpoint_unreachable",
            title=f"{_title(svc)}: {len(ps)} host(s) unreachable ("
            + ", ".join(_label(p) for p in ps[:4])
            + ")",
            evidence=[f"{_label(p)} ({p.endpoint.name}): {p.error() or 'no answer'}" for p in ps],
            remedy=remedy,
            data={"service": svc, "hosts": [_label(p) for p in ps]},
        )


def _configured_undo(eid: str, url: str) -> str:
    if eid == "configured:HF_ENDPOINT":
        return "unset HF_ENDPOINT (or set it to a mirror that answers; `gpuclinic net` lists them)"
    if eid == "configured:pip":
        return "pip config unset global.index-url   (and unset PIP_INDEX_URL) — or set a mirror that answers"
    return f'git config --global --unset-all url."{url}".insteadOf'


@check("network.latency", codes=["network.high_latency", "network.lossy"], what="latency and loss")
def latency(snap: Snapshot) -> Iterator[Finding]:
    yield from _netpaste.latency(_pasted(snap))
    nf = _facts(snap)
    if nf is None or nf.offline:
        return
    probes = [p for p in _live(nf) if p.connect_ms]
    high = [p for p in probes if (p.connect_median_ms() or 0) >= net_threshold("high_latency_ms")]
    if high:
        yield finding(
            "network.high_latency",
            title=f"High round-trip time to {len(high)} host(s): up to "
                  f"{max(p.connect_median_ms() or 0 for p in high):.0f} ms",
            evidence=[
                f"{_label(p)}: TCP connect median {fmt_ms(p.connect_median_ms())} over {len(p.connect_ms)} "
                "samples"
                + (f" (to proxy {p.via_proxy})" if p.via_proxy else "")
                + (f", TTFB {fmt_ms(p.ttfb_ms)}" if p.ttfb_ms is not None else "")
                for p in high
            ],
            data={"hosts": {_label(p): p.connect_median_ms() for p in high}},
        )
    lossy: list[str] = []
    for p in [p for p in _live(nf) if p.connect_attempts]:
        fr = p.failure_rate() or 0.0
        jit = p.connect_jitter_ms() or 0.0
        med = p.connect_median_ms() or 0.0
        if 0 < fr < 1:
            lossy.append(
                f"{_label(p)}: {p.connect_failures}/{p.connect_attempts} connects failed ({p.connect_error})"
            )
        elif p.connect_ms and jit >= JITTER_MS and jit >= 0.5 * med:
            lossy.append(f"{_label(p)}: connect {fmt_ms(med)} ± {jit:.0f} ms jitter")
    if lossy:
        yield finding(
            "network.lossy",
            title="Unstable path: some connections fail or vary widely in time",
            evidence=lossy,
            data={"count": len(lossy)},
        )


@check("network.throughput", codes=["network.per_connection_cap", "network.slow_link"], what="throughput")
def throughput(snap: Snapshot) -> Iterator[Finding]:
    yield from _netpaste.throughput(_pasted(snap))
    nf = _facts(snap)
    if nf is None or nf.offline:
        return
    capped: list[tuple[EndpointProbe, float, float, float]] = []
    slow: list[tuple[EndpointProbe, float, float]] = []
    live = list(_live(nf))
    for p in nf.probes:
        if p.deadline_hit:
            continue
        s = p.single.bytes_per_s if p.single else None
        m = p.parallel.bytes_per_s if p.parallel else None
        if not s:
            continue
        if m and m / s >= PER_CONN_RATIO:
            capped.append((p, s, m, m / s))
        elif (
            p in live
            and max(s, m or 0) < net_threshold("slow_link_bps")
            and (m is None or m / s < LINK_RATIO)
        ):
            slow.append((p, s, m or s))
    if capped and not any(c[0] in live for c in capped):
        # only mirror candidates are capped: not the user's path, but the table flags them, so the
        # report says so (info) instead of "No problems found" under a "per-conn cap" row
        yield finding(
            "network.per_connection_cap",
            title="Mirror candidate(s) cap each TCP connection (not in use): "
                  f"{', '.join(_label(c[0]) for c in capped)}",
            evidence=[
                f"{_label(p)}: 1 connection {fmt_rate(s)}, {p.parallel.connections if p.parallel else ''} "
                f"connections {fmt_rate(m)} ({r:.1f}x)"
                for p, s, m, r in capped
            ],
            data={
                "hosts": {
                    _label(p): {"single_bps": s, "parallel_bps": m, "ratio": r} for p, s, m, r in capped
                },
                "in_use": False,
            },
        )
        capped = []
    capped = [c for c in capped if c[0] in live]
    if capped:
        worst_single = min(c[1] for c in capped)
        n = capped[0][0].parallel.connections if capped[0][0].parallel else nf.parallel_connections
        yield finding(
            "network.per_connection_cap",
            when="slow_single" if worst_single < FAST_SINGLE_BPS else None,
            title=(
                f"Each TCP connection is capped (~{fmt_rate(worst_single)} per connection): "
                f"{n} connections were {max(c[3] for c in capped):.1f}x faster than one"
            ),
            evidence=[
                f"{_label(p)}: 1 connection {fmt_rate(s)}, {p.parallel.connections if p.parallel else n} "
                "connections "
                f"{fmt_rate(m)} ({r:.1f}x)"
                for p, s, m, r in capped
            ],
            data={
                "hosts": {
                    _label(p): {"single_bps": s, "parallel_bps": m, "ratio": r} for p, s, m, r in capped
                }
            },
        )
    if slow:
        yield finding(
            "network.slow_link",
            title=f"The link itself is slow (~{fmt_rate(max(x[2] for x in slow))}); more connections do not "
                  "help",
            evidence=[f"{_label(p)}: 1 connection {fmt_rate(s)}, several {fmt_rate(m)}" for p, s, m in slow],
            data={"hosts": {_label(p): {"single_bps": s, "parallel_bps": m} for p, s, m in slow}},
        )


def _score(p: EndpointProbe) -> tuple[float, float]:
    """Higher is better: measured rate first, then lower connect time."""
    return (p.best_rate() or 0.0, -(p.connect_median_ms() or 1e9))


def _best_mirror(nf: NetworkFacts, service: str, drop_in: bool = True) -> EndpointProbe | None:
    cands = [
        p
        for p in nf.probes
        if p.endpoint.kind == "mirror"
        and p.endpoint.service == service
        and p.endpoint.drop_in == drop_in
        and p.reachable
        and (p.http_status or 0) < 500
        and not p.deadline_hit
    ]
    return max(cands, key=_score) if cands else None


def _in_use(nf: NetworkFacts, p: EndpointProbe) -> bool:
    ps = nf.proxy
    if ps is None or not p.endpoint.mirror_url:
        return False
    url = p.endpoint.mirror_url.rstrip("/")
    used = [ps.hf_endpoint, ps.pip_index_url, *ps.git_insteadof.values()]
    return any(u and u.rstrip("/") == url for u in used)


@check("network.mirrors", codes=["network.mirror_faster"], what="mirror choice")
def mirrors(snap: Snapshot) -> Iterator[Finding]:
    nf = _facts(snap)
    if nf is None or nf.offline:
        return
    for svc in ("huggingface", "github", "pypi"):
        origins = [
            p
            for p in nf.probes
            if p.endpoint.kind == "origin" and p.endpoint.service == svc and not p.deadline_hit
        ]
        if not origins:
            continue
        best = _best_mirror(nf, svc)
        if best is None or _in_use(nf, best):
            continue
        primary = [p for p in origins if p.endpoint.role in ("web", "index")] or origins
        origin_down = not any(p.reachable for p in primary)
        origin_rate = max((p.best_rate() or 0.0 for p in origins), default=0.0)
        mirror_rate = best.best_rate()
        faster = bool(mirror_rate and origin_rate and mirror_rate >= MIRROR_GAIN * origin_rate)
        if not (origin_down or faster):
            continue
        lines = switch_lines(best.endpoint)
        why = (
            f"{_title(svc)} does not answer here ({primary[0].error() or 'no answer'}) but "
            f"{best.endpoint.name} does"
            if origin_down
            else f"{best.endpoint.name} is {mirror_rate / origin_rate:.1f}x faster than {_title(svc)}"  # type: ignore[operator]
            f" ({fmt_rate(mirror_rate)} vs {fmt_rate(origin_rate)})"
        )
        ev = [
            f"{_label(p)}: connect {fmt_ms(p.connect_median_ms())}, best {fmt_rate(p.best_rate())}"
            + (f" ({p.error()})" if p.error() else "")
            for p in origins[:4]
        ]
        ev.append(
            f"{_label(best)} (mirror): connect {fmt_ms(best.connect_median_ms())}, best "
            f"{fmt_rate(mirror_rate)}"
        )
        remedy = [
            "Persistent:",
            *[f"  {x}" for x in lines["switch"]],
            "One command only:",
            *[f"  {x}" for x in lines["one_off"]],
        ]
        if lines["undo"]:
            remedy += ["Undo:", *[f"  {x}" for x in lines["undo"]]]
        if best.endpoint.third_party:
            remedy.append(
                "This is a third-party service: use it for public content only; never send tokens through it."
            )
        alt = _best_mirror(nf, svc, drop_in=False)
        if alt is not None:
            alt_lines = switch_lines(alt.endpoint)
            remedy.append(
                f"Alternative ({alt.endpoint.name}, not a drop-in): "
                + "; ".join(alt_lines["switch"] + alt_lines["one_off"])
            )
        much = origin_down or (mirror_rate and origin_rate and mirror_rate >= 3 * origin_rate)
        yield finding(
            "network.mirror_faster",
            when="much_faster" if much else None,
            title=f"Switch {_title(svc)} to {best.endpoint.name}: {why}",
            evidence=ev,
            remedy="\n".join(remedy),
            data={
                "service": svc,
                "mirror": best.endpoint.id,
                "mirror_url": best.endpoint.mirror_url,
                "origin_bps": origin_rate or None,
                "mirror_bps": mirror_rate,
                "lines": lines,
            },
        )


@check("network.proxy", codes=["network.proxy_misconfigured"], what="proxy settings")
def proxy(snap: Snapshot) -> Iterator[Finding]:
    nf = _facts(snap)
    if nf is None:
        return
    ev: list[str] = []
    ps = nf.proxy
    if ps is not None:
        ev.extend(ps.problems)
    via = [p for p in nf.probes if p.via_proxy and "SOCKS" not in (p.via_proxy or "") and not p.deadline_hit]
    failing = [p for p in via if not p.reachable]
    if via and len(failing) == len(via):
        errs = sorted({p.error() or "no answer" for p in failing})
        ev.insert(0, f"every endpoint fails through proxy {via[0].via_proxy}: " + "; ".join(errs)[:300])
    elif failing and any((p.http_error or "").startswith("proxy") for p in failing):
        ev.extend(
            f"{_label(p)} via {p.via_proxy}: {p.error()}"
            for p in failing
            if (p.http_error or "").startswith("proxy")
        )
    if not ev:
        return
    yield finding(
        "network.proxy_misconfigured",
        title="Proxy settings are broken or inconsistent",
        evidence=ev,
        data={"problems": ev},
    )


def _major(version: str | None) -> int | None:
    try:
        return int((version or "").split(".")[0])
    except ValueError:
        return None


@check(
    "network.hf_config",
    codes=["network.hf_transfer_ignored", "network.xet_bypasses_mirror"],
    what="Hugging Face download settings",
)
def hf_config(snap: Snapshot) -> Iterator[Finding]:
    """Settings that look like they help but do not (sources: research notes sections 1.5 and 1.6)."""
    nf = snap.network
    ps = nf.proxy if nf is not None else None
    if ps is None:
        return
    major = _major(ps.hf_hub_version)
    if (
        ps.hf_hub_enable_hf_transfer
        and ps.hf_hub_enable_hf_transfer not in ("0", "false", "False")
        and major is not None
        and major >= 1
    ):
        yield finding(
            "network.hf_transfer_ignored",
            title=f"HF_HUB_ENABLE_HF_TRANSFER is set, but huggingface_hub {ps.hf_hub_version} ignores it",
            evidence=[
                f"HF_HUB_ENABLE_HF_TRANSFER={ps.hf_hub_enable_hf_transfer}",
                f"huggingface_hub {ps.hf_hub_version} (hf_transfer support ended in 1.0)",
            ],
            source="huggingface_hub constants.py (1.0+: 'hf_transfer is not used anymore'); "
            "https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables",
        )
    if (
        ps.hf_endpoint
        and "huggingface.co" not in ps.hf_endpoint
        and ps.hf_hub_disable_xet not in ("1", "true", "True", "YES", "yes")
    ):
        yield finding(
            "network.xet_bypasses_mirror",
            title=f"HF_ENDPOINT={ps.hf_endpoint} is set, but Xet transfers can still go to huggingface.co's "
                  "CAS hosts",
            evidence=[f"HF_ENDPOINT={ps.hf_endpoint}", "HF_HUB_DISABLE_XET is not set"],
            source="https://github.com/padeoe/hf-mirror-site/issues/50 ; "
                   "https://github.com/padeoe/hf-mirror-site/issues/64 ; "
            "https://github.com/huggingface/huggingface_hub/issues/4475",
        )
