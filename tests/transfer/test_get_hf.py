"""`gpuclinic get hf` against the simulated Hub: cache layout loaded by the REAL huggingface_hub offline,
errors as one line, path escapes refused, and the token never printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.transfer.hf import safe_repo_path
from gpuclinic.transfer.wansim import Knobs, WanSim
from ports import free_port

from .conftest import MiB, blob

TOKEN = "hf_TESTtokenVALUEdoNOTprint0123456789"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[WanSim]:
    with WanSim(Knobs(rate_per_conn=16 * MiB), token=TOKEN) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.base_url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
        yield s


def _offline_load(
    cache: Path, repo: str, filename: str, repo_type: str = "model", revision: str | None = None
) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        "from huggingface_hub import snapshot_download, hf_hub_download\n"
        f"p = snapshot_download({repo!r}, repo_type={repo_type!r}, revision={revision!r}, "
        "local_files_only=True)\n"
        f"f = hf_hub_download({repo!r}, {filename!r}, repo_type={repo_type!r}, revision={revision!r})\n"
        "print(p); print(f); print(open(f,'rb').read(16).hex())\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_ENDPOINT", None)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_cache_layout_loaded_offline_by_real_huggingface_hub(
    hub: WanSim, tmp_path: Path, run_cli: Any
) -> None:
    weights, sha = blob(6 * MiB, 21)
    files = {
        "config.json": b'{"model_type": "bert"}',
        "model.safetensors": weights,
        "tok/vocab.txt": b"a\nb\n",
    }
    spec = hub.add_repo("org/tiny", files)
    r = run_cli("get", "hf", "org/tiny", "--json")
    assert r.code == 0, r.err
    summary = json.loads(r.out.strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["commit"] == spec.commit and summary["files"] == 3
    repo_dir = tmp_path / "hub" / "models--org--tiny"
    assert (repo_dir / "refs" / "main").read_text() == spec.commit
    link = repo_dir / "snapshots" / spec.commit / "model.safetensors"
    assert link.is_symlink() and os.readlink(link) == f"../../blobs/{sha}"
    assert os.readlink(repo_dir / "snapshots" / spec.commit / "tok" / "vocab.txt").startswith(
        "../../../blobs/"
    )
    assert not list(repo_dir.rglob("*.gpuclinic-*"))
    out = _offline_load(tmp_path / "hub", "org/tiny", "model.safetensors")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[0] == str(repo_dir / "snapshots" / spec.commit)
    assert lines[2] == weights[:16].hex()
    # the big file went through the CDN redirect, without the token
    assert hub.served(sha) >= len(weights)
    # a second run finds the blobs and downloads nothing
    before = hub.stats.total_body
    r = run_cli("get", "hf://org/tiny", "--json")
    assert r.code == 0, r.err
    assert hub.stats.total_body - before < 2000  # only API JSON


def test_dataset_include_exclude_and_revision(hub: WanSim, tmp_path: Path, run_cli: Any) -> None:
    spec = hub.add_repo(
        "org/ds",
        {"a/1.csv": b"x,y\n", "a/2.csv": b"z\n", "b/big.parquet": blob(MiB, 3)[0]},
        repo_type="dataset",
        refs={"main": "0" * 40, "v1": "0" * 40},
        commit="0" * 40,
    )
    r = run_cli(
        "get",
        "hf",
        "org/ds",
        "--repo-type",
        "dataset",
        "--include",
        "a/*",
        "--exclude",
        "*2.csv",
        "--revision",
        "v1",
        "-q",
    )
    assert r.code == 0, r.err
    snap = tmp_path / "hub" / "datasets--org--ds" / "snapshots" / spec.commit
    assert sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_symlink()) == ["a/1.csv"]
    assert (tmp_path / "hub" / "datasets--org--ds" / "refs" / "v1").read_text() == spec.commit
    out = _offline_load(tmp_path / "hub", "org/ds", "a/1.csv", "dataset", "v1")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("gated", "gated"),
        ("private", "not found or not accessible"),
        ("missing", "not found or not accessible"),
        ("badrev", "revision not found"),
    ],
)
def test_hub_errors_are_one_line_and_never_show_the_token(
    hub: WanSim,
    run_cli: Any,
    monkeypatch: pytest.MonkeyPatch,
    setup: str,
    needle: str,
) -> None:
    hub.add_repo("org/gated", {"a": b"1"}, gated=True)
    hub.add_repo("org/private", {"a": b"1"}, private=True)
    hub.add_repo("org/ok", {"a": b"1"})
    monkeypatch.setenv("HF_TOKEN", "hf_WRONGtokenButStillSecret987654321")
    args = {
        "gated": ["org/gated"],
        "private": ["org/private"],
        "missing": ["org/nope"],
        "badrev": ["org/ok", "--revision", "nope"],
    }
    r = run_cli("get", "hf", *args[setup])
    assert r.code != 0
    assert needle in r.err.lower()
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert "hf_WRONG" not in r.err + r.out


def test_token_used_but_never_printed_nor_sent_to_cdn(
    hub: WanSim, tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights, sha = blob(2 * MiB, 22)
    hub.add_repo("org/private", {"w.bin": weights, "missing-later.txt": b"x"}, private=True)
    token_file = tmp_path / "hfhome" / "token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text(TOKEN + "\n")  # read from the token file that `huggingface-cli login` writes
    r = run_cli("get", "hf", "org/private", "--json")
    assert r.code == 0, r.err
    assert TOKEN not in r.out + r.err
    assert any(h == f"Bearer {TOKEN}" for h in hub.stats.auth_headers)
    assert not any(h.startswith("cdn ") for h in hub.stats.auth_headers)  # never forwarded off the Hub
    # a failed file download must not leak it either
    for p in (tmp_path / "hub").rglob("*"):
        if p.is_file() and not p.is_symlink() and p.stat().st_size == 1:
            p.unlink()
    hub.knobs.fail_next = [404]
    r = run_cli("get", "hf", "org/private")
    assert r.code != 0 and TOKEN not in r.out + r.err and "hf_TEST" not in r.err


def test_hub_token_is_redacted_from_progress_and_json(
    hub: WanSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add_repo("org/private", {"w.bin": blob(3 * MiB, 23)[0]}, private=True)
    env = {**os.environ, "HF_TOKEN": TOKEN, "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "get", "hf", "org/private", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert TOKEN not in r.stdout + r.stderr


@pytest.mark.parametrize(
    "name", ["../evil.txt", "a/../../evil", "/etc/passwd", "a\\..\\b", "a//b", "./x", "C:/x"]
)
def test_path_escape_refused(hub: WanSim, tmp_path: Path, run_cli: Any, name: str) -> None:
    hub.add_repo("org/evil", {"ok.txt": b"fine", name: b"pwned"})
    r = run_cli("get", "hf", "org/evil")
    assert r.code != 0 and "escape" in r.err
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "hub" / "evil.txt").exists()
    assert hub.stats.total_body < 2000  # refused before downloading anything


def test_planted_symlink_in_snapshot_refused(hub: WanSim, tmp_path: Path, run_cli: Any) -> None:
    spec = hub.add_repo("org/sl", {"sub/x.txt": b"data"})
    outside = tmp_path / "outside"
    outside.mkdir()
    snap = tmp_path / "hub" / "models--org--sl" / "snapshots" / spec.commit
    snap.mkdir(parents=True)
    (snap / "sub").symlink_to(outside)
    r = run_cli("get", "hf", "org/sl")
    assert r.code != 0 and "symlink" in r.err
    assert list(outside.iterdir()) == []


def test_safe_repo_path_accepts_normal_names() -> None:
    assert str(safe_repo_path("a/b.c")) == "a/b.c"
    assert str(safe_repo_path(".gitattributes")) == ".gitattributes"
    assert str(safe_repo_path("x..y/z")) == "x..y/z"


def test_bad_repo_id(run_cli: Any) -> None:
    r = run_cli("get", "hf", "../../etc")
    assert r.code != 0 and "not a Hugging Face repo id" in r.err


def test_many_small_files_and_shared_blobs(hub: WanSim, tmp_path: Path, run_cli: Any) -> None:
    files = {f"shards/{i:04d}.txt": b"row %d\n" % i for i in range(200)}
    files["copy/a.txt"] = files["copy/b.txt"] = b"same content\n"  # one blob, two names
    spec = hub.add_repo("org/many", files, repo_type="dataset")
    r = run_cli("get", "hf", "org/many", "--repo-type", "dataset", "--json")
    assert r.code == 0, r.err
    snap = tmp_path / "hub" / "datasets--org--many" / "snapshots" / spec.commit
    assert (snap / "shards" / "0123.txt").read_bytes() == b"row 123\n"
    assert os.readlink(snap / "copy" / "a.txt") == os.readlink(snap / "copy" / "b.txt")
    assert len(list((tmp_path / "hub" / "datasets--org--many" / "blobs").iterdir())) == 201


def test_file_list_from_paginated_tree_when_siblings_lack_sizes(
    hub: WanSim, tmp_path: Path, run_cli: Any
) -> None:
    hub.knobs.ignore_blobs = True
    hub.knobs.tree_page = 3
    weights, sha = blob(MiB, 24)
    files = {f"f{i}.txt": b"%d" % i for i in range(7)} | {"sub/w.bin": weights}
    spec = hub.add_repo("org/paged", files)
    r = run_cli("get", "hf", "org/paged", "-q")
    assert r.code == 0, r.err
    snap = tmp_path / "hub" / "models--org--paged" / "snapshots" / spec.commit
    assert sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_symlink()) == sorted(files)
    assert os.readlink(snap / "sub" / "w.bin") == f"../../../blobs/{sha}"


def _closed_port() -> int:
    return free_port()  # tests/ports.py: one the other xdist worker's servers do not take meanwhile


@pytest.mark.parametrize("kind", ["dns", "connect", "tls"])
def test_unreachable_hub_fails_fast_and_names_the_cause(
    kind: str,
    tmp_path: Path,
    run_cli: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 14: no network took 8.8 s and said only "ConnectError"."""
    import socket
    import threading
    import time

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    plain = socket.create_server(("127.0.0.1", 0))  # a plain-HTTP server: answers a ClientHello with text

    def answer() -> None:
        while True:
            try:
                c, _ = plain.accept()
            except OSError:
                return
            with c:
                c.recv(4096)
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    endpoint = {
        "dns": "https://hub.gpuclinic-test.invalid",  # .invalid never resolves (RFC 2606)
        "connect": f"http://127.0.0.1:{_closed_port()}",
        "tls": f"https://127.0.0.1:{plain.getsockname()[1]}",
    }[kind]
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    t0 = time.monotonic()
    try:
        r = run_cli("get", "hf", "org/m", "-q")
    finally:
        plain.close()
    took = time.monotonic() - t0
    assert r.code == 3, r.err
    err = r.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    want = {
        "dns": "DNS lookup of hub.gpuclinic-test.invalid failed",
        "connect": "connection refused",
        "tls": "TLS handshake",
    }[kind]
    assert want in err, err
    assert "gpuclinic net" in err and "HF_ENDPOINT" in err, err
    assert took < 3.0, took  # no retry loop on a cause that a retry cannot fix
