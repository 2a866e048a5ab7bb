"""Endpoint list and mirror switch lines, from ``knowledge/data/endpoints.json`` plus user config.

User config: ``$XDG_CONFIG_HOME/gpuclinic/network.toml`` (or ``GPUCLINIC_NETWORK_CONFIG``)::

    defaults = true              # false: probe only the endpoints below
    [[endpoint]]
    url = "https://pypi.internal.example/simple"
    service = "pypi"             # github | huggingface | pypi | modelscope | custom
    kind = "mirror"

``--endpoint [SERVICE=]URL`` on the command line replaces the list for one run.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuclinic.errors import InputError
from gpuclinic.facts.network import Endpoint
from gpuclinic.knowledge import load_data

SERVICES = ("github", "huggingface", "pypi", "modelscope", "custom")
_ALIASES = {"hf": "huggingface", "gh": "github", "pip": "pypi", "ms": "modelscope"}


def _endpoint_from_dict(d: dict[str, Any], *, origin: str) -> Endpoint:
    url = str(d.get("url") or "").rstrip("/")
    _check_url(url, origin)
    service = _ALIASES.get(str(d.get("service") or "custom"), str(d.get("service") or "custom"))
    if service not in SERVICES:
        raise InputError(f"{origin}: unknown service {service!r} (one of {', '.join(SERVICES)})")
    parts = urlsplit(url)
    host = parts.hostname or url
    return Endpoint(
        id=str(d.get("id") or (parts.netloc.rsplit("@", 1)[-1] if parts.port else host)),
        url=url,
        service=service,
        kind=str(d.get("kind") or ("mirror" if service != "custom" else "origin")),
        role=str(d.get("role") or "web"),
        name=str(d.get("name") or host),
        probe_path=str(d.get("probe_path") or "/"),
        throughput_path=d.get("throughput_path"),
        mirror_url=d.get("mirror_url") or (url if d.get("kind", "mirror") == "mirror" else None),
        drop_in=bool(d.get("drop_in", True)),
        third_party=bool(d.get("third_party", False)),
        notes=str(d.get("notes") or ""),
        source=str(d.get("source") or origin),
    )


def _check_url(url: str, origin: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{origin}: not an http(s) URL: {url!r}")
    try:
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as e:
        raise InputError(f"{origin}: bad port in {url!r}") from e


def default_endpoints() -> list[Endpoint]:
    data = load_data("endpoints.json")
    return [_endpoint_from_dict(d, origin="endpoints.json") for d in data["endpoints"]]


def services() -> dict[str, dict[str, Any]]:
    data = load_data("endpoints.json")
    return dict(data["services"])


def parse_endpoint_arg(arg: str) -> Endpoint:
    """``URL`` or ``SERVICE=URL`` (``hf=https://my-mirror``): a mirror of SERVICE, or a custom endpoint.

    A path after the host becomes the probed path; a large object for throughput can be given
    after ``#`` (``https://host/#/big/file.bin``).
    """
    service = "custom"
    m = re.match(r"^([a-z]+)=(.+)$", arg.strip())
    url = arg.strip()
    if m:
        service = _ALIASES.get(m.group(1), m.group(1))
        url = m.group(2)
    throughput_path = None
    if "#" in url:
        url, throughput_path = url.split("#", 1)
        if not throughput_path.startswith("/"):
            throughput_path = "/" + throughput_path
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    probe = parts.path or "/"
    if parts.query:
        probe += "?" + parts.query
    d: dict[str, Any] = {
        "url": base, "service": service, "probe_path": probe, "throughput_path": throughput_path,
        "kind": "mirror" if service != "custom" else "origin", "source": "--endpoint",
        "mirror_url": url.rstrip("/") if service != "custom" else None,
    }
    if service == "github" and d["mirror_url"]:
        d["mirror_url"] = d["mirror_url"] + "/"
    return _endpoint_from_dict(d, origin=f"--endpoint {arg}")


def config_path() -> Path:
    env = os.environ.get("GPUCLINIC_NETWORK_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuclinic" / "network.toml"


def load_endpoints(cli_args: list[str] | None = None, path: Path | None = None) -> list[Endpoint]:
    """The endpoints to probe: ``--endpoint`` values if any, else defaults plus the config file."""
    if cli_args:
        return [parse_endpoint_arg(a) for a in cli_args]
    p = path or config_path()
    eps: list[Endpoint] = []
    use_defaults = True
    extra: list[Endpoint] = []
    if p.is_file():
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib
        try:
            cfg = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise InputError(f"{p}: cannot read network config: {e}") from e
        use_defaults = bool(cfg.get("defaults", True))
        for i, d in enumerate(cfg.get("endpoint") or []):
            if not isinstance(d, dict):
                raise InputError(f"{p}: endpoint #{i + 1} is not a table")
            extra.append(_endpoint_from_dict(d, origin=str(p)))
    if use_defaults:
        eps = default_endpoints()
    known = {e.url for e in eps}
    eps.extend(e for e in extra if e.url not in known)
    return eps


def switch_lines(ep: Endpoint) -> dict[str, list[str]]:
    """Exact lines to switch a service to mirror ``ep``: ``switch`` (persistent), ``one_off``, ``undo``."""
    table = services()
    # A hub that is not a drop-in (ModelScope) has its own client: use its own lines.
    svc = table.get(ep.id) if not ep.drop_in and ep.id in table else table.get(ep.service)
    if not svc or not ep.mirror_url:
        return {"switch": [], "one_off": [], "undo": []}
    out: dict[str, list[str]] = {}
    for key in ("switch", "one_off", "undo"):
        out[key] = [line.replace("{mirror}", ep.mirror_url) for line in svc.get(key, [])]
    return out
