"""``gpuclinic net --registries``: registries and mirrors probed like a pull, the host's mirror config,
and the exact lines (plus the restart command) for the fastest working mirror.

The probing and config reading are in sources/registry.py; the registries, mirrors, config
templates and the rate-limit threshold are data (knowledge/data/registries.json).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from gpuclinic.model import Finding
from gpuclinic.sources.registry import (
    MirrorConfig,
    RegistryProbe,
    RegistrySpec,
    configured_specs,
    default_specs,
    load_registry_data,
    parse_spec,
    probe_all,
    read_mirror_config,
)

MiB = 1024 * 1024


def parse_ratelimit(value: str | None) -> tuple[int, int | None] | None:
    """``76;w=21600`` -> (76, 21600)."""
    from gpuclinic.checks.registry import remaining_pulls

    return remaining_pulls(value) if value else None


def _speed(p: RegistryProbe) -> float:
    return max(p.n_conn or 0.0, p.one_conn or 0.0)


def best_mirror(probes: list[RegistryProbe], upstream: str) -> RegistryProbe | None:
    """The fastest working mirror of ``upstream``: throughput first, then manifest latency."""
    ok = [p for p in probes if p.ok and p.mirror_of == upstream]
    if not ok:
        return None
    return max(ok, key=lambda p: (_speed(p), -(p.manifest_ms or 1e9)))


def switch_lines(mirror: RegistryProbe, upstream: str) -> list[dict[str, Any]]:
    data = load_registry_data()
    api = next((r["api"] for r in data["registries"] if r["host"] == upstream), f"https://{upstream}")
    mhost = mirror.url.split("://", 1)[1]
    out = []
    for kind, t in data["switch"].items():
        if t.get("only_for") and t["only_for"] != upstream:
            continue

        def fill(s: str) -> str:
            return (
                s.replace("{mirror}", mirror.url)
                .replace("{mirror_host}", mhost)
                .replace("{host}", upstream)
                .replace("{upstream}", api)
            )

        out.append(
            {
                "runtime": kind,
                "title": t["title"],
                "file": fill(t["file"]),
                "lines": [fill(x) for x in t["lines"]],
                "restart": t["restart"],
                "note": t.get("note", ""),
            }
        )
    return out


def specs_for(endpoints: list[str], defaults: bool) -> tuple[list[RegistrySpec], MirrorConfig]:
    """What to probe: the given ``[MIRROR_OF=]URL[#repo:tag]`` values, else the known registries and
    mirrors (when ``defaults``), plus every mirror the host's runtimes are configured with."""
    specs = [parse_spec(e) for e in endpoints] if endpoints else default_specs() if defaults else []
    mc = read_mirror_config(Path(os.environ.get("GPUCLINIC_CONFIG_ROOT", "/")), home=Path.home())
    specs += configured_specs(mc, specs)
    return specs, mc


def registry_doc(probes: list[RegistryProbe], mc: MirrorConfig) -> dict[str, Any]:
    """Probes, config and recommendations as stored under ``facts.network.extra["registries"]`` and
    read by checks/registry.py (each probe carries the registry's host, e.g. docker.io)."""
    host_of = {r["api"]: r["host"] for r in load_registry_data()["registries"]}
    recs = []
    for up in sorted({p.mirror_of for p in probes if p.mirror_of}):
        best = best_mirror(probes, up)
        if best is not None:
            recs.append({"upstream": up, "mirror": best.url, "switch": switch_lines(best, up)})
    return {
        "probes": [{**p.to_dict(), "host": host_of.get(p.url, p.url.split("://", 1)[-1])} for p in probes],
        "config": mc.to_dict(),
        "recommendations": recs,
    }


def doc_findings(doc: dict[str, Any]) -> list[Finding]:
    from gpuclinic.checks.registry import registry_findings, speed_findings

    return [*registry_findings(doc), *speed_findings(doc)]


def run_registry_probe(endpoints: list[str], as_json: bool, timeout_s: float | None, parallel: int) -> int:
    specs, mc = specs_for(endpoints, True)
    probes = probe_all(specs, timeout=min(timeout_s or 15.0, 30.0), parallel=parallel)
    doc = registry_doc(probes, mc)
    found = doc_findings(doc)
    notes = [f.title for f in found if f.severity.label != "info" or f.code.endswith("per_connection_cap")]
    if as_json:
        click.echo(
            json.dumps(
                {**doc, "findings": notes, "finding_codes": [f.code for f in found]},
                sort_keys=True,
            )
        )
    else:
        _print(probes, mc, notes, doc["recommendations"])
    if not any(p.ok for p in probes):
        return 3
    return 1 if notes else 0


def _fmt(v: float | None, unit: str = "ms") -> str:
    if v is None:
        return "-"
    return f"{v:.0f} ms" if unit == "ms" else f"{v / MiB:.1f} MiB/s"


def probe_rows(probes: list[dict[str, Any]]) -> list[str]:
    """The probe table (also the registry part of a plain ``net`` run)."""
    out = [
        f"{'registry':<22} {'DNS':>7} {'/v2/':>7} {'token':>7} {'manifest':>9} {'1st byte':>9} "
        f"{'1 conn':>11} {'N conn':>11}  status"
    ]
    for p in probes:
        status = "ok" if p.get("ok") else f"FAIL {p.get('error')}"
        rl = (p.get("ratelimit") or {}).get("ratelimit-remaining")
        if rl:
            status += f" (pulls left: {rl})"
        name = str(p["id"]) + (f" [mirror of {p['mirror_of']}]" if p.get("mirror_of") else "")
        out.append(
            f"{name[:22]:<22} {_fmt(p.get('dns_ms')):>7} {_fmt(p.get('v2_ms')):>7} "
            f"{_fmt(p.get('token_ms')):>7} "
            f"{_fmt(p.get('manifest_ms')):>9} {_fmt(p.get('blob_first_byte_ms')):>9} "
            f"{_fmt(p.get('one_conn'), 'r'):>11} {_fmt(p.get('n_conn'), 'r'):>11}  {status}"
        )
    return out


def _print(
    probes: list[RegistryProbe], mc: MirrorConfig, notes: list[str], recs: list[dict[str, Any]]
) -> None:
    for line in probe_rows([p.to_dict() for p in probes]):
        click.echo(line)
    if mc.files:
        click.echo("\nconfiguration read: " + ", ".join(mc.files))
    for up, lst in mc.mirrors.items():
        for url, where in lst:
            click.echo(f"  mirror of {up}: {url}  ({where})")
    for what, where in mc.proxies:
        click.echo(f"  proxy {what}  ({where})")
    if mc.runtime_endpoint:
        click.echo(f"  kubelet container runtime: {mc.runtime_endpoint}")
    for n in notes:
        click.echo(f"WARNING {n}")
    for r in recs:
        click.echo(f"\nfastest working mirror of {r['upstream']}: {r['mirror']}")
        for sw in r["switch"]:
            click.echo(f"  {sw['title']}: {sw['file']}" + (f"  ({sw['note']})" if sw["note"] else ""))
            for line in sw["lines"]:
                click.echo(f"      {line}")
            click.echo(f"    then: {sw['restart']}")
