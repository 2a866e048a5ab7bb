"""``gpuclinic net --registries``: registries and mirrors probed like a pull, the host's mirror config,
and the exact lines (plus the restart command) for the fastest working mirror.

The probing and config reading are in sources/registry.py, what to probe and the stored document
in sources/registry_run.py (shared with a plain ``net`` and ``doctor --net``); the registries,
mirrors, config templates and the rate-limit threshold are data (knowledge/data/registries.json).
"""

from __future__ import annotations

import json
from typing import Any

import click

from gpuclinic.model import Finding
from gpuclinic.sources.registry import MirrorConfig, RegistryProbe, probe_all
from gpuclinic.sources.registry_run import (
    best_mirror,
    config_registries,
    registry_doc,
    specs_for,
    switch_lines,
)

__all__ = [
    "best_mirror",
    "doc_findings",
    "parse_ratelimit",
    "probe_rows",
    "run_registry_probe",
    "switch_lines",
]

MiB = 1024 * 1024


def parse_ratelimit(value: str | None) -> tuple[int, int | None] | None:
    """``76;w=21600`` -> (76, 21600)."""
    from gpuclinic.checks.registry import remaining_pulls

    return remaining_pulls(value) if value else None


def doc_findings(doc: dict[str, Any]) -> list[Finding]:
    from gpuclinic.checks.registry import registry_findings, speed_findings

    return [*registry_findings(doc), *speed_findings(doc)]


def run_registry_probe(endpoints: list[str], as_json: bool, timeout_s: float | None, parallel: int) -> int:
    # the given registries alone, else the known ones and the network config's; plus configured mirrors
    specs, mc = specs_for(endpoints, False) if endpoints else specs_for(config_registries()[1], True)
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
