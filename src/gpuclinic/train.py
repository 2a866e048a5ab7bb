"""Tiny, dependency-free helpers for training scripts run under ``gpuclinic run``.

Nothing here imports a framework, so any script can use it::

    from gpuclinic import train

    train.install_checkpoint_signals()          # SIGUSR1/SIGTERM -> "checkpoint now" flag
    hb = train.Heartbeat().start()              # touches $GPUCLINIC_HEARTBEAT every 10 s
    start = train.resume_from()                 # newest complete checkpoint, or None
    for step in range(...):
        ...
        train.beat()                            # or rely on the thread
        if step % 500 == 0 or train.checkpoint_requested():
            train.atomic_save(f"ckpt/step-{step}.pt", lambda p: torch.save(state, p))
            train.clear_checkpoint_request()

Completeness convention (what :func:`latest_checkpoint` and the supervisor trust):

* a checkpoint FILE is complete when it exists under its final name: :func:`atomic_save` writes a
  hidden temp file next to it, fsyncs it and renames it into place, so a crash leaves only a temp
  file (``.name.tmp-…``), which is ignored;
* a checkpoint DIRECTORY is complete when it holds the marker ``.gpuclinic-complete`` (written last by
  :func:`atomic_save_dir`), or a framework's own last-written file (``.metadata`` of
  torch.distributed.checkpoint, ``trainer_state.json`` of the Hugging Face Trainer).  Unmarked
  directories are trusted only when no directory in the folder uses any marker.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

ENV_HEARTBEAT = "GPUCLINIC_HEARTBEAT"
ENV_RESUME_FROM = "GPUCLINIC_RESUME_FROM"
ENV_CHECKPOINT_DIR = "GPUCLINIC_CHECKPOINT_DIR"
ENV_ATTEMPT = "GPUCLINIC_ATTEMPT"

COMPLETE_MARKER = ".gpuclinic-complete"
# Files frameworks write last into a checkpoint directory (so their presence means "complete").
FRAMEWORK_MARKERS = (".metadata", "trainer_state.json")
_TEMP_SUFFIXES = (".tmp", ".temp", ".partial", ".part", ".incomplete", ".inprogress", ".lock")
_TEMP_INFIX = re.compile(r"\.(tmp|partial|incomplete)[-.]", re.IGNORECASE)

# ---------------------------------------------------------------- heartbeat


def heartbeat_path() -> str | None:
    """The heartbeat file the supervisor watches (``$GPUCLINIC_HEARTBEAT``), or None outside it."""
    return os.environ.get(ENV_HEARTBEAT) or None


def beat(path: str | os.PathLike[str] | None = None) -> None:
    """Touch the heartbeat file: "this process is still making progress".  Never raises."""
    p = os.fspath(path) if path is not None else heartbeat_path()
    if not p:
        return
    try:
        with open(p, "a"):
            pass
        os.utime(p, None)
    except OSError:
        pass


class Heartbeat:
    """Beats from a daemon thread every ``interval_s``; call :meth:`stop` (or use ``with``).

    A thread keeps beating while the main loop is stuck inside one long collective, so for hang
    detection prefer calling :func:`beat` from the training loop itself; the thread is for scripts
    that only want "process alive" semantics.
    """

    def __init__(self, interval_s: float = 10.0, path: str | os.PathLike[str] | None = None) -> None:
        self.interval_s = interval_s
        self.path = os.fspath(path) if path is not None else heartbeat_path()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        if self.path and self._thread is None:
            beat(self.path)
            self._thread = threading.Thread(target=self._loop, name="gpuclinic-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            beat(self.path)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------- checkpoint-now requests

_requested = threading.Event()
_last_signal: int | None = None


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _last_signal
    _last_signal = signum
    _requested.set()


def install_checkpoint_signals(signals: Iterable[int] = (signal.SIGUSR1, signal.SIGTERM)) -> None:
    """Turn these signals into a "checkpoint now" request instead of killing the process.

    The supervisor sends SIGTERM on a graceful stop and waits ``--stop-timeout`` before SIGKILL: a
    script that checks :func:`checkpoint_requested` each step can save and exit in that window.
    Must be called from the main thread.
    """
    for s in signals:
        signal.signal(s, _on_signal)


def checkpoint_requested() -> bool:
    """True once a checkpoint signal arrived (until :func:`clear_checkpoint_request`)."""
    return _requested.is_set()


def stop_requested() -> bool:
    """True when the request came from SIGTERM/SIGINT: save, then exit."""
    return _requested.is_set() and _last_signal in (signal.SIGTERM, signal.SIGINT)


def clear_checkpoint_request() -> None:
    global _last_signal
    _requested.clear()
    _last_signal = None


# ---------------------------------------------------------------- saving


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_save(
    path: str | os.PathLike[str],
    data: bytes | Callable[[str], Any],
    *,
    fsync: bool = True,
) -> Path:
    """Write a checkpoint file so that it either exists complete under ``path`` or not at all.

    ``data`` is bytes, or a callable that writes to the path it is given (``lambda p: torch.save(s, p)``).
    The temp file lives in the same folder (same filesystem, so the rename is atomic) and is
    removed if writing fails.
    """
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
    try:
        if isinstance(data, (bytes, bytearray, memoryview)):
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
        else:
            os.close(fd)
            data(tmp)
            if fsync:
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(dest.parent)
    return dest


def atomic_save_dir(
    path: str | os.PathLike[str],
    writer: Callable[[str], Any],
    *,
    fsync: bool = True,
) -> Path:
    """Write a checkpoint DIRECTORY atomically: fill a temp dir, write the marker last, rename.

    ``writer`` receives the temp directory path and writes any files into it.  An existing
    directory at ``path`` is replaced.
    """
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        writer(str(tmp))
        marker = tmp / COMPLETE_MARKER
        marker.write_text(f"{time.time():.3f}\n")
        if fsync:
            for root, _dirs, files in os.walk(tmp):
                for name in files:
                    with open(os.path.join(root, name), "rb") as f:
                        os.fsync(f.fileno())
            _fsync_dir(tmp)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if fsync:
        _fsync_dir(dest.parent)
    return dest


# ---------------------------------------------------------------- finding the newest checkpoint


def is_temp_name(name: str) -> bool:
    """Names used for in-progress writes by us and by common tools (never a finished checkpoint)."""
    low = name.lower()
    if low.startswith(".") or low.startswith("~") or low.endswith("~"):
        return True
    if low.endswith(_TEMP_SUFFIXES):
        return True
    return bool(_TEMP_INFIX.search(low))


def _natural_key(name: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", name)
    return tuple(int(n) for n in nums[-3:])


def _dir_marker(d: Path) -> Path | None:
    for m in (COMPLETE_MARKER, *FRAMEWORK_MARKERS):
        p = d / m
        if p.is_file():
            return p
    return None


def list_checkpoints(directory: str | os.PathLike[str]) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first (by completion time, then step number)."""
    root = Path(directory)
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    files: list[tuple[float, tuple[int, ...], Path]] = []
    dirs: list[tuple[Path, os.stat_result, Path | None]] = []
    for e in entries:
        if is_temp_name(e.name):
            continue
        p = Path(e.path)
        try:
            st = os.stat(p)  # follows symlinks (e.g. a "last.ckpt" link)
        except OSError:
            continue
        if p.is_dir():
            dirs.append((p, st, _dir_marker(p)))
        elif p.is_file() and st.st_size > 0:
            files.append((st.st_mtime, _natural_key(e.name), p))
    marked = any(m is not None for _, _, m in dirs)
    for p, st, m in dirs:
        if m is not None:
            try:
                files.append((os.stat(m).st_mtime, _natural_key(p.name), p))
            except OSError:
                continue
        elif not marked:
            try:
                if any(True for _ in os.scandir(p)):
                    files.append((st.st_mtime, _natural_key(p.name), p))
            except OSError:
                continue
    files.sort(key=lambda t: (t[0], t[1], t[2].name))
    return [p for _, _, p in files]


def latest_checkpoint(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """The newest complete checkpoint in ``directory`` (default ``$GPUCLINIC_CHECKPOINT_DIR``)."""
    d = directory if directory is not None else os.environ.get(ENV_CHECKPOINT_DIR)
    if not d:
        return None
    found = list_checkpoints(d)
    return found[-1] if found else None


def resume_from() -> str | None:
    """The checkpoint the supervisor asks this attempt to resume from, if any."""
    return os.environ.get(ENV_RESUME_FROM) or None


def attempt() -> int:
    """1 for the first start, 2 for the first restart, ... (1 outside the supervisor)."""
    try:
        return int(os.environ.get(ENV_ATTEMPT, "1"))
    except ValueError:
        return 1
