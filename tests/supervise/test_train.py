"""gpuclinic.train: atomic saves, checkpoint discovery, heartbeat, checkpoint-now signals."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gpuclinic import train


def _age(p: Path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(p, (t, t))


def test_atomic_save_bytes_and_callable(tmp_path: Path) -> None:
    p = train.atomic_save(tmp_path / "a" / "step-1.pt", b"abc")
    assert p.read_bytes() == b"abc"
    train.atomic_save(tmp_path / "a" / "step-2.pt", lambda path: Path(path).write_text("from-writer"))
    assert (tmp_path / "a" / "step-2.pt").read_text() == "from-writer"
    assert sorted(x.name for x in (tmp_path / "a").iterdir()) == ["step-1.pt", "step-2.pt"]


def test_atomic_save_failure_leaves_nothing_and_keeps_old(tmp_path: Path) -> None:
    train.atomic_save(tmp_path / "model.pt", b"good")

    def broken(path: str) -> None:
        Path(path).write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        train.atomic_save(tmp_path / "model.pt", broken)
    assert (tmp_path / "model.pt").read_bytes() == b"good"
    assert [x.name for x in tmp_path.iterdir()] == ["model.pt"]


def test_atomic_save_dir(tmp_path: Path) -> None:
    def write(d: str) -> None:
        Path(d, "model.safetensors").write_bytes(b"w")
        Path(d, "optim.pt").write_bytes(b"o")

    d = train.atomic_save_dir(tmp_path / "checkpoint-100", write)
    assert (d / train.COMPLETE_MARKER).is_file() and (d / "optim.pt").is_file()
    train.atomic_save_dir(tmp_path / "checkpoint-100", lambda x: Path(x, "v2").write_text("2"))  # replace
    assert sorted(p.name for p in d.iterdir()) == [train.COMPLETE_MARKER, "v2"]
    with pytest.raises(RuntimeError):
        train.atomic_save_dir(tmp_path / "checkpoint-200", lambda x: (_ for _ in ()).throw(RuntimeError("x")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-100"]


def test_latest_checkpoint_files_ignores_temp_and_empty(tmp_path: Path) -> None:
    for name, age in (("step-0100.pt", 30), ("step-0200.pt", 20)):
        (tmp_path / name).write_text("x")
        _age(tmp_path / name, age)
    for name in (".step-0300.pt.tmp-123", "step-0400.pt.partial", "step-0500.pt.tmp", "step-0600.pt~"):
        (tmp_path / name).write_text("x")
    (tmp_path / "step-0700.pt").write_text("")  # zero bytes: a crash before the first write
    assert train.latest_checkpoint(tmp_path) == tmp_path / "step-0200.pt"
    assert train.list_checkpoints(tmp_path) == [tmp_path / "step-0100.pt", tmp_path / "step-0200.pt"]


def test_latest_checkpoint_same_mtime_uses_step_number(tmp_path: Path) -> None:
    t = time.time() - 5  # e.g. copied with a coarse-grained timestamp
    for n in (9, 10, 2):
        (tmp_path / f"ckpt-{n}.pt").write_text("x")
        os.utime(tmp_path / f"ckpt-{n}.pt", (t, t))
    assert train.latest_checkpoint(tmp_path) == tmp_path / "ckpt-10.pt"


def test_latest_checkpoint_directories_need_a_marker_when_markers_are_used(tmp_path: Path) -> None:
    done = tmp_path / "checkpoint-100"
    done.mkdir()
    (done / "pytorch_model.bin").write_text("x")
    (done / "trainer_state.json").write_text("{}")  # HF Trainer writes it last
    _age(done / "trainer_state.json", 10)
    unfinished = tmp_path / "checkpoint-200"  # newer, but no marker: a save that died
    unfinished.mkdir()
    (unfinished / "pytorch_model.bin").write_text("x")
    dcp = tmp_path / "dcp-150"
    dcp.mkdir()
    (dcp / "__0_0.distcp").write_text("x")
    (dcp / ".metadata").write_text("x")  # torch.distributed.checkpoint writes .metadata last
    _age(dcp / ".metadata", 5)
    assert train.latest_checkpoint(tmp_path) == dcp
    assert unfinished not in train.list_checkpoints(tmp_path)


def test_unmarked_directories_are_trusted_when_nobody_uses_markers(tmp_path: Path) -> None:
    for n, age in ((1, 20), (2, 10)):
        d = tmp_path / f"epoch-{n}"
        d.mkdir()
        (d / "w.bin").write_text("x")
        _age(d, age)
    (tmp_path / "epoch-3").mkdir()  # empty: not a checkpoint
    assert train.latest_checkpoint(tmp_path) == tmp_path / "epoch-2"


def test_latest_checkpoint_missing_dir_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert train.latest_checkpoint(tmp_path / "nope") is None
    monkeypatch.delenv(train.ENV_CHECKPOINT_DIR, raising=False)
    assert train.latest_checkpoint() is None
    (tmp_path / "a.pt").write_text("x")
    monkeypatch.setenv(train.ENV_CHECKPOINT_DIR, str(tmp_path))
    assert train.latest_checkpoint() == tmp_path / "a.pt"


def test_heartbeat_thread_and_beat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hb = tmp_path / "hb"
    monkeypatch.setenv(train.ENV_HEARTBEAT, str(hb))
    train.beat()
    assert hb.exists()
    _age(hb, 100)
    with train.Heartbeat(interval_s=0.05):
        time.sleep(0.2)
    assert time.time() - hb.stat().st_mtime < 5
    monkeypatch.delenv(train.ENV_HEARTBEAT)
    train.beat()  # outside the supervisor: a no-op, never an error
    train.beat(tmp_path / "missing-dir" / "hb")


def test_checkpoint_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    prev = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        train.clear_checkpoint_request()
        train.install_checkpoint_signals()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert train.checkpoint_requested() and not train.stop_requested()
        train.clear_checkpoint_request()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert train.checkpoint_requested() and train.stop_requested()
        train.clear_checkpoint_request()
        assert not train.checkpoint_requested()
    finally:
        for s, h in prev.items():
            signal.signal(s, h)


def test_resume_and_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(train.ENV_RESUME_FROM, raising=False)
    monkeypatch.delenv(train.ENV_ATTEMPT, raising=False)
    assert train.resume_from() is None and train.attempt() == 1
    monkeypatch.setenv(train.ENV_RESUME_FROM, "/ck/step-3.pt")
    monkeypatch.setenv(train.ENV_ATTEMPT, "3")
    assert train.resume_from() == "/ck/step-3.pt" and train.attempt() == 3
