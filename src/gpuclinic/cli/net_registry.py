"""``gpuclinic net --registries``: registries and mirrors probed like a pull, the host's mirror config,
and the exact lines (plus the restart command) for the fastest working mirror.

The probing and config reading are in sources/registry.py; the registries, mirrors, config
templates and the rate-limit threshold are data (knowledge/data/registries.json).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import click

from gpuclinic.sources.registry import (
    MirrorConfig,
    RegistryProbe,
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
    if not value:
        return None
    m = re.match(r"\s*(\d+)(?:\s*;\s*w=(\d+))?", value)
    return (int(m.group(1)), int(m.group(2)) if m.group(2) else None) if m else None


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


def findings(probes: list[RegistryProbe], mc: MirrorConfig) -> list[str]:
    data = load_registry_data()
    warn_below = int(data["thresholds"]["ratelimit_remaining_warn"])
    out = list(mc.problems)
    for p in probes:
        if not p.ok and p.configured_in:
            out.append(
                f"configured mirror {p.url} (in {', '.join(sorted(set(p.configured_in)))}) does not work: "
                f"{p.error}"
            )
        rl = parse_ratelimit(p.ratelimit.get("ratelimit-remaining"))
        if rl is not None and rl[0] < warn_below:
            window = f" per {rl[1] // 3600} h" if rl[1] else ""
            out.append(
                f"{p.id}: only {rl[0]} pulls left{window} for this address (ratelimit-remaining); "
                "`docker login`, or pull through a mirror"
            )
        if p.ok and p.one_conn and p.n_conn and p.n_conn > 2 * p.one_conn:
            out.append(
                f"{p.id}: one connection gets {p.one_conn / MiB:.1f} MiB/s, {p.n} get {p.n_conn / MiB:.1f} "
                "MiB/s: "
                "per-connection cap; `gpuclinic get image` uses many connections per layer"
            )
    return out


def run_registry_probe(endpoints: list[str], as_json: bool, timeout_s: float | None, parallel: int) -> int:
    specs = [parse_spec(e) for e in endpoints] if endpoints else default_specs()
    mc = read_mirror_config(Path(os.environ.get("GPUCLINIC_CONFIG_ROOT", "/")), home=Path.home())
    specs += configured_specs(mc, specs)
    probes = probe_all(specs, timeout=min(timeout_s or 15.0, 30.0), parallel=parallel)
    notes = findings(probes, mc)
    upstreams = sorted({p.mirror_of for p in probes if p.mirror_of})
    recs = []
    for up in upstreams:
        best = best_mirror(probes, up)
        if best is not None:
            recs.append({"upstream": up, "mirror": best.url, "switch": switch_lines(best, up)})
    if as_json:
        click.echo(
            json.dumps(
                {
                    "probes": [p.to_dict() for p in probes],
                    "config": mc.to_dict(),
                    "findings": notes,
                    "recommendations": recs,
                },
                sort_keys=True,
            )
        )
    else:
        _print(probes, mc, notes, recs)
    if not any(p.ok for p in probes):
        return 3
    return 1 if notes else 0


def _fmt(v: float | None, unit: str = "ms") -> str:
    if v is None:
        return "-"
    return f"{v:.0f} ms" if unit == "ms" else f"{v / MiB:.1f} MiB/s"


def _print(
    probes: list[RegistryProbe], mc: MirrorConfig, notes: list[str], recs: list[dict[str, Any]]
) -> None:
    click.echo(
        f"{'registry':<22} {'DNS':>7} {'/v2/':>7} {'token':>7} {'manifest':>9} {'1st byte':>9} "
        f"{'1 conn':>11} {'N conn':>11}  status"
    )
    for p in probes:
        status = "ok" if p.ok else f"FAIL {p.error}"
        rl = p.ratelimit.get("ratelimit-remaining")
        if rl:
            status += f" (pulls left: {rl})"
        name = p.id + (f" [mirror of {p.mirror_of}]" if p.mirror_of else "")
        click.echo(
            f"{name[:22]:<22} {_fmt(p.dns_ms):>7} {_fmt(p.v2_ms):>7} {_fmt(p.token_ms):>7} "
            f"{_fmt(p.manifest_ms):>9} "
            f"{_fmt(p.blob_first_byte_ms):>9} {_fmt(p.one_conn, 'r'):>11} {_fmt(p.n_conn, 'r'):>11}  {status}"
        )
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
