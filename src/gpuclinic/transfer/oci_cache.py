"""The blob cache of ``get image``: one content-addressed store shared by every pull and format.

Why: CUDA/PyTorch images share multi-GB base layers, so a second tag, a docker-archive after an OCI
pull, or the same image into another directory should cross the slow link only for what is new.
Blobs live in ``CACHE/blobs/sha256/<hex>`` (the OCI layout's own naming, so a docker-archive pull
uses the cache directly as its staging layout).  An OCI output gets its blobs from the cache by
hard link (a copy across file systems), and gives newly downloaded blobs back by hard link (never by
copy: see :func:`give`).

Pruning (like ``huggingface-cli delete-cache``, but automatic): after each pull the cache is cut to
``--cache-max`` (``GPUCLINIC_BLOB_CACHE_MAX``, default :data:`DEFAULT_MAX`), least recently used
first (a blob's mtime is set on every use).  Never pruned: the blobs of the pull that just ran, a
blob that is being written (a ``.gpuclinic-part`` or ``.gpuclinic-lock`` file beside it), and the
blobs another pull still uses.  A blob hard-linked into an OCI output stays there when its cache link
is pruned.

Pulls in other processes: each pull, once it knows its manifest, registers the digests it will use in
``CACHE/in-use/<pid>.<n>`` and holds an ``flock`` on that file until it has packed its output
(:func:`claim`); a crashed pull's lock goes with its process, so its file is stale and is removed.
:func:`prune` holds the exclusive lock on ``CACHE/.gpuclinic-prune.lock`` while it lists and
deletes, and skips every blob a live claim names; a claim is registered under the shared lock of
that file, so it waits for a prune in progress and every later prune sees it.  So a pull with a
tiny ``--cache-max`` cannot delete a blob another pull fetched but has not packed yet.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.transfer.engine_jobs import LOCK_SUFFIX, PART_SUFFIX

DEFAULT_MAX = "50G"
IN_USE = "in-use"
PRUNE_LOCK = ".gpuclinic-prune.lock"
_claims = itertools.count()
_HEX = re.compile(r"^[0-9a-f]{64}$")
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, what: str = "--cache-max") -> int:
    """``50G``, ``512M``, ``1.5T``, ``0`` (binary units; an optional ``iB``/``B`` suffix) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise InputError(f"{what} must be a size like 50G, 512M or 0: {text!r}", exit_code=EXIT_USAGE)
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def blob_cache() -> Path | None:
    """``GPUCLINIC_BLOB_CACHE`` (empty: no cache), else ``$XDG_CACHE_HOME/gpuclinic/oci``; None when
    it cannot be created."""
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


def cache_max(value: str | None) -> int:
    """The cap in bytes: ``--cache-max``, else ``GPUCLINIC_BLOB_CACHE_MAX``, else :data:`DEFAULT_MAX`."""
    if value is not None:
        return parse_size(value)
    env = os.environ.get("GPUCLINIC_BLOB_CACHE_MAX")
    return parse_size(env, "GPUCLINIC_BLOB_CACHE_MAX") if env else parse_size(DEFAULT_MAX)


def file_ok(path: Path, size: int, hexdigest: str) -> bool:
    """The file exists with ``size`` bytes and hashes to ``hexdigest``."""
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


def touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _link_or_copy(src: Path, dest: Path, *, copy: bool = True) -> bool:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.link")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            if not copy:
                return False
            shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False


def take(cache: Path, hexd: str, size: int, dest: Path) -> bool:
    """Put the cached blob ``hexd`` at ``dest`` when the cache holds it intact; True if it did."""
    src = cache / "blobs" / "sha256" / hexd
    if src == dest or not file_ok(src, size, hexd):
        return False
    if _link_or_copy(src, dest):
        touch(src)
        return True
    return False


def give(cache: Path, blob: Path) -> None:
    """Store a verified blob of an output in the cache by hard link; best effort.  Never a copy: an
    output on another file system (often chosen for its space) must not double a 20 GB pull's disk
    use behind the user's back; such a cache is filled by docker-archive pulls only."""
    dest = cache / "blobs" / "sha256" / blob.name
    if dest == blob:
        touch(dest)
        return
    if dest.is_file() and dest.stat().st_size == blob.stat().st_size:
        touch(dest)
        return
    _link_or_copy(blob, dest, copy=False)


@dataclass
class Pruned:
    removed: int = 0
    freed: int = 0
    kept_bytes: int = 0


@contextlib.contextmanager
def _prune_lock(cache: Path, mode: int) -> Iterator[None]:
    """``flock`` ``mode`` (LOCK_SH: registering a claim; LOCK_EX: pruning) on the cache's prune lock."""
    fd = os.open(cache / PRUNE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def claim(cache: Path | None, hexes: Iterable[str]) -> Iterator[None]:
    """Hold the blobs ``hexes`` (hex digests) against every other process's :func:`prune` for the
    duration of the ``with`` block.  No cache (or an unwritable one): nothing to hold."""
    if cache is None:
        yield
        return
    d = cache / IN_USE
    name = f"{os.getpid()}.{next(_claims)}"
    tmp = d / f".{name}.tmp"  # prune reads only whole, locked files: write, lock, then rename
    fd = -1
    try:
        with _prune_lock(cache, fcntl.LOCK_SH):
            d.mkdir(exist_ok=True)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, "".join(f"{h}\n" for h in sorted(set(hexes))).encode())
            os.replace(tmp, d / name)
    except OSError:  # best effort: a cache we cannot write to is not pruned by us either
        if fd >= 0:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
        fd = -1
    try:
        yield
    finally:
        if fd >= 0:
            with contextlib.suppress(OSError):
                (d / name).unlink()
            os.close(fd)


def _claimed(cache: Path) -> set[str]:
    """The blobs live claims hold; the files of claims whose process is gone are removed.  Called under
    the exclusive prune lock."""
    held: set[str] = set()
    try:
        files = [p for p in (cache / IN_USE).iterdir() if not p.name.startswith(".")]
    except OSError:
        return held
    for p in files:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # its pull is alive and holds it
                with open(p, encoding="ascii", errors="replace") as fh:
                    held.update(line.strip() for line in fh if line.strip())
                continue
            with contextlib.suppress(OSError):
                p.unlink()  # the pull that wrote it is gone (a crash): its claim is stale
        finally:
            os.close(fd)
    return held


def prune(cache: Path, max_bytes: int, keep: set[str]) -> Pruned:
    """Delete least recently used blobs until the cache holds at most ``max_bytes``; ``keep`` (hex
    digests of the pull that just ran), blobs being written and blobs another live pull claims are never
    deleted."""
    try:
        with _prune_lock(cache, fcntl.LOCK_EX):
            return _prune(cache, max_bytes, keep | _claimed(cache))
    except OSError:  # a cache we cannot lock (read-only): leave it as it is
        return Pruned()


def _prune(cache: Path, max_bytes: int, keep: set[str]) -> Pruned:
    d = cache / "blobs" / "sha256"
    entries: list[tuple[float, int, Path]] = []
    busy: set[str] = set()
    total = 0
    try:
        names = list(d.iterdir())
    except OSError:
        return Pruned()
    for p in names:
        for suffix in (PART_SUFFIX, LOCK_SUFFIX):
            if p.name.endswith(suffix):
                busy.add(p.name[: -len(suffix)])
    for p in names:
        if not _HEX.match(p.name):
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        total += st.st_size
        if p.name not in keep and p.name not in busy:
            entries.append((st.st_mtime, st.st_size, p))
    out = Pruned(kept_bytes=total)
    for _, size, p in sorted(entries):
        if out.kept_bytes <= max_bytes:
            break
        try:
            p.unlink()
        except OSError:
            continue
        out.removed += 1
        out.freed += size
        out.kept_bytes -= size
    return out
