"""Two pulls sharing the blob cache in two real processes: one's pruning (a tiny --cache-max) must not
delete a blob the other fetched but has not packed yet; a crashed pull's claim must not pin blobs forever;
a claim waits for a prune in progress (so that prune cannot miss it)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuclinic.transfer.oci_cache import IN_USE, PRUNE_LOCK, file_ok, prune

# A "pull" in its own process: claim the blobs, say so, wait for the word, then pack (read them back).
PULL = """
import sys, time
from pathlib import Path
from gpuclinic.transfer.oci_cache import claim, file_ok
cache, sig = Path(sys.argv[1]), Path(sys.argv[2])
blobs = {h: int(n) for h, n in (a.split(":") for a in sys.argv[3:])}
with claim(cache, blobs):
    (sig / "claimed").write_text("x")
    deadline = time.monotonic() + 20
    while not (sig / "pack").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    ok = all(file_ok(cache / "blobs" / "sha256" / h, n, h) for h, n in blobs.items())
    (sig / "packed").write_text("ok" if ok else "missing")
"""


def _blob(cache: Path, data: bytes, age_s: float) -> tuple[str, int]:
    h = hashlib.sha256(data).hexdigest()
    p = cache / "blobs" / "sha256" / h
    p.write_bytes(data)
    t = time.time() - age_s
    os.utime(p, (t, t))
    return h, len(data)


def _wait(p: Path, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while not p.exists():
        assert time.monotonic() < end, f"{p.name} never appeared"
        time.sleep(0.02)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    c = tmp_path / "cache"
    (c / "blobs" / "sha256").mkdir(parents=True)
    return c


def _start_pull(cache: Path, sig: Path, *blobs: tuple[str, int]) -> subprocess.Popen[bytes]:
    sig.mkdir()
    return subprocess.Popen(
        [sys.executable, "-c", PULL, str(cache), str(sig), *(f"{h}:{n}" for h, n in blobs)],
        stderr=subprocess.PIPE,
    )


# Another pull's prune, in its own process, with a cap of 0 bytes.
PRUNE = """
import sys
from pathlib import Path
from gpuclinic.transfer.oci_cache import prune
r = prune(Path(sys.argv[1]), 0, set(sys.argv[2:]))
print(r.removed, r.kept_bytes)
"""


def _prune_elsewhere(cache: Path, *keep: str) -> tuple[int, int]:
    r = subprocess.run([sys.executable, "-c", PRUNE, str(cache), *keep], capture_output=True, text=True,
                       timeout=30, check=True)
    removed, kept = r.stdout.split()
    return int(removed), int(kept)


@pytest.mark.timeout(60)
def test_a_prune_spares_what_another_live_pull_claims(cache: Path, tmp_path: Path) -> None:
    fetched = _blob(cache, b"layer fetched by A, not packed yet" * 100, age_s=3600)  # the oldest: LRU victim
    other = _blob(cache, b"nobody's layer" * 10, age_s=60)
    mine = _blob(cache, b"B's own layer", age_s=0)
    a = _start_pull(cache, tmp_path / "a", fetched)
    try:
        _wait(tmp_path / "a" / "claimed")
        removed, kept = _prune_elsewhere(cache, mine[0])  # pull B ends: cut the cache to 0 bytes
        assert removed == 1 and kept == fetched[1] + mine[1]
        assert not (cache / "blobs" / "sha256" / other[0]).exists()
        assert file_ok(cache / "blobs" / "sha256" / fetched[0], fetched[1], fetched[0])
        (tmp_path / "a" / "pack").write_text("go")
        _wait(tmp_path / "a" / "packed")
        assert (tmp_path / "a" / "packed").read_text() == "ok"
        assert a.wait(timeout=15) == 0, a.stderr.read() if a.stderr else ""
    finally:
        a.kill()
        a.wait()
    assert list((cache / IN_USE).iterdir()) == []  # the claim went with the pull
    assert _prune_elsewhere(cache)[0] == 2  # now nothing holds them


@pytest.mark.timeout(60)
def test_a_crashed_pulls_claim_is_stale(cache: Path, tmp_path: Path) -> None:
    fetched = _blob(cache, b"layer of a pull that crashed", age_s=10)
    a = _start_pull(cache, tmp_path / "a", fetched)
    _wait(tmp_path / "a" / "claimed")
    a.kill()  # SIGKILL: no cleanup ran, its file is still there
    a.wait()
    assert len(list((cache / IN_USE).iterdir())) == 1
    assert prune(cache, 0, set()).removed == 1
    assert list((cache / IN_USE).iterdir()) == []


@pytest.mark.timeout(60)
def test_a_claim_waits_for_a_prune_in_progress(cache: Path, tmp_path: Path) -> None:
    """A prune lists the claims, then deletes: a claim registered in between would be missed, so a
    claim waits until the prune is done."""
    fetched = _blob(cache, b"layer", age_s=10)
    fd = os.open(cache / PRUNE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a prune is running (held here, in the test's process)
    a = _start_pull(cache, tmp_path / "a", fetched)
    try:
        time.sleep(1.0)
        assert not (tmp_path / "a" / "claimed").exists()
        os.close(fd)
        _wait(tmp_path / "a" / "claimed")
        assert prune(cache, 0, set()).removed == 0
        (tmp_path / "a" / "pack").write_text("go")
        assert a.wait(timeout=15) == 0
        assert (tmp_path / "a" / "packed").read_text() == "ok"
    finally:
        a.kill()
        a.wait()
