"""OCI distribution client, protocol part: references, token auth, manifests, platform selection.

Why our own client: ``docker pull`` and ``skopeo copy`` fetch each layer over one TCP connection,
so a path that caps every flow (the usual case across borders) caps the whole pull.  Blobs are
plain HTTP objects with a digest, exactly what the download engine already fetches fast and
resumably; this module only does the registry protocol around them (facts and sources:
shared/research/registries.md).

* Token auth follows the ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` challenge
  (anonymous for public Docker Hub images).  nvcr.io takes ``$oauthtoken`` + ``NGC_API_KEY``;
  other registries and ``--mirror`` hosts take the ``auths`` entry of ``REGISTRY_AUTH_FILE``,
  ``~/.docker/config.json`` or podman's ``auth.json`` (a mirror also ``user:password@`` in its URL).
  Every credential and token is registered with :mod:`redact` so that it never appears in output.
* Manifests are requested with all four Accept types and verified against their digest when one
  is known; an index is resolved to the requested platform.
* Plain HTTP is used automatically only for loopback registries (as Docker does for 127.0.0.0/8),
  elsewhere only with ``insecure``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import ipaddress
import json
import os
import platform as _platform
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx

from gpuclinic import __version__
from gpuclinic.errors import EXIT_USAGE, GpuclinicError, InputError
from gpuclinic.transfer.redact import add_secret, redact, safe_url

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_NAME_RE = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class RegistryError(GpuclinicError):
    """A registry answered with an error the user must act on (one redacted line)."""

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(redact(message), exit_code=exit_code)


@dataclass(frozen=True)
class ImageRef:
    registry: str  # as the user names it: docker.io, nvcr.io, 127.0.0.1:5000
    repository: str  # library/ubuntu
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        return self.digest or self.tag or "latest"

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    def __str__(self) -> str:
        s = f"{self.registry}/{self.repository}"
        if self.tag:
            s += f":{self.tag}"
        if self.digest:
            s += f"@{self.digest}"
        return s


def parse_ref(text: str) -> ImageRef:
    """``ubuntu`` -> docker.io/library/ubuntu:latest; ``host:5000/a/b@sha256:..`` kept as is."""
    t = text.strip()
    if not t or any(c.isspace() for c in t) or "://" in t:
        raise InputError(
            f"not an image reference: {text!r} (expected [REGISTRY/]NAME[:TAG][@DIGEST])",
            exit_code=EXIT_USAGE,
        )
    digest = None
    if "@" in t:
        t, digest = t.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise InputError(f"bad digest in {text!r}: expected sha256:<64 hex>", exit_code=EXIT_USAGE)
    tag = None
    last = t.rsplit("/", 1)[-1]
    if ":" in last:
        t, tag = t.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise InputError(f"bad tag in {text!r}", exit_code=EXIT_USAGE)
    first, _, rest = t.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, repo = first, rest
    else:
        registry, repo = DOCKER_HUB, t
    if registry in ("index.docker.io", "registry-1.docker.io"):
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in repo:
        repo = f"library/{repo}"
    if not _NAME_RE.match(repo):
        raise InputError(
            f"bad repository name in {text!r} (lowercase letters, digits, . _ - and /)", exit_code=EXIT_USAGE
        )
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry, repo, tag, digest)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: the registries Docker reaches over plain HTTP by default."""
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def host_platform() -> str:
    m = _platform.machine().lower()
    arch = {
        "x86_64": "amd64",
        "amd64": "amd64",
        "aarch64": "arm64",
        "arm64": "arm64",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
    }.get(m, m)
    return f"linux/{arch}"


def parse_challenge(value: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="https://x/token?scope=a,b",service="s"`` -> ("bearer", {...}); quoted values
    may hold ``=``, ``?`` and ``,`` (nvcr.io's realm does)."""
    scheme, _, rest = value.strip().partition(" ")
    params: dict[str, str] = {}
    for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))', rest):
        params[m.group(1).lower()] = m.group(2) if m.group(2) is not None else (m.group(3) or "")
    return scheme.lower(), params


def auth_files() -> list[Path]:
    """Where runtimes keep registry logins, in the order they are consulted: ``REGISTRY_AUTH_FILE``
    (podman, skopeo), docker's ``config.json`` (``DOCKER_CONFIG``), podman's runtime ``auth.json``."""
    out = [Path(p) for p in [os.environ.get("REGISTRY_AUTH_FILE")] if p]
    out.append(Path(os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")) / "config.json")
    if os.environ.get("XDG_RUNTIME_DIR"):
        out.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    return out


def _docker_config_auth(host: str) -> str | None:
    """The base64 ``user:password`` for ``host`` from the ``auths`` of the first auth file that has it
    (docker's config.json and podman's auth.json share that format)."""
    keys = [host, f"https://{host}", f"http://{host}"]
    if host in (DOCKER_HUB, DOCKER_HUB_API):
        keys += ["https://index.docker.io/v1/", "index.docker.io", "docker.io"]
    for path in auth_files():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        auths = doc.get("auths") if isinstance(doc, dict) else None
        if not isinstance(auths, dict):
            continue
        for k in keys:
            entry = auths.get(k)
            if isinstance(entry, dict) and isinstance(entry.get("auth"), str) and entry["auth"]:
                return str(entry["auth"])
    return None


def mirror_credentials(netloc: str, username: str | None, password: str | None) -> str | None:
    """Basic credentials for a ``--mirror``: ``user:password@`` in its URL, else the auth files'
    entry for the mirror's host.  Registered as secrets: never printed, logged or stored."""
    if username:
        from urllib.parse import unquote

        pw = unquote(password or "")
        cred = base64.b64encode(f"{unquote(username)}:{pw}".encode()).decode()
        add_secret(cred)
        if pw:
            add_secret(pw)
        return cred
    return basic_credentials(netloc)


def basic_credentials(registry: str) -> str | None:
    """Base64 Basic credentials for a registry: NGC_API_KEY for nvcr.io, else docker's config.json."""
    if registry == "nvcr.io":
        key = os.environ.get("NGC_API_KEY") or os.environ.get("NGC_CLI_API_KEY")
        if key:
            add_secret(key)
            ngc = base64.b64encode(f"$oauthtoken:{key}".encode()).decode()
            add_secret(ngc)
            return ngc
    cred = _docker_config_auth(registry)
    if cred:
        add_secret(cred)
        with contextlib.suppress(ValueError, binascii.Error):
            add_secret(base64.b64decode(cred).decode().partition(":")[2])
    return cred


@dataclass
class Manifest:
    digest: str
    media_type: str
    raw: bytes
    doc: dict[str, Any]
    platform: str = ""
    index: tuple[str, str, bytes] | None = None  # (digest, media type, raw) of the index it came from
    ratelimit: dict[str, str] = field(default_factory=dict)

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.doc["config"])

    @property
    def layers(self) -> list[dict[str, Any]]:
        return list(self.doc.get("layers") or [])

    @property
    def blobs(self) -> list[dict[str, Any]]:
        return [self.config, *self.layers]


class Registry:
    """One registry endpoint (the origin or a mirror): scheme, auth, and the requests around blobs."""

    def __init__(
        self,
        host: str,
        *,
        insecure: bool = False,
        base_url: str | None = None,
        credentials: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.host = host
        self.insecure = insecure
        self.credentials = credentials
        self.plain_ok = insecure or is_loopback(urlsplit(f"//{host}").hostname or host)
        self.base = base_url.rstrip("/") if base_url else ""
        self.auth: dict[str, str] = {}  # shared with the engine's FileSpecs: refreshed in place
        self._token_exp = 0.0
        self._challenge: tuple[str, dict[str, str]] | None = None
        self._scope = ""
        self._lock = threading.Lock()
        self._reauth_lock = threading.Lock()
        self._renewed_at = 0.0
        self._renewals: list[float] = []
        self.client = httpx.Client(
            follow_redirects=True,
            trust_env=True,
            verify=not (insecure or self.plain_ok),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0)),
            headers={"User-Agent": f"gpuclinic/{__version__}"},
        )

    def close(self) -> None:
        self.client.close()

    @property
    def origin(self) -> str:
        p = urlsplit(self.base)
        return f"{p.scheme}://{p.hostname}:{p.port or (443 if p.scheme == 'https' else 80)}"

    # ------------------------------------------------------------------ connection and auth
    def connect(self, repository: str) -> None:
        """Pick the scheme (https, or http where allowed) and authenticate for pulling ``repository``."""
        self._scope = f"repository:{repository}:pull"
        if not self.base:
            last: Exception | None = None
            for scheme in ("https", "http") if self.plain_ok else ("https",):
                try:
                    r = self.client.get(f"{scheme}://{self.host}/v2/", timeout=10.0)
                except httpx.HTTPError as e:
                    last = e
                    continue
                self.base = f"{scheme}://{self.host}"
                self._handle_v2(r)
                return
            hint = "" if self.plain_ok else " (a plain-HTTP registry needs --insecure)"
            raise RegistryError(f"cannot reach registry {self.host}: {_short(last)}{hint}")
        try:
            r = self.client.get(f"{self.base}/v2/", timeout=10.0)
        except httpx.HTTPError as e:
            raise RegistryError(f"cannot reach {safe_url(self.base)}: {_short(e)}") from None
        self._handle_v2(r)

    def _handle_v2(self, r: httpx.Response) -> None:
        if r.status_code == 401:
            self._challenge = parse_challenge(r.headers.get("www-authenticate", ""))
            self.refresh_auth()
        elif r.status_code >= 500:
            raise RegistryError(f"{safe_url(self.base)}/v2/ answered HTTP {r.status_code}")

    def refresh_auth(self) -> None:
        """Get (or renew) the token for the pull scope; updates ``self.auth`` in place."""
        if self._challenge is None:
            return
        scheme, params = self._challenge
        if scheme == "basic":
            if not self.credentials:
                raise RegistryError(
                    f"{self.host} needs a login (docker login {self.host}, or ~/.docker/config.json)"
                )
            self.auth["Authorization"] = f"Basic {self.credentials}"
            return
        realm = params.get("realm", "")
        if scheme != "bearer" or not realm.startswith(("https://", "http://")):
            raise RegistryError(f"{self.host}: unsupported auth challenge {scheme!r}")
        q: dict[str, str] = {}
        if params.get("service"):
            q["service"] = params["service"]
        if "scope=" not in realm:  # nvcr.io puts the scope inside the realm already
            q["scope"] = self._scope
        url = realm + ("&" if "?" in realm else "?") + urlencode(q) if q else realm
        headers = {"Authorization": f"Basic {self.credentials}"} if self.credentials else {}
        try:
            r = self.client.get(url, headers=headers, timeout=20.0)
        except httpx.HTTPError as e:
            raise RegistryError(f"token server {safe_url(realm)}: {_short(e)}") from None
        if r.status_code in (401, 403):
            who = "with the given credentials" if self.credentials else "anonymously"
            hint = " (set NGC_API_KEY)" if self.host == "nvcr.io" and not self.credentials else ""
            raise RegistryError(f"{self.host}: unauthorized {who}{hint}", exit_code=3)
        if r.status_code != 200:
            raise RegistryError(f"token server {safe_url(realm)} answered HTTP {r.status_code}")
        try:
            doc = r.json()
            token = str(doc.get("token") or doc.get("access_token") or "")
            ttl = float(doc.get("expires_in") or 60)
        except (ValueError, AttributeError):
            token, ttl = "", 60.0
        if not token:
            raise RegistryError(f"token server {safe_url(realm)} returned no token")
        add_secret(token)
        with self._lock:
            self.auth["Authorization"] = f"Bearer {token}"
            self._token_exp = time.monotonic() + max(30.0, ttl)

    def reauth(self, url: str, challenge: str) -> bool:
        """The download engine's 401 hook for a blob request (``FileSpec.reauth``): renew the login
        from the answer's ``WWW-Authenticate`` (a token from its realm, with the same credentials as
        for the manifest) so that the ranged request can be retried.  Many connections hit an expired
        token at once: the first renews, the others within two seconds just retry.  A token server
        whose tokens die at once gets three renewals a minute; then False bans this registry as a
        source of the blob and the next source (the origin after a mirror) goes on."""
        with self._reauth_lock:
            now = time.monotonic()
            if now - self._renewed_at < 2.0:
                return True
            self._renewals = [t for t in self._renewals if now - t < 60.0]
            if len(self._renewals) >= 3:
                return False
            if challenge:
                scheme, params = parse_challenge(challenge)
                if scheme in ("bearer", "basic"):
                    self._challenge = (scheme, params)
            if self._challenge is None:
                return False
            try:
                self.refresh_auth()
            except RegistryError:
                return False
            self._renewed_at = time.monotonic()
            self._renewals.append(self._renewed_at)
            return True

    def token_seconds_left(self) -> float:
        return self._token_exp - time.monotonic() if self._token_exp else float("inf")

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> httpx.Response:
        """A request with auth; one retry after re-authenticating on 401 (an expired token)."""
        url = f"{self.base}{path}"
        for attempt in range(2):
            try:
                r = self.client.request(method, url, headers={**(headers or {}), **self.auth})
            except httpx.HTTPError as e:
                raise RegistryError(f"{safe_url(url)}: {_short(e)}") from None
            if r.status_code == 401 and attempt == 0:
                ch = r.headers.get("www-authenticate")
                if ch:
                    self._challenge = parse_challenge(ch)
                    self.refresh_auth()
                    continue
            return r
        return r

    # ------------------------------------------------------------------ manifests
    def fetch_manifest(self, repository: str, reference: str) -> tuple[bytes, str, dict[str, str]]:
        r = self.get(f"/v2/{repository}/manifests/{reference}", {"Accept": ACCEPT})
        if r.status_code != 200:
            raise RegistryError(
                f"{self.host}/{repository}:{reference}: {_registry_error(r)}",
                exit_code=EXIT_USAGE if r.status_code == 404 else 3,
            )
        ctype = r.headers.get("content-type", "").split(";")[0].strip()
        raw = r.content
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise RegistryError(
                f"{self.host}: manifest {reference[:19]}... arrived with digest {digest[:19]}... (corrupt or "
                "tampered)"
            )
        hdr = r.headers.get("docker-content-digest")
        if hdr and hdr.startswith("sha256:") and hdr != digest:
            raise RegistryError(f"{self.host}: manifest body does not match its Docker-Content-Digest header")
        rl = {
            k: v
            for k, v in r.headers.items()
            if k.lower() in ("ratelimit-limit", "ratelimit-remaining", "docker-ratelimit-source")
        }
        return raw, ctype, rl

    def blob_url(self, repository: str, digest: str) -> str:
        """The blob's URL; its credentials travel as this registry's own ``auth`` headers
        (``FileSpec.source_headers``), a Basic login or a Bearer token alike."""
        return f"{self.base}/v2/{repository}/blobs/{digest}"


def _short(e: BaseException | None) -> str:
    if e is None:
        return "no answer"
    return redact(str(e).splitlines()[0] if str(e) else type(e).__name__)[:200]


def _registry_error(r: httpx.Response) -> str:
    """``MANIFEST_UNKNOWN: manifest unknown`` from the spec's error body, else the status."""
    try:
        errs = r.json().get("errors") or []
        e = errs[0]
        return f"{e.get('code', '')}: {e.get('message', '')} (HTTP {r.status_code})".strip()
    except (ValueError, AttributeError, IndexError, KeyError):
        if r.status_code == 429:
            return "toomanyrequests (HTTP 429): pull rate limit reached"
        return f"HTTP {r.status_code}"


def _platform_of(entry: dict[str, Any]) -> str:
    p = entry.get("platform") or {}
    s = f"{p.get('os', '')}/{p.get('architecture', '')}"
    return s + (f"/{p['variant']}" if p.get("variant") else "")


def select_platform(index: dict[str, Any], want: str) -> dict[str, Any]:
    """The index entry for ``os/arch[/variant]``; arm64 without a variant matches v8."""
    entries = [e for e in index.get("manifests") or [] if isinstance(e, dict)]
    w = want.lower()
    for e in entries:
        if _platform_of(e) == w:
            return e
    for e in entries:
        got = _platform_of(e)
        if got.startswith(w + "/") or (got.count("/") == 1 and w.startswith(got + "/")):
            return e
    have = sorted({_platform_of(e) for e in entries if _platform_of(e) != "/"}) or ["none"]
    raise RegistryError(f"no image for platform {want} (available: {', '.join(have)})", exit_code=EXIT_USAGE)


def resolve(registries: list[Registry], ref: ImageRef, platform: str) -> Manifest:
    """Fetch the manifest (through the first registry that answers), following an index to ``platform``."""
    errors: list[str] = []
    for reg in registries:
        try:
            raw, ctype, rl = reg.fetch_manifest(ref.repository, ref.reference)
            doc = _json(raw, reg.host)
            ctype = ctype or str(doc.get("mediaType") or "")
            idx = None
            if ctype in INDEX_TYPES or "manifests" in doc:
                idx = ("sha256:" + hashlib.sha256(raw).hexdigest(), ctype or OCI_INDEX, raw)
                entry = select_platform(doc, platform)
                raw, ctype, _ = reg.fetch_manifest(ref.repository, str(entry["digest"]))
                doc = _json(raw, reg.host)
                ctype = ctype or str(doc.get("mediaType") or entry.get("mediaType") or OCI_MANIFEST)
            if ctype not in MANIFEST_TYPES and "layers" not in doc:
                raise RegistryError(f"{reg.host}: unsupported manifest type {ctype or 'unknown'} (schema 1?)")
            if not isinstance(doc.get("config"), dict):
                raise RegistryError(f"{reg.host}: manifest without a config")
            for d in [doc["config"], *(doc.get("layers") or [])]:
                if not _DIGEST_RE.match(str(d.get("digest", ""))) or not isinstance(d.get("size"), int):
                    raise RegistryError(f"{reg.host}: manifest has a blob without a sha256 digest and size")
            return Manifest(
                "sha256:" + hashlib.sha256(raw).hexdigest(),
                ctype or OCI_MANIFEST,
                raw,
                doc,
                platform,
                idx,
                rl,
            )
        except RegistryError as e:
            errors.append(str(e))
            if e.exit_code == EXIT_USAGE and reg is registries[-1]:
                raise
    raise RegistryError("; ".join(errors) or "no registry answered")


def _json(raw: bytes, host: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError:
        raise RegistryError(f"{host}: manifest is not JSON") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{host}: manifest is not a JSON object")
    return doc
