"""Real components for the image tests: Debian's docker-registry on 127.0.0.1 and images pushed by skopeo.

Images are built here as OCI layouts (random layer content, so nothing compresses or dedups) and
pushed with ``skopeo copy``, exactly as a user would populate a registry.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.server
import io
import json
import os
import subprocess
import tarfile
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import httpx

from ports import free_port

MiB = 1024 * 1024


class Registry:
    """``docker-registry serve`` with filesystem storage in ``root``; stopped by :meth:`stop`."""

    def __init__(
        self, binary: str, root: Path, htpasswd: str | None = None, token: TokenIssuer | None = None
    ) -> None:
        """``htpasswd``: a ``user:bcrypt-hash`` line; the registry then demands that login.
        ``token``: the registry's ``auth: token`` trusts this issuer (its realm, service, certificate)."""
        self.port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        cfg = root / "config.yml"
        auth = ""
        if htpasswd:
            (root / "htpasswd").write_text(htpasswd + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {root / 'htpasswd'}\n"
        if token:
            auth = (
                f"auth:\n  token:\n    realm: {token.realm}\n    service: {token.service}\n"
                f"    issuer: {token.issuer}\n    rootcertbundle: {token.cert}\n"
            )
        cfg.write_text(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n{auth}"
        )
        self.log = open(root / "registry.log", "wb")
        self.proc = subprocess.Popen([binary, "serve", str(cfg)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/v2/", timeout=1).status_code in (200, 401):
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"docker-registry did not start: {(root / 'registry.log').read_text()[-500:]}"
                )
            time.sleep(0.1)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class TokenIssuer:
    """A minimal token server for the registry's ``auth: token`` (the spec's "Bearer token" flow):
    it checks a Basic login and answers ``{"token": JWT}`` signed RS256 with a key made by openssl,
    whose certificate the registry trusts (``rootcertbundle``; the JWT names the key by its libtrust
    key ID).  Debian ships no token server; the registry that checks the tokens is the real one.

    ``jwt_ttl``: how long the JWT really lives (its ``exp`` is set :data:`LEEWAY` earlier, the clock
    skew the registry forgives: Debian's 2.8.2 accepts a token up to 60 s after ``exp``, measured);
    the JSON answer always claims 300 s, so a client only learns of the expiry from the registry's
    401 (as with a skewed clock or a revoked token)."""

    LEEWAY = 60

    service = "gpuclinic-test-registry"
    issuer = "gpuclinic-test-issuer"

    def __init__(self, openssl: str, root: Path, user: str, password: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.openssl, self.key, self.cert = openssl, root / "key.pem", root / "cert.pem"
        self.user, self.password = user, password
        self.jwt_ttl = 300
        self.requests: list[dict[str, object]] = []  # scope, service, login ok
        self.tokens: list[str] = []
        run = [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key), "-out",
               str(self.cert), "-days", "2", "-subj", "/CN=gpuclinic-test-token"]
        subprocess.run(run, check=True, capture_output=True, timeout=60)
        der = subprocess.run([openssl, "pkey", "-in", str(self.key), "-pubout", "-outform", "DER"],
                             check=True, capture_output=True, timeout=30).stdout
        b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
        self.kid = ":".join(b32[i : i + 4] for i in range(0, len(b32), 4))
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                want = "Basic " + base64.b64encode(f"{issuer.user}:{issuer.password}".encode()).decode()
                ok = self.headers.get("Authorization") == want
                scope, service = q.get("scope", [""])[0], q.get("service", [""])[0]
                issuer.requests.append({"scope": scope, "service": service, "login": ok})
                if not ok:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"token": issuer.sign(q.get("scope", [])), "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def sign(self, scopes: list[str]) -> str:
        access = []
        for sc in scopes:
            for one in sc.split(" "):
                kind, _, rest = one.partition(":")
                name, _, actions = rest.rpartition(":")
                if kind == "repository" and name:
                    access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        exp = now + self.jwt_ttl - self.LEEWAY
        claims = {"iss": self.issuer, "sub": self.user, "aud": self.service, "exp": exp, "nbf": now - 5,
                  "iat": now, "jti": os.urandom(8).hex(), "access": access}
        header = {"typ": "JWT", "alg": "RS256", "kid": self.kid}
        raw = ".".join(_b64url(json.dumps(x).encode()) for x in (header, claims))
        sig = subprocess.run([self.openssl, "dgst", "-sha256", "-sign", str(self.key)], input=raw.encode(),
                             check=True, capture_output=True, timeout=30).stdout
        token = raw + "." + _b64url(sig)
        self.tokens.append(token)
        return token

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


@dataclass
class Built:
    manifest_digest: str
    blobs: dict[str, int]  # digest -> size (config and layers)
    layers: list[str]


def _put_blob(layout: Path, data: bytes) -> tuple[str, int]:
    h = hashlib.sha256(data).hexdigest()
    d = layout / "blobs" / "sha256"
    d.mkdir(parents=True, exist_ok=True)
    (d / h).write_bytes(data)
    return "sha256:" + h, len(data)


def _layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1700000000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _image(layout: Path, arch: str, layer_sizes: list[int], seed: int) -> tuple[dict[str, object], Built]:
    layers = []
    diff_ids = []
    blobs: dict[str, int] = {}
    for i, size in enumerate(layer_sizes):
        tar = _layer({f"data/{arch}-{i}.bin": os.urandom(size) if size > 4096 else bytes([seed + i]) * size})
        # gzip level 1 ourselves: skopeo keeps a compressed layer as is (it would gzip a plain tar at
        # its default level, seconds of CPU for 200 MiB)
        data = gzip.compress(tar, compresslevel=1, mtime=0)
        dg, n = _put_blob(layout, data)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": dg, "size": n})
        diff_ids.append("sha256:" + hashlib.sha256(tar).hexdigest())
        blobs[dg] = n
    cfg = {
        "architecture": arch,
        "os": "linux",
        "config": {"Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "created": "2026-01-01T00:00:00Z",
    }
    cdg, cn = _put_blob(layout, json.dumps(cfg).encode())
    blobs[cdg] = cn
    man = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdg, "size": cn},
        "layers": layers,
    }
    raw = json.dumps(man).encode()
    mdg, mn = _put_blob(layout, raw)
    desc: dict[str, object] = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": mdg,
        "size": mn,
        "platform": {"architecture": arch, "os": "linux"},
    }
    return desc, Built(mdg, blobs, [str(x["digest"]) for x in layers])


def build_image(layout: Path, layer_sizes: list[int], arch: str = "amd64") -> Built:
    """A single-platform OCI layout tagged ``latest``."""
    desc, built = _image(layout, arch, layer_sizes, 1)
    desc["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    return built


def build_multiarch(layout: Path) -> dict[str, Built]:
    """An OCI layout whose ``latest`` is an image index of linux/amd64 and linux/arm64."""
    out: dict[str, Built] = {}
    descs = []
    for seed, arch in enumerate(("amd64", "arm64")):
        desc, built = _image(layout, arch, [3000 + seed, 5000], 10 * seed)
        descs.append(desc)
        out[arch] = built
    idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": descs}
    idg, idn = _put_blob(layout, json.dumps(idx).encode())
    top = {
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": idg,
        "size": idn,
        "annotations": {"org.opencontainers.image.ref.name": "latest"},
    }
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return out


def push(
    skopeo: str, layout: Path, dest: str, *, all_platforms: bool = False, creds: str | None = None
) -> None:
    cmd = [skopeo, "copy", "--dest-tls-verify=false", "-q"]
    if creds:
        cmd.append(f"--dest-creds={creds}")
    if all_platforms:
        cmd.append("--all")
    cmd += [f"oci:{layout}:latest", f"docker://{dest}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 22):
            h.update(b)
    return "sha256:" + h.hexdigest()
