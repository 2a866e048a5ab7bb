"""``gpuclinic net``: measure the path to GitHub, Hugging Face, PyPI and mirrors; name the bottleneck."""

from __future__ import annotations

import datetime as _dt
import socket
import sys

import click

from gpuclinic.checks import run_checks
from gpuclinic.checks.network import LINK_RATIO, PER_CONN_RATIO, fmt_ms, fmt_rate
from gpuclinic.cli.doctor import emit, output_format
from gpuclinic.cli.params import Seconds
from gpuclinic.diagnose import build_report
from gpuclinic.errors import InputError
from gpuclinic.facts.network import EndpointProbe, NetworkFacts
from gpuclinic.facts.snapshot import Snapshot


def probe_verdict(p: EndpointProbe) -> str:
    """One word or two for the table's last column."""
    if p.deadline_hit and not p.reachable:
        return "deadline"
    if p.dns_error:
        return "dns failed"
    if not p.connect_ms:
        return "unreachable"
    if p.tls_error:
        return "tls failed"
    if not p.reachable:
        return "no http"
    s = p.single.bytes_per_s if p.single else None
    m = p.parallel.bytes_per_s if p.parallel else None
    if s and m and m / s >= PER_CONN_RATIO:
        return "per-conn cap"
    if s and m and m / s < LINK_RATIO:
        return "link-limited"
    if p.connect_attempts and p.connect_failures:
        return "lossy"
    return "ok"


def table_rows(nf: NetworkFacts) -> list[list[str]]:
    rows = []
    for p in nf.probes:
        conn = fmt_ms(p.connect_median_ms())
        jit = p.connect_jitter_ms()
        if p.connect_ms and jit is not None and len(p.connect_ms) > 1:
            conn += f" ±{jit:.0f}"
        if p.connect_failures:
            conn += f" ({p.connect_failures}/{p.connect_attempts} failed)"
        n = p.parallel.connections if p.parallel else nf.parallel_connections
        par = fmt_rate(p.parallel.bytes_per_s) if p.parallel else "-"
        rows.append(
            [
                p.endpoint.id,
                p.host + ("" if p.port in (80, 443) else f":{p.port}"),
                p.endpoint.kind,
                fmt_ms(p.dns_ms),
                conn,
                fmt_ms(p.tls_ms),
                fmt_ms(p.ttfb_ms),
                fmt_rate(p.single.bytes_per_s) if p.single else "-",
                f"{par}" + (f" ({n})" if p.parallel else ""),
                probe_verdict(p),
            ]
        )
    return rows


HEADERS = ["Endpoint", "Host", "Kind", "DNS", "Connect", "TLS", "TTFB", "1 conn", "N conn", "Verdict"]


def _footer(nf: NetworkFacts) -> list[str]:
    out = []
    if nf.proxy and (
        nf.proxy.env or nf.proxy.hf_endpoint or nf.proxy.pip_index_url or nf.proxy.git_insteadof
    ):
        parts = [f"{k}={v}" for k, v in nf.proxy.env.items()]
        if nf.proxy.hf_endpoint:
            parts.append(f"HF_ENDPOINT={nf.proxy.hf_endpoint}")
        if nf.proxy.pip_index_url:
            parts.append(f"pip index-url={nf.proxy.pip_index_url}")
        parts += [f"git url.{b}.insteadOf={p}" for p, b in nf.proxy.git_insteadof.items()]
        out.append("config: " + "; ".join(parts))
    out.append(
        f"probed {len(nf.probes)} endpoints in {nf.elapsed_s:.1f}s"
        + (" (--quick: no throughput)" if nf.quick else "")
    )
    return out


def markdown_table(nf: NetworkFacts) -> list[str]:
    out = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table_rows(nf)]
    return out


def plain_table(nf: NetworkFacts) -> list[str]:
    rows = [HEADERS, *table_rows(nf)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    out = [""] + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out + _footer(nf)


@click.command("net")
@click.option(
    "--endpoint",
    "endpoints",
    multiple=True,
    metavar="[SERVICE=]URL",
    help="Probe this URL instead of the default list (repeatable). SERVICE (hf, github, pypi) marks it "
    "as a mirror of that service; append #/path/to/large/file to measure throughput. Container "
    "registries: registry=URL[#repo:tag], or docker.io=URL for a mirror of Docker Hub.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the versioned JSON report (probes under facts.network)."
)
@click.option("--markdown", "as_markdown", is_flag=True, help="Print a Markdown table and report.")
@click.option(
    "--timeout",
    "timeout_s",
    type=Seconds(min=1.0, max=600.0),
    metavar="S",
    help="Overall deadline in seconds (default 45, or 10 with --quick).",
)
@click.option(
    "--quick", is_flag=True, help="Latency only (DNS, connect, TLS, first byte); no throughput samples."
)
@click.option(
    "--connections",
    "parallel",
    type=click.IntRange(2, 32),
    default=4,
    show_default=True,
    help="Parallel connections for the N-connection throughput sample.",
)
@click.option(
    "--ssh",
    "ssh_host",
    metavar="HOST",
    help="Probe one SSH path instead (handshake, RTT, 1 vs 8 streams, ssh setup).",
)
@click.option("-e", "--rsh", metavar="COMMAND", help="With --ssh: the ssh command (e.g. 'ssh -p 2222').")
@click.option(
    "--download", is_flag=True, help="With --ssh: measure server -> here instead of here -> server."
)
@click.option(
    "--registries",
    is_flag=True,
    help="Only the container registries and mirrors (a plain run probes them too, beside the other "
    "endpoints), with the local mirror config and the lines that switch to the fastest mirror.",
)
def net(
    endpoints: tuple[str, ...],
    as_json: bool,
    as_markdown: bool,
    timeout_s: float | None,
    quick: bool,
    parallel: int,
    ssh_host: str | None = None,
    rsh: str | None = None,
    download: bool = False,
    registries: bool = False,
) -> int:
    """Diagnose the network path to GitHub, Hugging Face and PyPI (and mirrors): DNS, connect, TLS,
    first byte, throughput over 1 and N connections; name the bottleneck and print the lines that
    switch to the fastest working mirror.

    Exit codes: 0 healthy, 1 warning, 3 could not run, 64 usage or input error.
    """
    if ssh_host:
        from gpuclinic.cli.net_ssh import run_ssh_probe

        return run_ssh_probe(ssh_host, rsh, "pull" if download else "push", as_json)
    if registries:
        from gpuclinic.cli.net_registry import run_registry_probe

        return run_registry_probe(list(endpoints), as_json, timeout_s, parallel)
    from gpuclinic.knowledge.endpoints import load_endpoints
    from gpuclinic.sources.network import (
        config_for,
        configured_endpoints,
        probe_endpoints,
        read_proxy_settings,
    )
    from gpuclinic.sources.registry_run import RegistryRun, plan

    fmt = output_format(as_json, as_markdown)
    reg_args = [e for e in endpoints if is_registry_arg(e)]
    ep_args = [e for e in endpoints if not is_registry_arg(e)]
    eps = load_endpoints(ep_args) if ep_args or not endpoints else []
    cfg = config_for(quick, timeout_s)
    cfg.parallel = parallel
    reg_run = RegistryRun(*plan(reg_args, bool(endpoints)), cfg.deadline_s, quick, parallel)
    if not eps and not reg_run.specs:
        raise InputError("no endpoints to probe (the config file sets defaults = false and lists none)")
    proxy = read_proxy_settings()
    if not endpoints:
        eps += configured_endpoints(proxy, eps)
    reg_run.start()  # side by side with the endpoint probes, under the same deadline
    nf = probe_endpoints(eps, cfg, proxy) if eps else NetworkFacts(proxy=proxy, quick=quick)
    reg_run.finish(nf)
    snap = Snapshot(
        origin="live",
        taken_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        hostname=socket.gethostname(),
        network=nf,
    )
    snap.inputs.append("network probes")
    if quick:
        snap.skip("network throughput", "--quick: latency only, no throughput samples")
    findings, skipped = run_checks(snap, only=_network_checks())
    report = build_report(snap, findings, skipped, command="net")
    try:  # the verdict header first, then the probe table, then the findings
        if fmt == "json":
            emit(report, fmt)
        elif fmt == "markdown":
            from gpuclinic.render.markdown import render_markdown

            click.echo(render_markdown(report, prelude=markdown_table(nf) + registry_markdown(nf)))
        else:
            from gpuclinic.render.terminal import render_terminal

            render_terminal(report, prelude=plain_table(nf) + registry_table(nf))
    except BrokenPipeError:
        sys.stderr.close()
    return report.exit_code


def is_registry_arg(arg: str) -> bool:
    """``registry=URL[#repo:tag]`` (a registry) or ``docker.io=URL`` (a mirror of that registry)."""
    head, sep, _ = arg.partition("=")
    return bool(sep) and "://" not in head and (head == "registry" or "." in head)


def registry_table(nf: NetworkFacts) -> list[str]:
    from gpuclinic.cli.net_registry import probe_rows

    reg = nf.extra.get("registries")
    return ["", *probe_rows(reg["probes"])] if reg else []


def registry_markdown(nf: NetworkFacts) -> list[str]:
    from gpuclinic.cli.net_registry import probe_rows

    reg = nf.extra.get("registries")
    return ["", "```", *probe_rows(reg["probes"]), "```"] if reg else []


def _network_checks() -> list[str]:
    from gpuclinic.checks import load_all

    return [name for name, c in load_all().items() if any(code.startswith("network.") for code in c.codes)]
