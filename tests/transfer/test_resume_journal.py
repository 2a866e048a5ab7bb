"""Issue 14: after kill -9 the resume state must hold every byte that reached the part file (within one
small unit per connection), so that the rerun fetches only what never arrived."""

from __future__ import annotations

import base64
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuclinic.transfer import resume
from gpuclinic.transfer.engine import JOURNAL_MIN_SIZE, Engine, EngineOptions, FileSpec
from gpuclinic.transfer.resume import JOURNAL_STEP, JOURNAL_SUFFIX, Journal
from gpuclinic.transfer.wansim import Knobs, WanSim

from .conftest import MiB, blob

PIECE = 256 * 1024


def _snapshot(path: Path, size: int, done: list[int], partial: dict[int, int], epoch: int | None) -> None:
    n = -(-size // PIECE)
    bits = bytearray(-(-n // 8))
    for i in done:
        bits[i // 8] |= 1 << (i % 8)
    resume.write_atomic(
        path,
        {
            "version": resume.STATE_VERSION,
            "size": size,
            "piece": PIECE,
            "done": base64.b64encode(bytes(bits)).decode(),
            "partial": {str(k): v for k, v in partial.items()},
            "journal": epoch,
        },
    )


def test_journal_records_of_the_current_epoch_extend_the_snapshot(tmp_path: Path) -> None:
    state, jpath = tmp_path / "f.gpuclinic-state", tmp_path / ("f" + JOURNAL_SUFFIX)
    size = 10 * PIECE + 1000
    _snapshot(state, size, done=[0], partial={3: 5000}, epoch=77)
    j = Journal(jpath, 77)
    j.record(0, PIECE, 3 * PIECE + 100)  # pieces 1 and 2 whole, 100 bytes of piece 3 (less than saved)
    j.record(1, 3 * PIECE + 4000, 3 * PIECE + 9000)  # continues piece 3's saved prefix
    j.record(2, 10 * PIECE, size)  # the short last piece, whole
    j.record(3, 6 * PIECE + 10, 8 * PIECE)  # starts inside piece 6, which has no prefix: only piece 7
    j.close()
    with jpath.open("ab") as f:  # a record of another epoch claiming the whole file is ignored
        f.write(struct.pack("<QQQ", 76, 0, size))
    s = resume.load(state, jpath)
    assert s is not None
    assert [i for i in range(s.npieces) if s.done[i]] == [0, 1, 2, 7, 10]
    assert s.partial == {3: 9000}
    assert s.recorded() == 4 * PIECE + 1000 + 9000

    j = Journal(jpath, 99)  # a new epoch (a rerun, or pieces dropped after a sha256 mismatch)
    j.record(0, 4 * PIECE, 6 * PIECE)
    j.close()
    s = resume.load(state, jpath)  # the snapshot still says 77: records of epoch 99 do not count yet
    assert s is not None and [i for i in range(s.npieces) if s.done[i]] == [0] and s.partial == {3: 5000}
    _snapshot(state, size, done=[0], partial={}, epoch=99)
    s = resume.load(state, jpath)
    assert s is not None and [i for i in range(s.npieces) if s.done[i]] == [0, 4, 5]


def test_malformed_state_is_no_state(tmp_path: Path) -> None:
    state = tmp_path / "s"
    for text in ("", "{", "[]", '{"version": 1}', '{"version": 1, "size": 10, "piece": 0, "done": ""}'):
        state.write_text(text)
        assert resume.load(state, tmp_path / "j") is None
    assert resume.load(tmp_path / "missing", tmp_path / "j") is None


def test_write_at_writes_everything_or_raises(tmp_path: Path) -> None:
    p = tmp_path / "f"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        resume.write_at(fd, b"abc" * 100_000, 5)
        resume.write_at(fd, b"Z", 0)
    finally:
        os.close(fd)
    assert p.read_bytes() == b"Z" + b"\0" * 4 + b"abc" * 100_000
    with pytest.raises(OSError):
        resume.write_at(fd, b"x", 0)  # closed descriptor: an error, never a silent loss


def _correct_bytes(part: Path, data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """Bytes of ``part`` equal to ``data``, in whole 512-byte blocks (random data never equals the
    zeros of an unwritten block), and the runs they form."""
    got = part.read_bytes()
    runs: list[tuple[int, int]] = []
    step = 512
    for i in range(0, len(data), 64 * 1024):
        j = min(len(data), i + 64 * 1024)
        blocks = (
            [(i, j)]
            if got[i:j] == data[i:j]
            else [
                (k, min(j, k + step))
                for k in range(i, j, step)
                if got[k : min(j, k + step)] == data[k : min(j, k + step)]
            ]
        )
        for a, b in blocks:
            if runs and runs[-1][1] == a:
                runs[-1] = (runs[-1][0], b)
            else:
                runs.append((a, b))
    return sum(b - a for a, b in runs), runs


@pytest.mark.slow
def test_kill9_state_holds_what_is_on_disk_without_any_snapshot_since_the_start(tmp_path: Path) -> None:
    """The engine runs in its own process with snapshots switched off after the first one (the one
    that starts the journal), so everything the state knows at the kill comes from the journal.  The
    server freezes at 50 % so that nothing is in flight at the kill: then the state must hold all
    that reached the part file but at most JOURNAL_STEP per connection, never a byte that is not
    there, and the rerun must fetch only the missing bytes: partly written pieces continue from their
    recorded byte.  The rerun uses one connection, so that no tail is split (a split costs the server
    what it sent past the cut, which has nothing to do with resuming)."""
    conns = 4
    data, sha = blob(32 * MiB, 31)
    dest = tmp_path / "f.bin"
    part = tmp_path / "f.bin.gpuclinic-part"
    engine = (
        "import sys; from pathlib import Path; "
        "from gpuclinic.transfer.engine import Engine, EngineOptions, FileSpec; "
        f"Engine(EngineOptions(connections={conns}, save_interval=3600, save_fraction=1.0)).run("
        "[FileSpec(Path(sys.argv[1]), [sys.argv[2]], sha256=sys.argv[3])])"
    )
    # frozen off any piece boundary (at exactly 16 MiB the four connections had each just finished
    # a 4 MiB request, and nothing was partly written)
    knobs = Knobs(rate_per_conn=4 * MiB, latency=0.005, pause_at_bytes=len(data) // 2 + 1_234_567)
    with WanSim(knobs) as s:
        url = s.add_file("f.bin", data)
        p = subprocess.Popen([sys.executable, "-c", engine, str(dest), url, sha], stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not s.knobs.paused and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.5)  # the client reads and writes what it was sent (far less than save_interval)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        served = s.served("f.bin")
        on_disk, runs = _correct_bytes(part, data)
        saved = resume.load(tmp_path / "f.bin.gpuclinic-state", tmp_path / ("f.bin" + JOURNAL_SUFFIX))
        assert saved is not None, "no resume state after kill -9"
        rec = saved.recorded()
        got = part.read_bytes()
        for i in range(saved.npieces):  # never claims a byte that is not in the part file
            a = i * saved.piece
            b = a + (saved.piece_len(i) if saved.done[i] else saved.partial.get(i, 0))
            assert got[a:b] == data[a:b], f"piece {i} recorded but not on disk"
        # frozen, so nothing is in flight; only the first speculative requests (sent before the size
        # was known) may have brought a block or two that was dropped
        assert served - on_disk <= 256 * 1024, (served, on_disk)
        assert rec >= on_disk - conns * JOURNAL_STEP, (rec, on_disk, runs)

        partial = len(saved.partial)
        assert partial >= 1  # pieces cut by the kill (else this test would not test their resume)
        s.knobs.rate_per_conn = 64 * MiB
        s.knobs.paused = False
        cmd = [sys.executable, "-m", "gpuclinic", "get", url, "-o", str(dest), "--sha256", sha, "-q"]
        r = subprocess.run([*cmd, "--connections", "1"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        rerun = s.served("f.bin") - served
        assert len(data) - rec <= rerun <= len(data) - rec + JOURNAL_STEP, (rerun, len(data) - rec, partial)
    assert dest.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


def test_a_file_that_fails_verification_leaves_no_journal_behind(tmp_path: Path) -> None:
    """Files from JOURNAL_MIN_SIZE on keep a journal; a download given up after sha256 mismatches
    removes it with the part and state files (a stale journal must never vouch for wrong bytes)."""
    data, sha = blob(JOURNAL_MIN_SIZE + MiB, 32)
    seen: set[str] = set()
    with WanSim(Knobs(corrupt=True, rate_per_conn=8 * MiB)) as bad:
        url = bad.add_file("f.bin", data)

        def look(what: str, job: object) -> None:
            seen.update(p.name for p in tmp_path.iterdir())

        res = Engine(EngineOptions(connections=4), on_event=look).run(
            [FileSpec(tmp_path / "f.bin", [url], sha256=sha)]
        )[0]
    assert res.status == "failed" and "sha256 mismatch" in str(res.error)
    assert "f.bin" + JOURNAL_SUFFIX in seen  # it had a journal while it ran
    assert list(tmp_path.iterdir()) == []
