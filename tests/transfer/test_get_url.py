"""`gpuclinic get URL` against the simulator: speed-ups, failures, resume, verification, errors."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.transfer.engine import Engine, EngineOptions, FileResult, FileSpec
from gpuclinic.transfer.wansim import Knobs, WanSim

from .conftest import MiB, blob


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ".gpuclinic-" in p.name)


def test_parallel_ranged_download_verified(tmp_path: Path, run_cli: Any) -> None:
    data, sha = blob(8 * MiB)
    with WanSim(Knobs(rate_per_conn=8 * MiB, latency=0.01)) as s:
        url = s.add_file("model.bin", data)
        r = run_cli("get", url, "-o", str(tmp_path), "--sha256", sha, "--json")
        assert r.code == 0, r.err
        res = json.loads(r.out.strip().splitlines()[-1])
        assert res["status"] == "ok" and res["sha256"] == sha and res["size"] == len(data)
        assert _sha(tmp_path / "model.bin") == sha
        # really parallel (one 8 MiB/s stream would need 1 s): at least 4 responses streamed at
        # once, over several ranged requests, and little fetched twice (abandoned speculative requests).
        # A wall-clock bound here
        # failed on a busy CI box although the download was parallel.
    assert s.stats.max_active >= 4
    assert s.stats.statuses[206] >= 4
    assert len(data) <= s.served("model.bin") <= len(data) * 1.5
    assert _leftovers(tmp_path) == []


def test_rst_drops_complete_with_right_sha(tmp_path: Path) -> None:
    # ~once per 50 MiB in the field; scaled up for a 24 MiB file so that several resets happen
    data, sha = blob(24 * MiB, 2)
    with WanSim(Knobs(rate_per_conn=16 * MiB, drop_per_mib=0.15, drop_mode="rst", seed=3)) as s:
        url = s.add_file("f.bin", data)
        dest = tmp_path / "f.bin"
        res = Engine(EngineOptions(connections=8)).run([FileSpec(dest, [url], sha256=sha)])[0]
        assert res.status == "ok", res.error
        assert s.stats.drops >= 1
        # retries resume where they stopped: little is fetched twice
        assert s.served("f.bin") <= len(data) * 1.25
    assert _sha(dest) == sha


def test_fin_drops_and_stall_recovered(tmp_path: Path) -> None:
    data, sha = blob(6 * MiB, 3)
    knobs = Knobs(
        rate_per_conn=16 * MiB,
        drop_mode="fin",
        drop_at_bytes=[MiB],
        stall_at_bytes=[3 * MiB],
        stall_seconds=30,
    )
    with WanSim(knobs) as s:
        url = s.add_file("f.bin", data)
        dest = tmp_path / "f.bin"
        t = time.monotonic()
        res = Engine(EngineOptions(connections=4, stall_timeout=0.7)).run(
            [FileSpec(dest, [url], sha256=sha)]
        )[0]
        assert res.status == "ok", res.error
        assert time.monotonic() - t < 10
        assert s.stats.drops == 1 and s.stats.stalls == 1
    assert _sha(dest) == sha


def test_429_retry_after_honoured(tmp_path: Path) -> None:
    data, sha = blob(2 * MiB, 4)
    with WanSim(Knobs(fail_next=[429, 503], retry_after=1)) as s:
        url = s.add_file("f.bin", data)
        t = time.monotonic()
        res = Engine(EngineOptions(connections=1)).run([FileSpec(tmp_path / "f", [url], sha256=sha)])[0]
        dt = time.monotonic() - t
        assert res.status == "ok", res.error
        assert s.stats.statuses[429] == 1 and s.stats.statuses[503] == 1
        assert dt >= 2.0  # two waits of Retry-After: 1
    assert _sha(tmp_path / "f") == sha


def test_many_429_shrinks_connections(tmp_path: Path) -> None:
    data, sha = blob(8 * MiB, 5)
    with WanSim(Knobs(rate_per_conn=8 * MiB, max_active=4, retry_after=0.2)) as s:
        url = s.add_file("f.bin", data)
        eng = Engine(EngineOptions(initial_connections=16))
        res = eng.run([FileSpec(tmp_path / "f", [url], sha256=sha)])[0]
        assert res.status == "ok", res.error
        assert s.stats.statuses[429] >= 1
        assert eng.target < 16


def test_corrupt_mirror_detected_and_completed_from_other_source(tmp_path: Path, run_cli: Any) -> None:
    data, sha = blob(4 * MiB, 6)
    with WanSim(Knobs(corrupt=True)) as bad, WanSim(Knobs()) as good:
        u_bad = bad.add_file("f.bin", data)
        u_good = good.add_file("f.bin", data)
        dest = tmp_path / "f.bin"
        r = run_cli("get", u_bad, "--mirror", u_good, "-o", str(dest), "--sha256", sha, "--json")
        assert r.code == 0, r.err
        assert _sha(dest) == sha
        assert bad.served("f.bin") >= len(data) and good.served("f.bin") >= len(data)
    assert _leftovers(tmp_path) == []


def test_corrupt_without_mirror_fails_and_leaves_nothing(tmp_path: Path, run_cli: Any) -> None:
    data, sha = blob(2 * MiB, 7)
    with WanSim(Knobs(corrupt=True)) as bad:
        url = bad.add_file("f.bin", data)
        r = run_cli("get", url, "-o", str(tmp_path / "f.bin"), "--sha256", sha, "-q")
    assert r.code != 0
    assert "sha256 mismatch" in r.err and len(r.err.strip().splitlines()) == 1
    assert not (tmp_path / "f.bin").exists()
    assert _leftovers(tmp_path) == []


def test_expired_signed_redirect_is_re_resolved(tmp_path: Path) -> None:
    data, sha = blob(4 * MiB, 8)
    with WanSim(Knobs(rate_per_conn=1 * MiB, cdn_ttl=60)) as s:
        s.add_repo("o/r", {"w.bin": data})
        commit = s.repos[("model", "o/r")].commit
        url = f"{s.base_url}/o/r/resolve/{commit}/w.bin"
        blob_sha = s.repos[("model", "o/r")].sha256["w.bin"]

        def expire_once_streaming() -> None:
            # the cached signed URL dies mid-download (a 1-s TTL raced the CPU on a busy CI box:
            # sometimes nothing expired, sometimes every fresh URL did)
            deadline = time.monotonic() + 30
            while s.served(blob_sha) < MiB // 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            s.expire_signed_urls()

        th = threading.Thread(target=expire_once_streaming, daemon=True)
        th.start()
        res = Engine(EngineOptions(connections=2)).run(
            [FileSpec(tmp_path / "w", [url], sha256=sha, size=len(data))]
        )[0]
        th.join(5)
        assert res.status == "ok", res.error
    # the later chunk requests hit the dead URL, re-resolved through the origin and went on
    assert s.stats.statuses[403] >= 1 and s.stats.statuses[302] >= 2
    assert s.served(blob_sha) <= len(data) * 1.1
    assert _sha(tmp_path / "w") == sha


def test_resume_from_state_file_refetches_little(tmp_path: Path) -> None:
    data, sha = blob(32 * MiB, 9)
    dest = tmp_path / "f.bin"
    with WanSim(Knobs(rate_per_conn=4 * MiB)) as s:
        url = s.add_file("f.bin", data)
        eng = Engine(EngineOptions(connections=4))
        th = threading.Thread(target=lambda: eng.run([FileSpec(dest, [url], sha256=sha)]), daemon=True)
        th.start()
        while s.served("f.bin") < 12 * MiB:
            time.sleep(0.01)
        eng.stop.set()  # like Ctrl-C: state saved on the way out
        th.join(10)
        state = json.loads((tmp_path / "f.bin.gpuclinic-state").read_text())
        assert state["size"] == len(data) and state["piece"] == 256 * 1024
        first = s.served("f.bin")
        res = Engine(EngineOptions(connections=4)).run([FileSpec(dest, [url], sha256=sha)])[0]
        assert res.status == "ok" and res.reused > 0
        assert s.served("f.bin") / len(data) <= 1.02, (first, s.served("f.bin"))
    assert _sha(dest) == sha
    assert _leftovers(tmp_path) == []


@pytest.mark.slow
def test_kill9_at_half_then_rerun_fetches_at_most_2_percent_extra(tmp_path: Path) -> None:
    """kill -9 a real `gpuclinic get` at 50 %, rerun, count bytes served.

    The server freezes all bodies at 50 % before the kill, so that bytes still sitting in loopback
    socket buffers (which depend on how much CPU this shared CI box gives the client, not on the
    engine) do not blur what is tested: the state file must record everything received, and the
    rerun must fetch only the rest.  bench/resume_kill9.py measures the unfrozen case on 200 MiB.
    """
    data, sha = blob(32 * MiB, 10)
    dest = tmp_path / "f.bin"
    with WanSim(Knobs(rate_per_conn=4 * MiB, latency=0.005, pause_at_bytes=len(data) // 2)) as s:
        url = s.add_file("f.bin", data)
        cmd = [
            sys.executable,
            "-m",
            "gpuclinic",
            "get",
            url,
            "-o",
            str(dest),
            "--sha256",
            sha,
            "-q",
            "--connections",
            "4",
        ]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not s.knobs.paused and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.8)  # > save_interval: the client has read and recorded all it was sent
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        assert not dest.exists() and (tmp_path / "f.bin.gpuclinic-part").exists()
        half = s.served("f.bin")
        s.knobs.paused = False
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        ratio = s.served("f.bin") / len(data)
        assert 0.45 < half / len(data) < 0.6
        assert ratio <= 1.02, ratio
    assert _sha(dest) == sha
    assert _leftovers(tmp_path) == []


def test_404_and_bad_urls_one_line_no_partial(tmp_path: Path, run_cli: Any, sim: WanSim) -> None:
    dest = tmp_path / "x.bin"
    r = run_cli("get", sim.base_url + "/files/nope.bin", "-o", str(dest))
    assert r.code != 0 and "404" in r.err and len(r.err.strip().splitlines()) == 1
    assert "Traceback" not in r.err
    assert list(tmp_path.iterdir()) == []
    r = run_cli("get", "ftp://example.invalid/x", "-o", str(dest))
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1
    r = run_cli("get", "url", "notaurl")
    assert r.code != 0 and "not an http(s) URL" in r.err
    r = run_cli("get", "https://127.0.0.1:1/x.bin", "-o", str(dest), "-q")  # nothing listens on port 1
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_disk_space_checked_before_start(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, sha = blob(3 * MiB, 11)
    with WanSim(Knobs(rate_per_conn=2 * MiB)) as sim:
        url = sim.add_file("f.bin", data)
        monkeypatch.setenv("GPUCLINIC_FAKE_FREE_BYTES", str(10 * MiB))
        r = run_cli("get", url, "-o", str(tmp_path / "f.bin"))
        assert r.code != 0 and "not enough disk space" in r.err
        assert list(tmp_path.iterdir()) == []
        assert sim.served("f.bin") < len(data) // 2  # stopped right after the first response headers


def test_redact_helpers() -> None:
    from gpuclinic.transfer.redact import add_secret, redact, safe_url

    add_secret("s3cr3t-value")
    assert "s3cr3t" not in redact("token=s3cr3t-value in text")
    assert "hf_abc" not in redact("Authorization: Bearer hf_abcdefghijklmnopqrstuvwxyz")
    u = safe_url("https://user:pw@cdn.example/x?Expires=1&Signature=abc&X-Amz-Credential=k")
    assert "pw" not in u and "abc" not in u and "Expires=1" in u


def test_speculative_first_requests_do_not_refetch(tmp_path: Path) -> None:
    """Size unknown: the probe and speculative ranged requests go out together; ranges past the end
    get 416 and are dropped, and no byte is fetched twice.

    Structural (main saw 1.052 > 1.05 once under load): every body byte the engine read was written
    exactly once (``downloaded`` == size).  What the server pushed into an abandoned response before
    the client closed it depends on scheduling, so the served bound is only a loose sanity check.
    """
    data, sha = blob(6 * MiB + 12345, 12)
    with WanSim(Knobs(rate_per_conn=8 * MiB, latency=0.02)) as s:
        url = s.add_file("f.bin", data)
        res = Engine(EngineOptions(initial_connections=8)).run([FileSpec(tmp_path / "f", [url], sha256=sha)])[
            0
        ]
        assert res.status == "ok", res.error
        assert s.stats.statuses[416] >= 1
        assert res.downloaded == len(data) and res.reused == 0, res
        assert s.served("f.bin") <= len(data) * 1.25
    assert _sha(tmp_path / "f") == sha


def test_verified_existing_file_is_not_fetched_again(tmp_path: Path, run_cli: Any, sim: WanSim) -> None:
    data, sha = blob(MiB, 13)
    url = sim.add_file("f.bin", data)
    dest = tmp_path / "f.bin"
    assert run_cli("get", url, "-o", str(dest), "--sha256", sha, "-q").code == 0
    served = sim.served("f.bin")
    r = run_cli("get", url, "-o", str(dest), "--sha256", sha, "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "skipped"
    assert sim.served("f.bin") == served
    dest.write_bytes(b"x" * len(data))  # wrong content: refused without --force (issue 14), kept as it was
    r = run_cli("get", url, "-o", str(dest), "--sha256", sha, "-q")
    assert r.code == 64 and "--force" in r.err and dest.read_bytes() == b"x" * len(data)
    assert sim.served("f.bin") == served
    assert (
        run_cli("get", url, "-o", str(dest), "--sha256", sha, "-q", "--force").code == 0
    )  # replaced atomically
    assert _sha(dest) == sha


def test_existing_different_file_is_not_overwritten_without_force(
    tmp_path: Path, run_cli: Any, sim: WanSim
) -> None:
    """Issue 14: `get URL -o FILE` silently replaced someone's file."""
    data, sha = blob(100_000, 23)
    url = sim.add_file("f.bin", data)
    dest = tmp_path / "f.bin"
    dest.write_text("my notes\n")
    r = run_cli("get", url, "-o", str(dest))
    assert r.code == 64 and "already exists" in r.err and "--force" in r.err and "--sha256" in r.err
    assert dest.read_text() == "my notes\n" and sim.served("f.bin") == 0
    r = run_cli("get", url, "-o", str(tmp_path), "-q")  # a directory as -o: the same file name inside it
    assert r.code == 64 and dest.read_text() == "my notes\n"
    r = run_cli("get", url, "-o", str(dest), "--force", "-q")
    assert r.code == 0 and _sha(dest) == sha
    assert _leftovers(tmp_path) == []


def test_server_without_range_support_single_stream(tmp_path: Path) -> None:
    data, sha = blob(3 * MiB + 7, 14)
    with WanSim(Knobs(no_ranges=True, rate_per_conn=16 * MiB)) as s:
        url = s.add_file("f.bin", data)
        res = Engine(EngineOptions()).run([FileSpec(tmp_path / "f", [url], sha256=sha)])[0]
        assert res.status == "ok", res.error
        assert s.stats.statuses[206] == 0
    assert _sha(tmp_path / "f") == sha


def test_wrong_sha256_from_a_server_without_ranges_fails_instead_of_hanging(tmp_path: Path) -> None:
    # a range-less server (python -m http.server) once left the engine waiting forever after a mismatch
    data, _sha256 = blob(300_000, 15)
    with WanSim(Knobs(no_ranges=True)) as s:
        url = s.add_file("f.bin", data)
        box: list[FileResult] = []
        th = threading.Thread(
            target=lambda: box.append(
                Engine(EngineOptions()).run([FileSpec(tmp_path / "f", [url], sha256="0" * 64)])[0]
            ),
            daemon=True,
        )
        th.start()
        th.join(30)
        assert not th.is_alive(), "engine hung after a sha256 mismatch"
        res = box[0]
        assert res.status == "failed" and "sha256 mismatch" in str(res.error)
        assert s.served("f.bin") >= 2 * len(data)  # fetched again, then given up
    assert list(tmp_path.iterdir()) == []


def _kill9_half_way(cmd: list[str], s: WanSim, part: Path) -> None:
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not s.knobs.paused and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.8)  # > save_interval: the state file records the half that arrived
    os.kill(p.pid, signal.SIGKILL)
    p.wait(10)
    assert part.exists()


@pytest.mark.slow
def test_kill9_from_a_server_that_ignores_range_starts_over_with_a_message(tmp_path: Path) -> None:
    """Issue 14.1: a rerun after kill -9 against a server that ignores Range (python -m http.server)
    used to fail with "server ignored the Range header ... rerun to resume" forever."""
    data, sha = blob(8 * MiB, 21)
    dest = tmp_path / "f.bin"
    with WanSim(Knobs(no_ranges=True, rate_per_conn=4 * MiB, pause_at_bytes=len(data) // 2)) as s:
        url = s.add_file("f.bin", data)
        cmd = [sys.executable, "-m", "gpuclinic", "get", url, "-o", str(dest), "--sha256", sha, "-q"]
        _kill9_half_way(cmd, s, tmp_path / "f.bin.gpuclinic-part")
        s.knobs.paused = False
        s.knobs.rate_per_conn = None
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "ignored the Range header" in r.stderr and "starting over" in r.stderr, r.stderr
        assert len(data) * 1.4 <= s.served("f.bin") <= len(data) * 1.6  # half, then the whole file once
    assert _sha(dest) == sha
    assert _leftovers(tmp_path) == []


def test_resume_against_python_http_server_starts_over_and_says_so(tmp_path: Path) -> None:
    """The issue's repro with the real server: python3 -m http.server never answers 206."""
    data, sha = blob(4 * MiB, 22)
    srv_dir = tmp_path / "srv"
    srv_dir.mkdir()
    (srv_dir / "f.bin").write_bytes(data)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "f.bin"
    # a partial download with its state, as a kill -9 leaves it (made against the simulator)
    with WanSim(Knobs(no_ranges=True, rate_per_conn=2 * MiB, pause_at_bytes=len(data) // 2)) as s:
        url = s.add_file("f.bin", data)
        cmd = [sys.executable, "-m", "gpuclinic", "get", url, "-o", str(dest), "--sha256", sha, "-q"]
        _kill9_half_way(cmd, s, out / "f.bin.gpuclinic-part")
        s.knobs.paused = False
    assert (out / "f.bin.gpuclinic-state").exists()
    srv = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"],
        cwd=srv_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert srv.stdout is not None
        line = srv.stdout.readline()  # "Serving HTTP on 127.0.0.1 port NNNNN (http://127.0.0.1:NNNNN/) ..."
        port = int(line.split(" port ")[1].split()[0])
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuclinic",
                "get",
                f"http://127.0.0.1:{port}/f.bin",
                "-o",
                str(dest),
                "--sha256",
                sha,
                "-q",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        srv.kill()
        srv.wait(10)
    assert r.returncode == 0, r.stderr
    assert "ignored the Range header" in r.stderr and "starting over" in r.stderr, r.stderr
    assert "rerun the same command" not in r.stderr
    assert _sha(dest) == sha
    assert _leftovers(out) == []
