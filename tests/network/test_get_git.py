"""`get git` against local `git daemon`s on 127.0.0.1 (origin and mirror), with a proxy that breaks
transfers."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclinic.errors import InputError
from gpuclinic.transfer.git import (
    GitCloneError,
    classify,
    clone,
    default_dest,
    insteadof_for,
    last_error_line,
)
from ports import free_port
from realtools import require

from .servers import FlakyTcpProxy


@pytest.fixture(autouse=True)
def _need_git() -> None:
    require("git")


GITCONFIG = (
    '[user]\n\tname = Someone\n[url "https://example.invalid/"]\n\tinsteadOf = https://unrelated.example/\n'
)


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=60
    ).stdout


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A throwaway HOME with a known ~/.gitconfig that must come out byte-identical."""
    h = tmp_path / "home"
    h.mkdir()
    (h / ".gitconfig").write_text(GITCONFIG)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.chdir(tmp_path)
    yield h
    assert (h / ".gitconfig").read_text() == GITCONFIG


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Bare repo 'repo.git' (3 commits, ~600 kB of incompressible files) behind two git daemons."""
    root = tmp_path_factory.mktemp("gitsrv")
    env = {**os.environ, "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
    work = root / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, env=env)
    for i in range(3):
        (work / f"f{i}.bin").write_bytes(os.urandom(200_000))
        (work / f"readme{i}.txt").write_text(f"commit {i}\n")
        subprocess.run(["git", "add", "."], cwd=work, check=True, env=env)
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"c{i}"],
            cwd=work,
            check=True,
            env=env,
        )
    daemons = []
    ports: dict[str, int] = {}
    for name in ("origin", "mirror", "nofilter"):  # nofilter: a server that does not do partial clone
        base = root / name
        base.mkdir()
        bare = base / "repo.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, env=env)
        for kv in ("uploadpack.allowFilter=true", "uploadpack.allowAnySHA1InWant=true")[
            : 0 if name == "nofilter" else 2
        ]:
            k, v = kv.split("=")
            subprocess.run(["git", "-C", str(bare), "config", k, v], check=True, env=env)
        port = free_port()
        d = subprocess.Popen(
            [
                "git",
                "daemon",
                "--reuseaddr",
                f"--base-path={base}",
                "--export-all",
                "--listen=127.0.0.1",
                f"--port={port}",
                str(base),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        daemons.append(d)
        ports[name] = port
    deadline = time.monotonic() + 10
    for port in ports.values():
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    yield ports
    for d in daemons:
        d.terminate()
        d.wait(5)


def quiet_log() -> tuple[list[str], object]:
    msgs: list[str] = []
    return msgs, msgs.append


def test_blobless_clone_by_default(served: dict[str, int]) -> None:
    url = f"git://127.0.0.1:{served['origin']}/repo.git"
    msgs, log = quiet_log()
    res = clone(url, quiet=True, log=log)  # type: ignore[arg-type]
    assert res.dest == Path("repo") and res.source == "origin" and len(res.attempts) == 1
    assert (res.dest / "f2.bin").stat().st_size == 200_000
    assert _git("config", "remote.origin.partialclonefilter", cwd=res.dest).strip() == "blob:none"
    assert _git("rev-list", "--count", "HEAD", cwd=res.dest).strip() == "3"


def test_shallow_clone_has_one_commit(served: dict[str, int]) -> None:
    url = f"git://127.0.0.1:{served['origin']}/repo.git"
    from gpuclinic.cli.get_git import git_cmd

    r = CliRunner().invoke(git_cmd, [url, "shallow", "--shallow", "-q"], standalone_mode=False)
    assert r.exception is None, r.output
    assert _git("rev-list", "--count", "HEAD", cwd=Path("shallow")).strip() == "1"


def test_broken_transfer_is_retried(served: dict[str, int]) -> None:
    with FlakyTcpProxy(served["origin"], plan=[50_000]) as px:  # first connection dies mid-pack
        url = f"git://127.0.0.1:{px.port}/repo.git"
        msgs, log = quiet_log()
        res = clone(url, "out", strategy="shallow", quiet=True, backoff_s=0.05,
                    log=log)  # type: ignore[arg-type]
    assert [a.rc == 0 for a in res.attempts] == [False, True]
    assert res.attempts[0].error and classify(res.attempts[0].error) == "transient"
    assert any("retrying" in m for m in msgs)
    assert (Path("out") / "f0.bin").exists()


def test_checkout_fetch_failure_resumes_in_the_partial_clone(served: dict[str, int]) -> None:
    # connection 1 (history) passes, connection 2 (blobs fetched on demand at checkout) is cut
    with FlakyTcpProxy(served["origin"], plan=["ok", 3000]) as px:
        url = f"git://127.0.0.1:{px.port}/repo.git"
        msgs, log = quiet_log()
        res = clone(url, "partial", quiet=True, backoff_s=0.05, log=log)  # type: ignore[arg-type]
        assert px.count == 3  # history once, blobs twice: nothing fetched again from scratch
    assert res.resumed and [a.kind for a in res.attempts] == ["clone", "resume"]
    assert (Path("partial") / "f1.bin").stat().st_size == 200_000
    assert _git("status", "--porcelain", cwd=Path("partial")).strip() == ""


def test_falls_back_to_mirror_without_touching_git_config(served: dict[str, int], home: Path) -> None:
    dead = free_port()
    url = f"git://127.0.0.1:{dead}/repo.git"
    mirror = f"git://127.0.0.1:{served['mirror']}/"
    msgs, log = quiet_log()
    res = clone(url, "viamirror", mirrors=[mirror], quiet=True, backoff_s=0.05,
                log=log)  # type: ignore[arg-type]
    assert res.source == mirror
    assert res.config == [f"url.{mirror}.insteadOf=git://127.0.0.1:{dead}/"]
    assert [a.source for a in res.attempts] == [
        "origin",
        "origin",
        mirror,
    ]  # unreachable: 2 tries, then mirror
    assert any("falling back" in m for m in msgs)
    # the clone still names the real origin; nothing about the mirror was persisted anywhere
    assert _git("remote", "get-url", "origin", cwd=Path("viamirror")).strip() == url
    assert "insteadof" not in (Path("viamirror") / ".git" / "config").read_text().lower()


def test_mirror_first(served: dict[str, int]) -> None:
    url = f"git://127.0.0.1:{free_port()}/repo.git"
    res = clone(
        url,
        "mf",
        mirrors=[f"git://127.0.0.1:{served['mirror']}"],
        mirror_first=True,
        quiet=True,
        log=lambda m: None,
    )
    assert len(res.attempts) == 1 and res.source.endswith(f"{served['mirror']}/")


def test_missing_repo_is_not_retried(served: dict[str, int]) -> None:
    url = f"git://127.0.0.1:{served['origin']}/nope.git"
    with pytest.raises(GitCloneError) as ei:
        clone(url, "x", quiet=True, backoff_s=0.05, log=lambda m: None)
    assert "1 attempt" in str(ei.value) and "\n" not in str(ei.value)
    assert not Path("x").exists()


def test_nonempty_destination_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "busy"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    with pytest.raises(InputError):
        clone("git://127.0.0.1:1/repo.git", d, quiet=True)
    assert (d / "keep.txt").read_text() == "mine"


def test_empty_existing_destination_is_kept_after_failure(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(GitCloneError):
        clone(f"git://127.0.0.1:{free_port()}/repo.git", d, quiet=True, retries=1, log=lambda m: None)
    assert d.is_dir() and not any(d.iterdir())


@pytest.mark.parametrize(
    ("url", "mirror", "base", "prefix"),
    [
        (
            "https://github.com/org/repo",
            "https://gh-proxy.com/https://github.com/",
            "https://gh-proxy.com/https://github.com/",
            "https://github.com/",
        ),
        (
            "https://github.com/org/repo.git",
            "https://gitclone.com/github.com",
            "https://gitclone.com/github.com/",
            "https://github.com/",
        ),
        (
            "https://github.com/org/repo",
            "https://kkgithub.com",
            "https://kkgithub.com/",
            "https://github.com/",
        ),
        (
            "git://127.0.0.1:9418/repo.git",
            "git://127.0.0.1:9419/",
            "git://127.0.0.1:9419/",
            "git://127.0.0.1:9418/",
        ),
        (
            "git@github.com:org/repo.git",
            "https://gh-proxy.com/https://github.com/",
            "https://gh-proxy.com/https://github.com/",
            "git@github.com:",
        ),
    ],
)
def test_insteadof_forms(url: str, mirror: str, base: str, prefix: str) -> None:
    assert insteadof_for(url, mirror) == (base, prefix)
    # what git would do with it: the rewritten URL
    assert (base + url[len(prefix) :]).startswith(base)


def test_mirror_ids_and_names() -> None:
    from gpuclinic.transfer.git import resolve_mirror

    assert resolve_mirror("gh-proxy") == "https://gh-proxy.com/https://github.com/"
    with pytest.raises(InputError):
        resolve_mirror("no-such-mirror")
    assert default_dest("https://github.com/org/repo.git") == "repo"
    assert default_dest("git@github.com:org/thing.git") == "thing"
    assert default_dest("https://github.com/org/repo/") == "repo"


def test_error_lines_and_classes() -> None:
    tail = (
        "Cloning into 'x'...\nerror: RPC failed; curl 18 transfer closed with outstanding read data "
        "remaining\n"
        "fatal: early EOF\nfatal: fetch-pack: invalid index-pack output\n"
    )
    assert last_error_line(tail) == "fatal: fetch-pack: invalid index-pack output"
    assert classify(tail) == "transient"
    assert classify("fatal: repository 'https://github.com/a/b/' not found") == "permanent"
    assert classify("fatal: repository '/srv/typo.git' does not exist") == "permanent"  # a local path
    assert classify("fatal: Authentication failed for 'https://github.com/a/b/'") == "permanent"
    assert (
        classify("fatal: unable to access 'https://github.com/a/': Could not resolve host: github.com")
        == "dns"
    )
    assert classify("ssh: Could not resolve hostname github.com: Name or service not known") == "dns"
    assert (
        classify("fatal: unable to access 'https://github.com/a/': Failed to connect to github.com")
        == "unreachable"
    )


def test_cli_end_to_end_one_line_error_and_success(served: dict[str, int]) -> None:
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuclinic", "get", "git", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = run(f"git://127.0.0.1:{served['origin']}/missing.git", "nope", "--retries", "1")
    assert bad.returncode == 3
    assert bad.stderr.strip().splitlines()[-1].startswith("gpuclinic: error: git clone failed")
    assert "Traceback" not in bad.stderr
    dead = free_port()
    ok = run(f"git://127.0.0.1:{dead}/repo.git", "cli", "--mirror", f"git://127.0.0.1:{served['mirror']}/")
    assert ok.returncode == 0, ok.stderr
    assert "via mirror" in ok.stderr and "insteadOf" in ok.stderr
    assert (Path("cli") / "readme2.txt").read_text() == "commit 2\n"


def test_credentials_in_urls_are_scrubbed_from_errors() -> None:
    from gpuclinic.transfer.git import scrub

    line = last_error_line(
        "fatal: unable to access 'https://bob:ghp_SECRET@github.com/a/b/': Could not resolve host"
    )
    assert line and "ghp_SECRET" not in line and "https://***@github.com/a/b/" in line
    assert scrub("https://x-access-token:t0k@github.com/o/r.git") == "https://***@github.com/o/r.git"
    with pytest.raises(GitCloneError) as ei:
        clone(
            f"http://user:hunter2@127.0.0.1:{free_port()}/r.git",
            "cred",
            quiet=True,
            retries=1,
            log=lambda m: None,
        )
    assert "hunter2" not in str(ei.value)


def test_dns_failure_is_not_retried_and_says_dns() -> None:
    """Issue 14: `get git` retried a name that does not resolve."""
    msgs, log = quiet_log()
    with pytest.raises(GitCloneError) as ei:
        clone(
            "http://repo.gpuclinic-test.invalid/r.git", "dns", quiet=True, retries=3, backoff_s=0.01,
            log=log,  # type: ignore[arg-type]
        )
    msg = str(ei.value)
    assert "after 1 attempt(s)" in msg and "DNS lookup failed" in msg and "gpuclinic net" in msg, msg
    assert not any("retrying" in m for m in msgs), msgs


def test_filter_ignored_by_the_server_is_reported_as_a_full_clone(served: dict[str, int]) -> None:
    """Issue 14: "(blobless)" was claimed although git warned that --filter was ignored."""
    import sys

    url = f"git://127.0.0.1:{served['nofilter']}/repo.git"
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "get", "git", url, "nf"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "filtering not recognized by server" in r.stderr  # git's own warning, passed through
    done = [ln for ln in r.stderr.splitlines() if ln.startswith("gpuclinic: cloned")]
    assert done and "(full" in done[0] and "blobless" not in done[0], r.stderr
    assert "a full clone, not blobless" in r.stderr
    # and a server that does filter still says blobless
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "get",
            "git",
            f"git://127.0.0.1:{served['origin']}/repo.git",
            "bl",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "(blobless)" in r.stderr, r.stderr
