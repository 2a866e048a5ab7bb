"""``get image`` against a real registry (Debian's docker-registry on 127.0.0.1), images pushed by skopeo.

Acceptance of issue 13: a >= 200 MiB layer round trip checked by ``skopeo inspect`` and by every
digest; kill -9 at 50 % then a rerun downloads at most 2 % twice (bytes counted by the TCP proxy in
front of the registry); a mirror that flips bytes is detected and the image is completed from the
origin.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuclinic.transfer.wansim_tcp import ProxyKnobs, TcpProxy
from realtools import require

from .oci_env import Built, MiB, Registry, TokenIssuer, build_image, build_multiarch, push, sha256_file

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
    """``get image`` without the blob cache (so every test counts its own downloads; never the user's
    ~/.cache); the cache tests pass their own ``GPUCLINIC_BLOB_CACHE``."""
    return subprocess.run(
        [*GPUCLINIC, "get", "image", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **NO_CACHE, **(env or {})},
    )


NO_CACHE = {"GPUCLINIC_BLOB_CACHE": ""}


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
        assert not out.with_name(out.name + ".blobs").exists()  # the staging layout is removed
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
            env={**os.environ, **NO_CACHE},
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
        ([f"{env.reg.host}/test/big", "--runtime", "podman"], "add --load"),
        ([f"{env.reg.host}/test/big", "--cache-max", "-3G"], "--cache-max must be a size"),
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
        env={**os.environ, **NO_CACHE, "PATH": str(tmp_path)},
    )
    assert r.returncode == 3 and "neither docker nor podman" in r.stderr and str(out) in r.stderr
    assert (out / "index.json").exists() and "Traceback" not in r.stderr


def _podman_env(tmp_path: Path) -> dict[str, str]:
    """podman with its own vfs storage under tmp_path (CONTAINERS_STORAGE_CONF), and a docker CLI
    pointed at a socket nobody serves, so that ``auto`` must pass docker over whatever the host has."""
    conf = tmp_path / "storage.conf"
    conf.write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{tmp_path / "root"}"\nrunroot = "{tmp_path / "run"}"\n'
    )
    return {"CONTAINERS_STORAGE_CONF": str(conf), "DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}"}


def test_load_into_podman_really_loads_the_image(env: Env, tmp_path: Path) -> None:
    """--load with docker's daemon silent picks podman, says so, and podman then lists the image under
    its name with the config digest as its ID; --runtime docker refuses with the reason and keeps the
    image; a bad --runtime is a usage error before any download."""
    podman = require("podman")["podman"]
    penv = _podman_env(tmp_path)
    idx = httpx.get(f"http://{env.reg.host}/v2/test/multi/manifests/latest",
                    headers={"Accept": "application/vnd.oci.image.index.v1+json"}, timeout=10)
    amd64 = next(m for m in idx.json()["manifests"] if m["platform"]["architecture"] == "amd64")
    m = httpx.get(f"http://{env.reg.host}/v2/test/multi/manifests/{amd64['digest']}",
                  headers={"Accept": amd64["mediaType"]}, timeout=10).json()
    config_digest = m["config"]["digest"]
    for fmt, out in (("oci", tmp_path / "m"), ("docker-archive", tmp_path / "m.tar")):
        r = _get(f"{env.reg.host}/test/multi", "--platform", "linux/amd64", "--format", fmt, "-o", str(out),
                 "--load", env=penv)
        assert r.returncode == 0, r.stderr
        assert "loading into podman (docker is installed but its daemon does not answer" in r.stdout or (
            "loading into podman (docker is not installed)" in r.stdout
        ), r.stdout
        assert "loaded into podman" in r.stdout
    name = f"{env.reg.host}/test/multi:latest"
    ins = subprocess.run([podman, "image", "inspect", name], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **penv})
    assert ins.returncode == 0, ins.stderr
    info = json.loads(ins.stdout)[0]
    assert "sha256:" + info["Id"] == config_digest and info["Architecture"] == "amd64"
    assert name in info["RepoTags"]
    imgs = subprocess.run([podman, "images", "--format", "json"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **penv})
    assert [i["Id"] for i in json.loads(imgs.stdout)] == [info["Id"]]  # both loads: one image
    forced = _get(f"{env.reg.host}/test/multi", "-o", str(tmp_path / "d"), "--load", "--runtime", "docker",
                  env=penv)
    assert forced.returncode == 3 and "--load: docker" in forced.stderr
    assert str(tmp_path / "d") in forced.stderr
    assert (tmp_path / "d" / "index.json").exists() and "Traceback" not in forced.stderr
    bad = _get(f"{env.reg.host}/test/multi", "-o", str(tmp_path / "e"), "--load", env={**penv,
               "GPUCLINIC_RUNTIME": "lxc"})
    assert bad.returncode == 64 and "GPUCLINIC_RUNTIME" in bad.stderr and not (tmp_path / "e").exists()


def test_oci_output_shares_the_blob_cache_and_it_is_pruned(env: Env, tmp_path: Path) -> None:
    """An OCI pull fills the cache by hard link; a second OCI pull elsewhere and a docker-archive pull
    cross the link with no blob byte; --cache-max then drops the least recently used image's blobs,
    never the current image's nor a blob being written."""
    cache = tmp_path / "cache"
    cenv = {"GPUCLINIC_BLOB_CACHE": str(cache)}
    blobdir = cache / "blobs" / "sha256"
    with TcpProxy("127.0.0.1", env.reg.port) as px:
        ref = f"127.0.0.1:{px.port}/test/multi"
        first = _get(ref, "--platform", "linux/amd64", "-o", str(tmp_path / "a"), "--json", env=cenv)
        assert first.returncode == 0, first.stderr
        one = json.loads(first.stdout)
        assert one["downloaded"] == one["size"] > 0 and one["cache"]["pruned"] == 0
        for b in one["blobs"]:  # the same inode in the output and in the cache: no second copy on disk
            h = b["digest"].split(":")[1]
            assert (blobdir / h).stat().st_ino == (tmp_path / "a" / "blobs" / "sha256" / h).stat().st_ino
        px.reset_stats()
        second = _get(ref, "--platform", "linux/amd64", "-o", str(tmp_path / "b"), "--json", env=cenv)
        arch = _get(ref, "--platform", "linux/amd64", "--format", "docker-archive", "-o",
                    str(tmp_path / "b.tar"), "--json", env=cenv)
        crossed = px.stats()["down"]
        for r in (second, arch):
            assert r.returncode == 0, r.stderr
            res = json.loads(r.stdout)
            assert res["downloaded"] == 0 and res["reused"] == one["size"]
        assert crossed < 64 * 1024  # manifests only
        assert {b.get("from") for b in json.loads(second.stdout)["blobs"]} == {"cache"}
        _check_layout_blobs(tmp_path / "b", one)
        # a blob being written (its .gpuclinic-part beside it) and the arm64 pull under a tiny cap
        busy = blobdir / ("0" * 64)
        busy.write_bytes(b"x" * 1000)
        (blobdir / (busy.name + ".gpuclinic-part")).write_bytes(b"")
        old = time.time() - 3600
        for p in blobdir.iterdir():
            os.utime(p, (old, old))
        arm = _get(ref, "--platform", "linux/arm64", "-o", str(tmp_path / "c"), "--json", "--cache-max", "1K",
                   env=cenv)
    assert arm.returncode == 0, arm.stderr
    res = json.loads(arm.stdout)
    arm_blobs = {b["digest"].split(":")[1] for b in res["blobs"]} | {res["digest"].split(":")[1]}
    left = {p.name for p in blobdir.iterdir() if len(p.name) == 64}
    assert left == arm_blobs | {busy.name}  # every amd64 blob pruned; arm64 and the busy one kept
    assert res["cache"]["pruned"] >= len(one["blobs"]) and res["cache"]["freed"] >= one["size"]
    # the OCI output keeps its hard-linked blobs: skopeo still reads it
    ins = subprocess.run([env.skopeo, "inspect", f"oci:{tmp_path / 'a'}"], capture_output=True, text=True,
                         timeout=60)
    assert ins.returncode == 0, ins.stderr
    plain = _get(ref, "-o", str(tmp_path / "d"), "--cache-max", "lots", env=cenv)
    assert plain.returncode == 64 and "--cache-max must be a size" in plain.stderr
    assert not (tmp_path / "d").exists()


def _check_layout_blobs(out: Path, res: dict[str, Any]) -> None:
    for b in res["blobs"]:
        p = out / "blobs" / "sha256" / b["digest"].split(":")[1]
        assert p.stat().st_size == b["size"] and sha256_file(p) == b["digest"]


def test_cache_size_parsing_and_lru_order(tmp_path: Path) -> None:
    from gpuclinic.errors import InputError
    from gpuclinic.transfer.oci_cache import parse_size, prune

    assert parse_size("50G") == 50 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("0") == 0
    assert parse_size("1.5k") == 1536
    with pytest.raises(InputError):
        parse_size("-1G")
    d = tmp_path / "blobs" / "sha256"
    d.mkdir(parents=True)
    now = time.time()
    for i, age in enumerate((300, 100, 200)):  # blob 0 oldest, then 2, then 1
        p = d / (str(i) * 64)
        p.write_bytes(b"x" * 100)
        os.utime(p, (now - age, now - age))
    (d / "notablob.tmp").write_bytes(b"y" * 10_000)  # not a blob: neither counted nor touched
    pr = prune(tmp_path, 150, keep=set())
    assert (pr.removed, pr.freed, pr.kept_bytes) == (2, 200, 100)
    assert sorted(p.name[0] for p in d.iterdir() if len(p.name) == 64) == ["1"]
    assert (d / "notablob.tmp").exists()


def test_token_mirror_gets_blob_tokens_and_renews_them_mid_download(env: Env, tmp_path: Path) -> None:
    """A mirror that is a real docker-registry with ``auth: token`` (a test token issuer as its realm):
    its blob requests carry its own Bearer token (got with the login from docker's config.json), and
    when the token dies in the middle of the ranged download (the JWT lives 2 s; the pull takes
    several behind a capped proxy) the 401's challenge brings a new one and the ranges go on from the
    mirror.  Neither the password nor any token appears in the output."""
    tools = require("docker-registry", "openssl")
    password = "T0ken-mirr0r-pw"
    issuer = TokenIssuer(tools["openssl"], tmp_path / "issuer", "bob", password)
    mirror = Registry(tools["docker-registry"], tmp_path / "mreg", token=issuer)
    try:
        build_image(tmp_path / "src", [24 * MiB, 700])
        push(env.skopeo, tmp_path / "src", f"{env.reg.host}/test/tok:latest")
        push(env.skopeo, tmp_path / "src", f"{mirror.host}/test/tok:latest", creds=f"bob:{password}")
        assert any(r["login"] and "push" in str(r["scope"]) for r in issuer.requests)  # skopeo used it
        issuer.requests.clear()
        issuer.jwt_ttl = 2
        auth = base64.b64encode(f"bob:{password}".encode()).decode()
        with TcpProxy("127.0.0.1", mirror.port, ProxyKnobs(rate_per_conn=MiB // 2)) as px:
            docker = tmp_path / "docker"
            docker.mkdir()
            (docker / "config.json").write_text(json.dumps({"auths": {px.url: {"auth": auth}}}))
            # 8 connections at 0.5 MiB/s (about 6 s), about three 1 MiB range requests each: new ranges
            # are requested long after the first token died, several at the same moment
            r = _get(f"{env.reg.host}/test/tok", "-o", str(tmp_path / "a"), "--mirror", px.url, "--json",
                     "--connections", "8", env={"DOCKER_CONFIG": str(docker)})
            anon = _get(f"{env.reg.host}/test/tok", "-o", str(tmp_path / "b"), "--mirror", px.url, "--json",
                        env={"DOCKER_CONFIG": str(tmp_path / "none")})
            renewals = len([q for q in issuer.requests if q["login"]])
            # a token server that only hands out dead tokens: a few renewals, then the origin serves
            issuer.jwt_ttl = -5
            dead = _get(f"{env.reg.host}/test/tok", "-o", str(tmp_path / "c"), "--mirror", px.url, "--json",
                        env={"DOCKER_CONFIG": str(docker)}, timeout=120)
            dead_requests = len(issuer.requests) - renewals - 1  # minus the anonymous attempt
    finally:
        mirror.stop()
        issuer.stop()
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["seconds"] > 3  # outlived the first token
    assert all(str(px.port) in b["source"] for b in res["blobs"]), res["blobs"]
    logged_in = [q for q in issuer.requests if q["login"]]
    assert renewals >= 2  # the first token, and at least one renewal after a 401 on a blob
    assert {q["scope"] for q in logged_in} == {"repository:test/tok:pull"}
    assert {q["service"] for q in logged_in} == {TokenIssuer.service}
    _check_layout_blobs(tmp_path / "a", res)
    # without the login the mirror is skipped at once and the origin serves
    assert anon.returncode == 0, anon.stderr
    assert all(str(env.reg.port) in b["source"] for b in json.loads(anon.stdout)["blobs"])
    assert dead.returncode == 0, dead.stderr
    assert all(str(env.reg.port) in b["source"] for b in json.loads(dead.stdout)["blobs"])
    assert 1 <= dead_requests <= 12, dead_requests  # bounded: no renewal loop
    for out in (r, anon, dead):
        text = out.stdout + out.stderr
        assert password not in text and auth not in text
        assert not any(t in text or t.split(".")[2] in text for t in issuer.tokens)
