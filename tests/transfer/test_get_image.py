"""``get image`` against a real registry (Debian's docker-registry on 127.0.0.1), images pushed by skopeo.

Acceptance of issue 13: a >= 200 MiB layer round trip checked by ``skopeo inspect`` and by every
digest; kill -9 at 50 % then a rerun downloads at most 2 % twice (bytes counted by the TCP proxy in
front of the registry); a mirror that flips bytes is detected and the image is completed from the
origin.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuclinic.transfer.wansim_tcp import ProxyKnobs, TcpProxy
from realtools import require

from .oci_env import Built, MiB, Registry, build_image, build_multiarch, push, sha256_file

BIG = 200 * MiB
# bcrypt of the mirror's test password "Mirr0r-s3cret-pw" at cost 4, made with libcrypt's Blowfish method;
# a test credential, not a secret.  The registry checks it on every request: at the default cost (12)
# that is ~0.2 s of CPU per request, tens of seconds for this test's pushes and pulls.
MIRROR_HASH = "$2b$04$cHF8FyzrWI0h/MSzgSPvleYnkg552UfMeYmNKE635In0VDhwdOdKG"
GPUCLINIC = [sys.executable, "-m", "gpuclinic"]


class Env:
    def __init__(self, reg: Registry, big: Built, multi: dict[str, Built], skopeo: str) -> None:
        self.reg, self.big, self.multi, self.skopeo = reg, big, multi, skopeo

    def registry_manifest(self, repo: str) -> tuple[str, dict[str, Any]]:
        """The manifest as the registry serves it (skopeo compressed the layers on push)."""
        r = httpx.get(f"http://{self.reg.host}/v2/{repo}/manifests/latest",
                      headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=10)
        r.raise_for_status()
        return "sha256:" + hashlib.sha256(r.content).hexdigest(), r.json()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tools = require("docker-registry", "skopeo")
    root = tmp_path_factory.mktemp("oci")
    reg = Registry(tools["docker-registry"], root / "registry")
    try:
        big = build_image(root / "src-big", [BIG, 2000])
        push(tools["skopeo"], root / "src-big", f"{reg.host}/test/big:latest")
        multi = build_multiarch(root / "src-multi")
        push(tools["skopeo"], root / "src-multi", f"{reg.host}/test/multi:latest", all_platforms=True)
        yield Env(reg, big, multi, tools["skopeo"])
    finally:
        reg.stop()


def _get(
    *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``get image``; docker-archive blobs are cached in a temp dir, never the user's ~/.cache."""
    return subprocess.run(
        [*GPUCLINIC, "get", "image", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "GPUCLINIC_BLOB_CACHE": _CACHE, **(env or {})},
    )


_CACHE = tempfile.mkdtemp(prefix="gpuclinic-test-blobs-")
atexit.register(shutil.rmtree, _CACHE, True)


def _check_layout(env: Env, out: Path, repo: str) -> dict[str, Any]:
    """skopeo reads it, index.json names the registry's manifest, and every blob hashes to its name."""
    r = subprocess.run([env.skopeo, "inspect", f"oci:{out}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    mdigest, manifest = env.registry_manifest(repo)
    index = json.loads((out / "index.json").read_text())
    assert [m["digest"] for m in index["manifests"]] == [mdigest]
    assert json.loads(r.stdout)["Layers"] == [x["digest"] for x in manifest["layers"]]
    for d in [manifest["config"], *manifest["layers"]]:
        p = out / "blobs" / "sha256" / d["digest"].split(":")[1]
        assert p.stat().st_size == d["size"] and sha256_file(p) == d["digest"]
    assert sha256_file(out / "blobs" / "sha256" / mdigest.split(":")[1]) == mdigest
    assert not list(out.rglob("*.gpuclinic-*"))  # no part, state or lock file left behind
    return manifest


def test_round_trip_200mib_layer_and_reuse(env: Env, tmp_path: Path) -> None:
    out = tmp_path / "img"
    r = _get(f"{env.reg.host}/test/big:latest", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    manifest = _check_layout(env, out, "test/big")
    total = sum(d["size"] for d in [manifest["config"], *manifest["layers"]])
    assert total > BIG and res["size"] == total and res["downloaded"] == total
    # a second run finds every blob in place, verified: nothing is downloaded
    r = _get(f"{env.reg.host}/test/big:latest", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    assert again["downloaded"] == 0 and again["reused"] == total
    assert {b["status"] for b in again["blobs"]} == {"reused"}


def test_multiarch_platform_and_docker_archive(env: Env, tmp_path: Path) -> None:
    for arch in ("arm64", "amd64"):
        out = tmp_path / f"m-{arch}.tar"
        r = _get(
            f"{env.reg.host}/test/multi",
            "--platform",
            f"linux/{arch}",
            "--format",
            "docker-archive",
            "-o",
            str(out),
            "-q",
        )
        assert r.returncode == 0, r.stderr
        ins = subprocess.run(
            [env.skopeo, "inspect", f"docker-archive:{out}"], capture_output=True, text=True, timeout=60
        )
        assert ins.returncode == 0, ins.stderr
        info = json.loads(ins.stdout)
        assert info["Architecture"] == arch
        assert not out.with_name(out.name + ".blobs").exists()  # staged in the blob cache instead
        # skopeo can copy it on (it decompresses every layer and checks the config's diff_ids)
        cp = subprocess.run(
            [env.skopeo, "copy", f"docker-archive:{out}", f"oci:{tmp_path / ('c-' + arch)}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cp.returncode == 0, cp.stderr
    r = _get(f"{env.reg.host}/test/multi", "--platform", "linux/s390x", "-o", str(tmp_path / "x"))
    assert r.returncode == 64 and "available: linux/amd64, linux/arm64" in r.stderr
    assert "Traceback" not in r.stderr


def test_docker_archive_reuses_the_blob_cache(env: Env, tmp_path: Path) -> None:
    """A second docker-archive pull (to another file) takes every blob from the cache: only the
    manifest crosses the link (counted by a proxy in front of the registry)."""
    cache = {"GPUCLINIC_BLOB_CACHE": str(tmp_path / "cache")}
    with TcpProxy("127.0.0.1", env.reg.port) as px:
        args = [f"127.0.0.1:{px.port}/test/multi", "--platform", "linux/amd64", "--format", "docker-archive"]
        first = _get(*args, "--json", "-o", str(tmp_path / "one.tar"), env=cache)
        crossed_first = px.stats()["down"]
        px.reset_stats()
        second = _get(*args, "--json", "-o", str(tmp_path / "two.tar"), env=cache)
        crossed_second = px.stats()["down"]
        nocache = _get(*args, "--json", "-o", str(tmp_path / "three.tar"), env={"GPUCLINIC_BLOB_CACHE": ""})
    for r in (first, second, nocache):
        assert r.returncode == 0, r.stderr
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["downloaded"] == one["size"] > 0
    assert two["downloaded"] == 0 and two["reused"] == two["size"] == one["size"]
    assert crossed_first - crossed_second >= one["size"]  # every blob byte stayed off the link
    ins = subprocess.run(
        [env.skopeo, "inspect", f"docker-archive:{tmp_path / 'two.tar'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ins.returncode == 0, ins.stderr
    assert json.loads(nocache.stdout)["downloaded"] == one["size"]  # "" turns the cache off
    assert not (tmp_path / "three.tar.blobs").exists()  # and the staging dir is removed


def test_kill9_at_half_then_resume_downloads_little_twice(env: Env, tmp_path: Path) -> None:
    out = tmp_path / "img"
    # a link of 40 MiB/s, 4 MiB/s per connection: the pull takes seconds, so 50 % can be hit
    with TcpProxy("127.0.0.1", env.reg.port, ProxyKnobs(rate_per_conn=4 * MiB, total_rate=40 * MiB)) as px:
        ref = f"127.0.0.1:{px.port}/test/big:latest"
        proc = subprocess.Popen(
            [*GPUCLINIC, "get", "image", ref, "-o", str(out), "-q"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 120
        while px.stats()["down"] < BIG // 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "finished before 50 %"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        first = px.stats()["down"]
        assert BIG * 0.45 < first < BIG * 0.7
        r = _get(ref, "-o", str(out), "--json")
        assert r.returncode == 0, r.stderr
        total_sent = px.stats()["down"]
    manifest = _check_layout(env, out, "test/big")
    size = sum(d["size"] for d in [manifest["config"], *manifest["layers"]])
    twice = total_sent - size - 64 * 1024  # manifests and token-less /v2/ probes are a few KiB
    assert twice <= 0.02 * size, f"{twice / MiB:.1f} MiB downloaded twice"
    assert json.loads(r.stdout)["downloaded"] < size * 0.6


def test_corrupt_mirror_detected_and_completed_from_origin(env: Env, tmp_path: Path) -> None:
    out = tmp_path / "img"
    # the mirror flips one byte per MiB after the first 16 KiB of each connection (headers survive)
    with TcpProxy("127.0.0.1", env.reg.port, ProxyKnobs(corrupt_every=MiB, corrupt_from=16 * 1024)) as bad:
        r = _get(f"{env.reg.host}/test/big:latest", "-o", str(out), "--mirror", bad.url, "--json")
        assert r.returncode == 0, r.stderr
        assert bad.stats()["corrupted"] > 0
    _check_layout(env, out, "test/big")
    res = json.loads(r.stdout)
    big = max(res["blobs"], key=lambda b: b["size"])
    assert str(env.reg.port) in big["source"] and str(bad.port) not in big["source"]


def test_mirror_serves_everything_when_healthy(env: Env, tmp_path: Path) -> None:
    with TcpProxy("127.0.0.1", env.reg.port) as good:
        r = _get(f"{env.reg.host}/test/multi", "-o", str(tmp_path / "m"), "--mirror", good.url, "--json")
        assert r.returncode == 0, r.stderr
        assert all(str(good.port) in b["source"] for b in json.loads(r.stdout)["blobs"])


def test_mirror_login_from_the_auth_file_never_printed(env: Env, tmp_path: Path) -> None:
    """A mirror that demands a login (docker-registry with htpasswd): with the login in docker's
    config.json it serves every blob; without it, it is skipped and the origin serves; the password
    appears nowhere in the output."""
    password = "Mirr0r-s3cret-pw"
    line = "alice:" + MIRROR_HASH
    mirror = Registry(require("docker-registry")["docker-registry"], tmp_path / "mreg", htpasswd=line)
    try:
        build_image(tmp_path / "src", [3 * MiB, 500])
        for host in (env.reg.host, mirror.host):
            creds = f"alice:{password}" if host == mirror.host else None
            push(env.skopeo, tmp_path / "src", f"{host}/test/small:latest", creds=creds)
        docker = tmp_path / "docker"
        docker.mkdir()
        auth = base64.b64encode(f"alice:{password}".encode()).decode()
        (docker / "config.json").write_text(json.dumps({"auths": {f"http://{mirror.host}": {"auth": auth}}}))
        with_login = _get(f"{env.reg.host}/test/small", "-o", str(tmp_path / "a"), "--mirror",
                          f"http://{mirror.host}", "--json", env={"DOCKER_CONFIG": str(docker)})
        without = _get(f"{env.reg.host}/test/small", "-o", str(tmp_path / "b"), "--mirror",
                       f"http://{mirror.host}", "--json", env={"DOCKER_CONFIG": str(tmp_path / "none")})
        in_url = _get(f"{env.reg.host}/test/small", "-o", str(tmp_path / "c"), "--mirror",
                      f"http://alice:{password}@{mirror.host}", "--json",
                      env={"DOCKER_CONFIG": str(tmp_path / "none")})
    finally:
        mirror.stop()
    for r in (with_login, without, in_url):
        assert r.returncode == 0, r.stderr
        assert password not in r.stdout + r.stderr and auth not in r.stdout + r.stderr
    for r in (with_login, in_url):
        assert all(str(mirror.port) in b["source"] for b in json.loads(r.stdout)["blobs"])
    assert all(str(env.reg.port) in b["source"] for b in json.loads(without.stdout)["blobs"])


def test_bad_input_is_one_line(env: Env, tmp_path: Path) -> None:
    cases = [
        (["UPPER/case"], "bad repository name"),
        (["x@sha256:1234"], "bad digest"),
        ([f"{env.reg.host}/test/big", "--mirror", "http://192.0.2.1:5000"], "add --insecure"),
        ([f"{env.reg.host}/test/big", "--mirror", "https://m.example/path"], "registry root URL"),
        ([f"{env.reg.host}/test/big", "--platform", "amd64"], "OS/ARCH"),
        ([f"{env.reg.host}/test/big", "-o", str(tmp_path / "no" / "such")], "does not exist"),
        ([f"{env.reg.host}/test/missing"], "MANIFEST_UNKNOWN"),
    ]
    for args, want in cases:
        r = _get(*args, "-o", str(tmp_path / "o")) if "-o" not in args else _get(*args)
        assert r.returncode == 64, (args, r.returncode, r.stderr)
        assert want in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, (
            r.stderr
        )


def test_load_without_a_runtime_keeps_the_image(env: Env, tmp_path: Path) -> None:
    # PATH without docker or podman: the pull succeeds, --load says why it could not hand it over
    out = tmp_path / "m"
    r = subprocess.run(
        [*GPUCLINIC, "get", "image", f"{env.reg.host}/test/multi", "-o", str(out), "--load", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": str(tmp_path)},
    )
    assert r.returncode == 3 and "neither docker nor podman" in r.stderr and str(out) in r.stderr
    assert (out / "index.json").exists() and "Traceback" not in r.stderr
