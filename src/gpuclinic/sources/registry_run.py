"""The registry part of a network run, shared by ``gpuclinic net`` and ``doctor --net``.

Why one module: both commands must probe the same registries (the known ones, the ``[[registry]]``
entries of the network config, and every mirror this host's runtimes are configured with), under the
same deadline, and store the same document under ``facts.network.extra["registries"]`` that
checks/registry.py turns into ``network.registry_*`` findings.  ``net --registries`` prints the same
document as a table.  Probing and config reading are in sources/registry.py; the registries, mirrors,
switch templates and thresholds are data (knowledge/data/registries.json).

Network config (``network.toml``, see knowledge/endpoints.py)::

    registries = true            # the known registries (default: the value of ``defaults``)
    [[registry]]
    url = "https://harbor.corp.example"
    image = "library/alpine:latest"   # repo:tag to probe (optional)
    mirror_of = "docker.io"           # when it is a mirror (optional)
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from gpuclinic.errors import InputError
from gpuclinic.facts.network import NetworkFacts
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


def config_registries() -> tuple[bool, list[str]]:
    """(probe the known registries?, the config's ``[[registry]]`` entries as ``[MIRROR_OF=]URL[#IMAGE]``)."""
    from gpuclinic.knowledge.endpoints import config_path

    p = config_path()
    if not p.is_file():
        return True, []
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        cfg = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{p}: cannot read network config: {e}") from e
    extra: list[str] = []
    for i, d in enumerate(cfg.get("registry") or []):
        if not isinstance(d, dict) or not isinstance(d.get("url"), str) or not d["url"]:
            raise InputError(f"{p}: registry #{i + 1} needs a url")
        s = d["url"].rstrip("/") + (f"#{d['image']}" if d.get("image") else "")
        extra.append(f"{d['mirror_of']}={s}" if d.get("mirror_of") else s)
    return bool(cfg.get("registries", cfg.get("defaults", True))), extra


def specs_for(endpoints: list[str], defaults: bool) -> tuple[list[RegistrySpec], MirrorConfig]:
    """The given ``[MIRROR_OF=]URL[#repo:tag]`` values, plus the known registries and mirrors when
    ``defaults``, plus every mirror the host's runtimes are configured with."""
    specs = [parse_spec(e) for e in endpoints]
    if defaults:
        known = {s.url for s in specs}
        specs += [s for s in default_specs() if s.url not in known]
    mc = read_mirror_config(Path(os.environ.get("GPUCLINIC_CONFIG_ROOT", "/")), home=Path.home())
    specs += configured_specs(mc, specs)
    return specs, mc


def plan(cli_args: list[str], endpoints_given: bool) -> tuple[list[RegistrySpec], MirrorConfig | None]:
    """What a network run probes: the ``registry=``/``docker.io=`` arguments alone when given; nothing
    when ``--endpoint`` narrowed the run to other endpoints; else what the network config says."""
    if cli_args:
        return specs_for([a.removeprefix("registry=") for a in cli_args], False)
    if endpoints_given:
        return [], None
    want, extra = config_registries()
    if not want and not extra:
        return [], None
    return specs_for(extra, want)


def _speed(p: RegistryProbe) -> float:
    return max(p.n_conn or 0.0, p.one_conn or 0.0)


def best_mirror(probes: list[RegistryProbe], upstream: str) -> RegistryProbe | None:
    """The fastest working mirror of ``upstream``: throughput first, then manifest latency."""
    ok = [p for p in probes if p.ok and p.mirror_of == upstream]
    if not ok:
        return None
    return max(ok, key=lambda p: (_speed(p), -(p.manifest_ms or 1e9)))


def switch_lines(mirror: RegistryProbe, upstream: str) -> list[dict[str, Any]]:
    """The config lines (and restart command) per runtime that make ``mirror`` serve ``upstream``."""
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


class RegistryRun:
    """The registry probes of a network run, in a thread beside the endpoint probes (same deadline)."""

    def __init__(
        self,
        specs: list[RegistrySpec],
        mc: MirrorConfig | None,
        deadline_s: float,
        quick: bool,
        parallel: int,
    ) -> None:
        self.specs: list[RegistrySpec] = specs if mc is not None else []
        self.mc: MirrorConfig | None = mc
        self.deadline_s, self.quick, self.parallel = deadline_s, quick, parallel
        self.probes: list[RegistryProbe] = []
        self.thread = threading.Thread(target=self._run, name="gpuclinic-registries", daemon=True)

    def _run(self) -> None:
        self.probes = probe_all(
            self.specs,
            deadline_s=self.deadline_s,
            timeout=min(self.deadline_s, 15.0),
            parallel=self.parallel,
            quick=self.quick,
        )

    def start(self) -> None:
        if self.specs:
            self.thread.start()

    def finish(self, nf: NetworkFacts) -> None:
        """Wait for the probes (bounded by the deadline) and store their document in ``nf``."""
        if not self.specs or self.mc is None:
            return
        self.thread.join(self.deadline_s + 5)
        nf.extra["registries"] = registry_doc(self.probes, self.mc)
