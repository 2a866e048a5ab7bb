"""Container registries for ``gpuclinic net --registries``: probes of registries and mirrors, and the
mirror config on this host.

Why: a stalled ``docker pull`` may be DNS, TLS, the token server, the manifest, the blob CDN, a
per-connection cap, Docker Hub's rate limit, or a mirror that is configured but dead; each needs a
different fix.  The probe walks the same steps as a pull (GET /v2/, token, manifest, first blob
byte, then a few seconds of blob over 1 and N connections) and times each.  On Docker Hub only HEAD
is sent for the manifest: a GET counts as a pull.  The config readers list what Docker
(daemon.json), containerd (config.toml, certs.d/*/hosts.toml), podman/CRI-O (registries.conf) and
the kubelet are set to, so that configured mirrors are probed too.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from gpuclinic.errors import GpuclinicError
from gpuclinic.knowledge import load_data
from gpuclinic.transfer.oci import ACCEPT, Registry, _registry_error, parse_ref, select_platform
from gpuclinic.transfer.redact import redact, safe_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass
class RegistrySpec:
    id: str
    url: str  # API root, e.g. https://registry-1.docker.io
    image: str  # repo:tag to probe
    mirror_of: str | None = None  # "docker.io" for a Docker Hub mirror
    counts_pulls: bool = False
    configured_in: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc


@dataclass
class RegistryProbe:
    id: str
    url: str
    mirror_of: str | None
    configured_in: list[str]
    dns_ms: float | None = None
    v2_ms: float | None = None  # connect + TLS + first byte of GET /v2/
    token_ms: float | None = None
    manifest_ms: float | None = None
    blob_first_byte_ms: float | None = None
    one_conn: float | None = None  # bytes/s
    n_conn: float | None = None
    n: int = 0
    ratelimit: dict[str, str] = field(default_factory=dict)
    ok: bool = False
    error: str | None = None
    stage: str = ""  # where it failed

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_registry_data() -> dict[str, Any]:
    return dict(load_data("registries.json"))


def default_specs() -> list[RegistrySpec]:
    d = load_registry_data()
    out = [
        RegistrySpec(r["id"], r["api"], r["probe_image"], None, bool(r.get("counts_pulls")))
        for r in d["registries"]
    ]
    out += [RegistrySpec(m["id"], m["url"], m["probe_image"], m["mirrors"]) for m in d["mirrors"]]
    return out


def parse_spec(text: str) -> RegistrySpec:
    """``[MIRROR_OF=]URL[#repo:tag]``: a registry (or a mirror of MIRROR_OF) given on the command line."""
    mirror_of, sep, rest = text.partition("=")
    if not sep or "://" in mirror_of:
        mirror_of, rest = "", text
    url, _, image = rest.partition("#")
    if "://" not in url:
        url = "https://" + url
    p = urlsplit(url)
    if p.scheme not in ("http", "https") or not p.netloc:
        raise GpuclinicError(f"not a registry URL: {text}", exit_code=64)
    return RegistrySpec(
        p.netloc, f"{p.scheme}://{p.netloc}", image or "library/alpine:latest", mirror_of or None
    )


# ---------------------------------------------------------------------- probing
def _ms(t: float) -> float:
    return round((time.monotonic() - t) * 1000, 1)


def probe_registry(
    spec: RegistrySpec, *, timeout: float = 15.0, seconds: float = 2.0, parallel: int = 4, quick: bool = False
) -> RegistryProbe:
    pr = RegistryProbe(spec.id, spec.url, spec.mirror_of, list(spec.configured_in))
    host = urlsplit(spec.url).hostname or ""
    ref = (
        parse_ref(f"x.invalid/{spec.image}")
        if "/" in spec.image
        else parse_ref(f"x.invalid/library/{spec.image}")
    )
    repo, tag = ref.repository, ref.reference
    pr.stage = "dns"
    t = time.monotonic()
    try:
        socket.getaddrinfo(host, urlsplit(spec.url).port or 443, type=socket.SOCK_STREAM)
    except OSError as e:
        pr.error = f"DNS: {e.strerror or e}"
        return pr
    pr.dns_ms = _ms(t)
    reg = Registry(spec.host, base_url=spec.url, timeout=timeout)
    try:
        pr.stage = "v2"
        t = time.monotonic()
        try:
            r = reg.client.get(f"{spec.url}/v2/", timeout=timeout)
        except httpx.HTTPError as e:
            pr.error = f"/v2/: {_short(e)}"
            return pr
        pr.v2_ms = _ms(t)
        if r.status_code not in (200, 401):
            pr.error = f"/v2/ answered HTTP {r.status_code}"
            return pr
        pr.stage = "token"
        t = time.monotonic()
        try:
            reg.connect(repo)
        except GpuclinicError as e:
            pr.error = f"token: {e}"
            return pr
        if reg.auth:
            pr.token_ms = _ms(t)
        pr.stage = "manifest"
        t = time.monotonic()
        method = "HEAD" if spec.counts_pulls else "GET"
        r = reg.get(f"/v2/{repo}/manifests/{tag}", {"Accept": ACCEPT}, method=method)
        pr.manifest_ms = _ms(t)
        pr.ratelimit = {
            k.lower(): v
            for k, v in r.headers.items()
            if k.lower() in ("ratelimit-limit", "ratelimit-remaining", "docker-ratelimit-source")
        }
        if r.status_code != 200:
            pr.error = f"manifest: {_registry_error(r)}"
            return pr
        if spec.counts_pulls or quick:
            pr.ok = True
            return pr
        blob = _largest_blob(reg, repo, r)
        if blob is None:
            pr.ok = True
            return pr
        pr.stage = "blob"
        url = reg.blob_url(repo, blob)
        t = time.monotonic()
        with reg.client.stream("GET", url, headers={**reg.auth, "Range": "bytes=0-0"}) as br:
            if br.status_code not in (200, 206):
                pr.error = f"blob: HTTP {br.status_code}"
                return pr
            next(br.iter_raw(1), b"")
        pr.blob_first_byte_ms = _ms(t)
        pr.stage = "throughput"
        pr.one_conn = measure(reg, url, 1, seconds)
        pr.n, pr.n_conn = parallel, measure(reg, url, parallel, seconds)
        pr.ok = True
        return pr
    except httpx.HTTPError as e:
        pr.error = f"{pr.stage}: {_short(e)}"
        return pr
    except GpuclinicError as e:
        pr.error = f"{pr.stage}: {e}"
        return pr
    finally:
        reg.close()


def _short(e: BaseException) -> str:
    return redact(str(e).splitlines()[0] if str(e) else type(e).__name__)[:160]


def _largest_blob(reg: Registry, repo: str, r: httpx.Response) -> str | None:
    """The biggest layer of the manifest (following an index to linux/amd64)."""
    try:
        doc = r.json()
        if "manifests" in doc:
            entry = select_platform(doc, "linux/amd64")
            m = reg.get(f"/v2/{repo}/manifests/{entry['digest']}", {"Accept": ACCEPT})
            doc = m.json()
        layers = doc.get("layers") or []
        return str(max(layers, key=lambda d: int(d.get("size", 0)))["digest"]) if layers else None
    except (ValueError, KeyError, TypeError, GpuclinicError):
        return None


def measure(reg: Registry, url: str, conns: int, seconds: float) -> float:
    """Bytes/s of ``conns`` parallel GETs of the same blob for about ``seconds`` (each from its own
    offset)."""
    total = [0] * conns
    start = time.monotonic()

    def one(i: int) -> None:
        with (
            contextlib.suppress(httpx.HTTPError),
            reg.client.stream(
                "GET", url, headers={**reg.auth, "Range": f"bytes={i * 4 * 1024 * 1024}-"}
            ) as r,
        ):
            for chunk in r.iter_raw(65536):
                total[i] += len(chunk)
                if time.monotonic() - start > seconds:
                    break

    ths = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(conns)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(seconds + 20)
    return sum(total) / max(1e-6, time.monotonic() - start)


def probe_all(specs: list[RegistrySpec], deadline_s: float = 120.0, **kw: Any) -> list[RegistryProbe]:
    """Latency phases in parallel; throughput phases one registry at a time would be fairer but slower,
    so each registry runs its own sequence and registries run side by side.  What has not finished
    by ``deadline_s`` is reported as such (``net`` has one overall deadline)."""
    out: list[RegistryProbe | None] = [None] * len(specs)
    end = time.monotonic() + deadline_s

    def run(i: int) -> None:
        out[i] = probe_registry(specs[i], **kw)

    ths = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(specs))]
    for th in ths:
        th.start()
    for th in ths:
        th.join(max(0.0, end - time.monotonic()))
    return [
        p or RegistryProbe(s.id, s.url, s.mirror_of, s.configured_in, error="probe did not finish")
        for p, s in zip(out, specs, strict=True)
    ]


# ---------------------------------------------------------------------- configuration on this host
@dataclass
class MirrorConfig:
    files: list[str] = field(default_factory=list)  # config files found
    mirrors: dict[str, list[tuple[str, str]]] = field(
        default_factory=dict
    )  # upstream -> [(mirror URL, where)]
    proxies: list[tuple[str, str]] = field(default_factory=list)  # (what, where)
    insecure: list[tuple[str, str]] = field(default_factory=list)
    runtime_endpoint: str | None = None  # kubelet's containerRuntimeEndpoint
    problems: list[str] = field(default_factory=list)

    def add(self, upstream: str, url: str, where: str) -> None:
        lst = self.mirrors.setdefault(upstream, [])
        if (url, where) not in lst:
            lst.append((url, where))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def read_mirror_config(root: Path = Path("/"), home: Path | None = None) -> MirrorConfig:
    """Docker, containerd, podman/CRI-O and kubelet settings that decide where images come from."""
    mc = MirrorConfig()
    _read_docker(root, mc)
    _read_containerd(root, mc)
    regs = [
        root / "etc/containers/registries.conf",
        *sorted((root / "etc/containers/registries.conf.d").glob("*.conf")),
    ]
    if home is not None:
        regs.append(home / ".config/containers/registries.conf")
    for p in regs:
        _read_registries_conf(p, mc)
    kub = root / "var/lib/kubelet/config.yaml"
    with contextlib.suppress(OSError):
        m = re.search(r"^containerRuntimeEndpoint:\s*\"?([^\"\n]+)", kub.read_text(), re.M)
        mc.files.append(str(kub))
        if m:
            mc.runtime_endpoint = m.group(1).strip()
    return mc


def _read_docker(root: Path, mc: MirrorConfig) -> None:
    p = root / "etc/docker/daemon.json"
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        doc = None
    except (OSError, ValueError) as e:
        mc.problems.append(f"{p}: not valid JSON ({e}); dockerd will refuse to start")
        doc = None
    if isinstance(doc, dict):
        mc.files.append(str(p))
        for u in doc.get("registry-mirrors") or []:
            mc.add("docker.io", str(u), str(p))
        for u in doc.get("insecure-registries") or []:
            mc.insecure.append((str(u), str(p)))
        prox = doc.get("proxies") or {}
        if isinstance(prox, dict):
            for k in ("http-proxy", "https-proxy", "no-proxy"):
                if prox.get(k):
                    mc.proxies.append(
                        (f"{k}={safe_url(str(prox[k])) if '://' in str(prox[k]) else prox[k]}", str(p))
                    )
    for drop in sorted((root / "etc/systemd/system/docker.service.d").glob("*.conf")):
        with contextlib.suppress(OSError):
            for m in re.finditer(r"(HTTPS?_PROXY|NO_PROXY)=([^\s\"]+)", drop.read_text(), re.I):
                mc.proxies.append(
                    (f"{m.group(1)}={safe_url(m.group(2)) if '://' in m.group(2) else m.group(2)}", str(drop))
                )


def _read_containerd(root: Path, mc: MirrorConfig) -> None:
    p = root / "etc/containerd/config.toml"
    cert_dirs = [root / "etc/containerd/certs.d"]
    try:
        doc = tomllib.loads(p.read_text())
        mc.files.append(str(p))
    except FileNotFoundError:
        doc = {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        mc.problems.append(f"{p}: cannot parse ({e})")
        doc = {}
    plugins = doc.get("plugins") or {}
    for key in ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images"):
        reg = (plugins.get(key) or {}).get("registry") or {}
        cp = reg.get("config_path")
        if cp:
            cert_dirs.append(root / str(cp).lstrip("/"))
        for host, m in (reg.get("mirrors") or {}).items():
            for ep in m.get("endpoint") or []:
                mc.add(str(host), str(ep), f"{p} (deprecated registry.mirrors)")
            mc.problems.append(
                f"{p}: registry.mirrors is deprecated; use config_path + certs.d/{host}/hosts.toml"
            )
    for d in dict.fromkeys(cert_dirs):
        for h in sorted(d.glob("*/hosts.toml")):
            try:
                hd = tomllib.loads(h.read_text())
            except (OSError, tomllib.TOMLDecodeError) as e:
                mc.problems.append(f"{h}: cannot parse ({e})")
                continue
            mc.files.append(str(h))
            ns = h.parent.name.replace("_", ":").rstrip(":")
            for url in hd.get("host") or {}:
                mc.add("docker.io" if ns in ("docker.io", "registry-1.docker.io") else ns, str(url), str(h))


def _read_registries_conf(p: Path, mc: MirrorConfig) -> None:
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        return
    except (OSError, tomllib.TOMLDecodeError) as e:
        mc.problems.append(f"{p}: cannot parse ({e})")
        return
    mc.files.append(str(p))
    for r in doc.get("registry") or []:
        prefix = str(r.get("prefix") or r.get("location") or "")
        upstream = (
            "docker.io"
            if prefix.split("/")[0] in ("docker.io", "registry-1.docker.io")
            else prefix.split("/")[0]
        )
        for m in r.get("mirror") or []:
            loc = str(m.get("location", ""))
            if loc:
                scheme = "http" if m.get("insecure") else "https"
                mc.add(upstream, loc if "://" in loc else f"{scheme}://{loc.split('/')[0]}", str(p))
        if r.get("insecure"):
            mc.insecure.append((prefix, str(p)))


def configured_specs(mc: MirrorConfig, known: list[RegistrySpec]) -> list[RegistrySpec]:
    """Configured mirrors as probe targets (marking known ones as configured instead of adding twice)."""
    out: list[RegistrySpec] = []
    by_url = {s.url.rstrip("/"): s for s in known}
    for upstream, lst in mc.mirrors.items():
        for url, where in lst:
            u = url.rstrip("/")
            if "://" not in u:
                u = "https://" + u
            p = urlsplit(u)
            u = f"{p.scheme}://{p.netloc}"
            if u in by_url:
                by_url[u].configured_in.append(where)
                continue
            spec = RegistrySpec(p.netloc, u, "library/alpine:latest", upstream, configured_in=[where])
            by_url[u] = spec
            out.append(spec)
    return out
