"""``gpuclinic get image``: pull an image with the download engine and write an OCI layout or a
docker-archive.

Why: the engine already does what a slow, shaped, flaky path needs (many ranged connections per
blob, resume across processes from ``.gpuclinic-state``, sha256 verification, failover between
sources that blames the one serving wrong bytes).  A blob is an HTTP object named by its digest, so
each one becomes a :class:`FileSpec` whose sources are the mirrors first and the origin last (the
order Docker and containerd use) and whose sha256 is the digest.  Blobs land directly in
``DIR/blobs/sha256/<hex>``; a blob already there with the right digest is reused, which also makes a
rerun after an interruption, or a second tag sharing base layers, cheap.

The OCI layout (``oci-layout``, ``index.json``, ``blobs/``) is what skopeo and podman read; the
docker-archive (``manifest.json`` + config + layer files in one tar) is what ``docker load`` reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuclinic.errors import EXIT_USAGE, GpuclinicError, InputError
from gpuclinic.transfer.engine import DownloadError, Engine, EngineOptions, FileSpec, human
from gpuclinic.transfer.oci import (
    DOCKER_HUB,
    ImageRef,
    Manifest,
    Registry,
    RegistryError,
    basic_credentials,
    is_loopback,
    mirror_credentials,
    parse_ref,
    resolve,
)
from gpuclinic.transfer.progress import ProgressDisplay
from gpuclinic.transfer.redact import safe_url

REF_ANNOTATION = "org.opencontainers.image.ref.name"


@dataclass
class PullResult:
    ref: str
    digest: str
    platform: str
    output: str
    format: str
    size: int
    downloaded: int
    reused: int
    seconds: float
    blobs: list[dict[str, Any]] = field(default_factory=list)
    ratelimit: dict[str, str] = field(default_factory=dict)
    loaded_into: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _mirror_registry(url: str, insecure: bool) -> Registry:
    text = url if "://" in url else f"https://{url}"
    try:
        p = urlsplit(text)
        host = p.hostname or ""
        port = p.port
    except ValueError:
        host, port = "", None
    if p.scheme not in ("http", "https") or not host or (p.path not in ("", "/")) or p.query:
        raise InputError(
            f"--mirror must be a registry root URL like https://mirror.example.com: {safe_url(url)}",
            exit_code=EXIT_USAGE,
        )
    if p.scheme == "http" and not (insecure or is_loopback(host)):
        raise InputError(
            f"--mirror {safe_url(url)} is plain HTTP on a non-loopback host; add --insecure to allow it",
            exit_code=EXIT_USAGE,
        )
    netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    creds = mirror_credentials(netloc, p.username, p.password)
    return Registry(netloc, insecure=insecure, base_url=f"{p.scheme}://{netloc}", credentials=creds)


def blob_cache() -> Path | None:
    """Where docker-archive pulls keep their blobs between runs, so a second pull (another tag sharing
    the CUDA base layers, or the same image again) downloads only what is new: ``GPUCLINIC_BLOB_CACHE``
    (empty: no cache), else ``$XDG_CACHE_HOME/gpuclinic/oci``.  None when it cannot be created."""
    env = os.environ.get("GPUCLINIC_BLOB_CACHE")
    if env == "":
        return None
    root = (
        Path(env)
        if env
        else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuclinic" / "oci"
    )
    try:
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return root


def default_output(ref: ImageRef, fmt: str) -> Path:
    name = ref.repository.rsplit("/", 1)[-1] + "_" + (ref.tag or (ref.digest or "")[7:19])
    return Path.cwd() / (name + (".tar" if fmt == "docker-archive" else ""))


def _file_ok(path: Path, size: int, hexdigest: str) -> bool:
    try:
        if not path.is_file() or path.stat().st_size != size:
            return False
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while b := f.read(1 << 22):
                h.update(b)
        return h.hexdigest() == hexdigest
    except OSError:
        return False


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def pull(  # noqa: C901  (split pending, issue 14)
    ref_text: str,
    *,
    output: str | None = None,
    fmt: str = "oci",
    platform: str | None = None,
    mirrors: tuple[str, ...] = (),
    insecure: bool = False,
    load: bool = False,
    options: EngineOptions | None = None,
    quiet: bool = False,
) -> PullResult:
    """Pull ``ref_text`` into ``output``; raises a one-line error on failure (partial blobs are kept)."""
    from gpuclinic.transfer.oci import host_platform

    t0 = time.monotonic()
    ref = parse_ref(ref_text)
    want = (platform or host_platform()).lower()
    if want.count("/") not in (1, 2):
        raise InputError(
            f"--platform must be OS/ARCH[/VARIANT], e.g. linux/amd64: {platform!r}", exit_code=EXIT_USAGE
        )
    mirror_regs = [_mirror_registry(m, insecure) for m in mirrors]
    origin = Registry(ref.api_host, insecure=insecure, credentials=basic_credentials(ref.registry))
    out = Path(output).absolute() if output else default_output(ref, fmt)
    if fmt == "oci":
        if out.exists() and not out.is_dir():
            raise InputError(
                f"{out} exists and is not a directory (an OCI layout is a directory)", exit_code=EXIT_USAGE
            )
        layout = out
    else:
        if out.is_dir():
            raise InputError(
                f"{out} is a directory; docker-archive output is a .tar file", exit_code=EXIT_USAGE
            )
        layout = blob_cache() or out.with_name(out.name + ".blobs")
    if not layout.parent.is_dir():
        raise InputError(f"directory does not exist: {layout.parent}", exit_code=EXIT_USAGE)
    live: list[Registry] = []
    notes: list[str] = []
    try:
        for m in mirror_regs:
            try:
                m.connect(ref.repository)
                live.append(m)
            except RegistryError as e:
                notes.append(f"mirror skipped: {e}")
        try:
            origin.connect(ref.repository)
            live.append(origin)
        except RegistryError:
            if not live:
                raise
            notes.append(f"origin {ref.api_host} unreachable; using mirrors only")
        manifest = resolve(live, ref, want)
        if not quiet:
            for n in notes:
                print(f"gpuclinic: {n}", flush=True)
        blobdir = layout / "blobs" / "sha256"
        blobdir.mkdir(parents=True, exist_ok=True)
        specs: list[FileSpec] = []
        blobs: list[dict[str, Any]] = []
        reused = 0
        seen: set[str] = set()
        for d in manifest.blobs:
            digest, size = str(d["digest"]), int(d["size"])
            if digest in seen:
                continue
            seen.add(digest)
            hexd = digest.split(":", 1)[1]
            dest = blobdir / hexd
            if _file_ok(dest, size, hexd):
                reused += size
                blobs.append({"digest": digest, "size": size, "status": "reused"})
                continue
            specs.append(
                FileSpec(
                    dest=dest,
                    sources=[r.blob_url(ref.repository, digest, login_in_url=r is not origin) for r in live],
                    size=size,
                    sha256=hexd,
                    label=digest[7:19],
                    headers=origin.auth,
                    auth_origins={origin.origin} if origin in live else set(),
                )
            )
        downloaded = _download(specs, live, options, quiet, blobs)
        _write_atomic(blobdir / manifest.digest.split(":", 1)[1], manifest.raw)
        total = sum(int(d["size"]) for d in manifest.blobs)
        if fmt == "oci":
            write_oci_layout(layout, ref, manifest)
        else:
            write_docker_archive(out, layout, ref, manifest)
            if layout == out.with_name(out.name + ".blobs"):  # no cache: staging only
                shutil.rmtree(layout, ignore_errors=True)
        res = PullResult(
            str(ref),
            manifest.digest,
            want,
            str(out),
            fmt,
            total,
            downloaded,
            reused,
            round(time.monotonic() - t0, 3),
            blobs,
            manifest.ratelimit,
        )
        if load:
            res.loaded_into = load_into_runtime(out, layout, ref, manifest, fmt)
        return res
    finally:
        for r in [*mirror_regs, origin]:
            r.close()


def _download(
    specs: list[FileSpec],
    regs: list[Registry],
    options: EngineOptions | None,
    quiet: bool,
    blobs: list[dict[str, Any]],
) -> int:
    if not specs:
        return 0
    engine = Engine(options or EngineOptions())
    stop = threading.Event()

    def refresher() -> None:
        # registry tokens live minutes (Docker Hub: 300 s); a 20 GB pull outlives them
        while not stop.wait(2.0):
            for r in regs:
                if r.token_seconds_left() < 60:
                    with contextlib.suppress(GpuclinicError):
                        r.refresh_auth()

    th = threading.Thread(target=refresher, name="gpuclinic-token", daemon=True)
    th.start()
    try:
        with ProgressDisplay(engine, quiet=quiet):
            results = engine.run(specs)
    finally:
        stop.set()
    failed = [r for r in results if r.status == "failed"]
    for spec, r in zip(specs, results, strict=True):
        blobs.append(
            {
                "digest": "sha256:" + str(spec.sha256),
                "size": spec.size,
                "status": r.status,
                "downloaded": r.downloaded,
                "source": r.source,
            }
        )
    if failed:
        raise DownloadError(
            f"{failed[0].error}; {len(failed)} blob(s) failed, partial blobs kept: rerun the same command to "
            "resume"
        )
    return sum(r.downloaded for r in results)


def write_oci_layout(layout: Path, ref: ImageRef, manifest: Manifest) -> None:
    """``oci-layout`` + ``index.json`` naming the manifest by tag (other tags already there are kept)."""
    _write_atomic(layout / "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
    name = ref.tag or ref.digest or "latest"
    entries: list[dict[str, Any]] = []
    idx_path = layout / "index.json"
    with contextlib.suppress(OSError, ValueError, AttributeError):
        old = json.loads(idx_path.read_text())
        entries = [
            e
            for e in old.get("manifests", [])
            if isinstance(e, dict) and (e.get("annotations") or {}).get(REF_ANNOTATION) != name
        ]
    os_, _, arch = manifest.platform.partition("/")
    arch, _, variant = arch.partition("/")
    plat: dict[str, str] = {"architecture": arch, "os": os_}
    if variant:
        plat["variant"] = variant
    entries.append(
        {
            "mediaType": manifest.media_type,
            "digest": manifest.digest,
            "size": len(manifest.raw),
            "annotations": {REF_ANNOTATION: name},
            "platform": plat,
        }
    )
    doc = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries}
    _write_atomic(idx_path, json.dumps(doc, indent=2).encode())


def repo_tag(ref: ImageRef) -> str:
    """The name ``docker images`` shows: ``ubuntu:22.04`` for Docker Hub, ``host/repo:tag`` elsewhere."""
    repo = ref.repository
    if ref.registry == DOCKER_HUB:
        repo = repo.removeprefix("library/")
    else:
        repo = f"{ref.registry}/{repo}"
    return f"{repo}:{ref.tag or 'latest'}"


def write_docker_archive(out: Path, layout: Path, ref: ImageRef, manifest: Manifest) -> None:
    """``docker save`` format: manifest.json + the config JSON + one file per layer (as served)."""
    blobdir = layout / "blobs" / "sha256"
    cfg_hex = str(manifest.config["digest"]).split(":", 1)[1]
    layers = [str(d["digest"]).split(":", 1)[1] for d in manifest.layers]
    doc = [
        {
            "Config": f"{cfg_hex}.json",
            "RepoTags": [repo_tag(ref)] if ref.tag else [],
            "Layers": [f"{h}/layer.tar" for h in layers],
        }
    ]
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            tar.add(blobdir / cfg_hex, arcname=f"{cfg_hex}.json")
            done: set[str] = set()
            for h in layers:
                if h not in done:
                    done.add(h)
                    tar.add(blobdir / h, arcname=f"{h}/layer.tar")
            data = json.dumps(doc).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def load_into_runtime(out: Path, layout: Path, ref: ImageRef, manifest: Manifest, fmt: str) -> str:
    """``docker load`` (or ``podman load``) the image; an OCI layout is packed as a docker-archive first."""
    runtime = shutil.which("docker") or shutil.which("podman")
    if runtime is None:
        raise GpuclinicError(
            f"--load: neither docker nor podman is installed; the image is at {out}", exit_code=3
        )
    archive = out
    tmp: Path | None = None
    if fmt == "oci":
        tmp = out.with_name(f".{out.name}.load.tar")
        write_docker_archive(tmp, layout, ref, manifest)
        archive = tmp
    try:
        r = subprocess.run(
            [runtime, "load", "-i", str(archive)], capture_output=True, text=True, timeout=3600
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GpuclinicError(
            f"--load: {Path(runtime).name} load failed: {e}; the image is at {out}", exit_code=3
        ) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise GpuclinicError(
            f"--load: {Path(runtime).name} load failed: {why[0][:300]}; the image is at {out}", exit_code=3
        )
    return Path(runtime).name


def summary_line(res: PullResult) -> str:
    rate = res.downloaded / res.seconds if res.seconds else 0.0
    return (
        f"{res.output}  {res.ref} {res.digest[:19]} {res.platform}: {human(res.size)}, "
        f"{human(res.downloaded)} downloaded, {human(res.reused)} reused, {res.seconds:.1f} s "
        f"({human(rate)}/s)"
    )


__all__ = ["PullResult", "RegistryError", "pull", "summary_line", "write_docker_archive", "write_oci_layout"]
