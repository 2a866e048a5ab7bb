"""``gpuclinic get image``: pull an image with the download engine and write an OCI layout or a
docker-archive.

Why: the engine already does what a slow, shaped, flaky path needs (many ranged connections per
blob, resume across processes from ``.gpuclinic-state``, sha256 verification, failover between
sources that blames the one serving wrong bytes).  A blob is an HTTP object named by its digest, so
each one becomes a :class:`FileSpec` whose sources are the mirrors first and the origin last (the
order Docker and containerd use) and whose sha256 is the digest.  Blobs land directly in
``DIR/blobs/sha256/<hex>``; a blob already there with the right digest is reused, which also makes a
rerun after an interruption cheap, and the blob cache (transfer/oci_cache.py, shared by both formats
and pruned to a size cap) makes a second tag sharing base layers cheap.  Every registry's blob
requests carry that registry's own credentials, renewed on a 401 (a mirror's expired token).

The OCI layout (``oci-layout``, ``index.json``, ``blobs/``) is what skopeo and podman read; the
docker-archive (``manifest.json`` + config + layer files in one tar) is what ``docker load`` reads.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
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
from gpuclinic.transfer.oci_cache import blob_cache, cache_max, claim, file_ok, give, prune, take, touch
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
    cache: dict[str, Any] = field(default_factory=dict)

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


def default_output(ref: ImageRef, fmt: str) -> Path:
    name = ref.repository.rsplit("/", 1)[-1] + "_" + (ref.tag or (ref.digest or "")[7:19])
    return Path.cwd() / (name + (".tar" if fmt == "docker-archive" else ""))


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _layout_for(ref: ImageRef, output: str | None, fmt: str, cache: Path | None) -> tuple[Path, Path]:
    """(output path, the OCI layout the blobs go to): an oci directory is its own layout; a docker-archive
    .tar is written from the blob cache (or a staging layout beside it when the cache is off)."""
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
        layout = cache or out.with_name(out.name + ".blobs")
    if not layout.parent.is_dir():
        raise InputError(f"directory does not exist: {layout.parent}", exit_code=EXIT_USAGE)
    return out, layout


def _connect_all(
    mirror_regs: list[Registry], origin: Registry, ref: ImageRef
) -> tuple[list[Registry], list[str]]:
    """The registries that answered, mirrors first, and a note for each one skipped; the origin's
    error when nothing answered."""
    live: list[Registry] = []
    notes: list[str] = []
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
    return live, notes


def _plan_blobs(
    manifest: Manifest, ref: ImageRef, blobdir: Path, live: list[Registry], origin: Registry,
    blobs: list[dict[str, Any]], cache: Path | None = None,
) -> tuple[list[FileSpec], int]:
    """A download for each distinct blob neither the layout nor the blob cache holds (verified), and
    the bytes reused; every blob gets its row in ``blobs``."""
    specs: list[FileSpec] = []
    reused = 0
    seen: set[str] = set()
    regs = {r.origin: r for r in live}

    def reauth(url: str, challenge: str) -> bool:  # a 401 on a blob: renew that registry's token
        reg = regs.get(_origin_of(url))
        return reg.reauth(url, challenge) if reg is not None else False

    for d in manifest.blobs:
        digest, size = str(d["digest"]), int(d["size"])
        if digest in seen:
            continue
        seen.add(digest)
        hexd = digest.split(":", 1)[1]
        dest = blobdir / hexd
        if file_ok(dest, size, hexd):
            touch(dest)  # its last use, for the cache's least-recently-used pruning
            reused += size
            blobs.append({"digest": digest, "size": size, "status": "reused"})
            continue
        if cache is not None and take(cache, hexd, size, dest):
            reused += size
            blobs.append({"digest": digest, "size": size, "status": "reused", "from": "cache"})
            continue
        specs.append(
            FileSpec(
                dest=dest,
                sources=[r.blob_url(ref.repository, digest) for r in live],
                size=size,
                sha256=hexd,
                label=digest[7:19],
                source_headers={r.origin: r.auth for r in live},  # each its own login or token
                reauth=reauth,
            )
        )
    return specs, reused


def _origin_of(url: str) -> str:
    p = urlsplit(url)
    return f"{p.scheme}://{p.hostname}:{p.port or (443 if p.scheme == 'https' else 80)}"


def pull(
    ref_text: str,
    *,
    output: str | None = None,
    fmt: str = "oci",
    platform: str | None = None,
    mirrors: tuple[str, ...] = (),
    insecure: bool = False,
    load: bool = False,
    runtime: str | None = None,
    options: EngineOptions | None = None,
    quiet: bool = False,
    cache_max_size: str | None = None,
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
    if load:
        from gpuclinic.transfer.oci_load import runtime_choice

        runtime = runtime_choice(runtime)  # a bad value is a usage error before any download
    cap = cache_max(cache_max_size)  # a bad size is a usage error before any download
    mirror_regs = [_mirror_registry(m, insecure) for m in mirrors]
    origin = Registry(ref.api_host, insecure=insecure, credentials=basic_credentials(ref.registry))
    cache = blob_cache()
    out, layout = _layout_for(ref, output, fmt, cache)
    try:
        live, notes = _connect_all(mirror_regs, origin, ref)
        manifest = resolve(live, ref, want)
        if not quiet:
            for n in notes:
                print(f"gpuclinic: {n}", flush=True)
        blobdir = layout / "blobs" / "sha256"
        blobdir.mkdir(parents=True, exist_ok=True)
        blobs: list[dict[str, Any]] = []
        # other pulls' pruning spares this image's blobs until it is packed (oci_cache.claim)
        with claim(cache, _hexes(manifest)):
            specs, reused = _plan_blobs(manifest, ref, blobdir, live, origin, blobs, cache)
            downloaded = _download(specs, live, options, quiet, blobs)
            _write_atomic(blobdir / manifest.digest.split(":", 1)[1], manifest.raw)
            total = sum(int(d["size"]) for d in manifest.blobs)
            if fmt == "oci":
                write_oci_layout(layout, ref, manifest)
            else:
                write_docker_archive(out, layout, ref, manifest)
                if layout == out.with_name(out.name + ".blobs"):  # no cache: staging only
                    shutil.rmtree(layout, ignore_errors=True)
            cache_doc = _tend_cache(cache, blobdir, manifest, cap)
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
            cache=cache_doc,
        )
        if load:
            res.loaded_into = load_into_runtime(out, layout, ref, manifest, fmt, runtime, quiet=quiet)
        return res
    finally:
        for r in [*mirror_regs, origin]:
            r.close()


def _hexes(manifest: Manifest) -> set[str]:
    """The hex digests of an image's blobs and of its manifest: what its pull uses from the cache."""
    return {str(d["digest"]).split(":", 1)[1] for d in manifest.blobs} | {manifest.digest.split(":", 1)[1]}


def _tend_cache(cache: Path | None, blobdir: Path, manifest: Manifest, cap: int) -> dict[str, Any]:
    """Give this image's blobs to the cache (an OCI output's are hard links) and cut the cache to
    ``cap``, sparing this image; what the JSON result reports under ``cache``."""
    if cache is None:
        return {}
    keep = _hexes(manifest)
    for h in sorted(keep):
        with contextlib.suppress(OSError):
            give(cache, blobdir / h)
    pr = prune(cache, cap, keep)
    return {"dir": str(cache), "max": cap, "size": pr.kept_bytes, "pruned": pr.removed, "freed": pr.freed}


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


def load_into_runtime(
    out: Path, layout: Path, ref: ImageRef, manifest: Manifest, fmt: str, runtime: str | None = None,
    *, quiet: bool = False,
) -> str:
    """Load the image into the chosen runtime (oci_load.choose_runtime: docker only when its daemon
    answers, else podman); an OCI layout is packed as a docker-archive first.  Returns the runtime's
    name."""
    from gpuclinic.transfer import oci_load

    keep = f"the image is at {out}"
    try:
        name, path, why = oci_load.choose_runtime(runtime)
    except GpuclinicError as e:
        raise type(e)(f"{e}; {keep}", exit_code=e.exit_code) from None
    archive, tmp = out, None
    if fmt == "oci":
        tmp = out.with_name(f".{out.name}.load.tar")
        write_docker_archive(tmp, layout, ref, manifest)
        archive = tmp
    try:
        oci_load.load_archive(name, path, archive, say=not quiet, keep_note=keep, why_not_docker=why)
    finally:
        oci_load.cleanup(tmp)
    return name


def summary_line(res: PullResult) -> str:
    rate = res.downloaded / res.seconds if res.seconds else 0.0
    line = (
        f"{res.output}  {res.ref} {res.digest[:19]} {res.platform}: {human(res.size)}, "
        f"{human(res.downloaded)} downloaded, {human(res.reused)} reused, {res.seconds:.1f} s "
        f"({human(rate)}/s)"
    )
    if res.cache.get("pruned"):
        line += (
            f"; blob cache cut to {human(res.cache['size'])} (max {human(res.cache['max'])}): "
            f"{res.cache['pruned']} least recently used blob(s), {human(res.cache['freed'])} freed"
        )
    return line


__all__ = ["PullResult", "RegistryError", "pull", "summary_line", "write_docker_archive", "write_oci_layout"]
