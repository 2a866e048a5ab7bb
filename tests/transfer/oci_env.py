"""Real components for the image tests: Debian's docker-registry on 127.0.0.1 and images pushed by skopeo.

Images are built here as OCI layouts (random layer content, so nothing compresses or dedups) and
pushed with ``skopeo copy``, exactly as a user would populate a registry.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from ports import free_port

MiB = 1024 * 1024


class Registry:
    """``docker-registry serve`` with filesystem storage in ``root``; stopped by :meth:`stop`."""

    def __init__(self, binary: str, root: Path, htpasswd: str | None = None) -> None:
        """``htpasswd``: a ``user:bcrypt-hash`` line; the registry then demands that login."""
        self.port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        cfg = root / "config.yml"
        auth = ""
        if htpasswd:
            (root / "htpasswd").write_text(htpasswd + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {root / 'htpasswd'}\n"
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
