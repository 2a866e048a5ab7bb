"""Where grep reads a big text from, and waiting for it: the log file itself when it is unchanged since it
was read, else one in-memory copy shared by the scans of one text (``textscan`` starts the scans)."""

from __future__ import annotations

import os
import subprocess
from typing import IO

__all__ = ["file_ident", "input_file", "remember_file", "same_file", "scratch", "wait"]


def scratch() -> IO[bytes]:
    """An anonymous file for grep's input or output: in memory where the system allows (memfd, Linux),
    so a 19 MB copy of the log never becomes dirty pages of a disk, else a temporary file."""
    if hasattr(os, "memfd_create"):
        try:
            return open(os.memfd_create("gpuclinic-scan", os.MFD_CLOEXEC), "w+b")
        except OSError:
            pass
    import tempfile  # (the fallback only: memfd is there on Linux)

    return tempfile.TemporaryFile()


_INPUT: list[tuple[bytes, IO[bytes]] | None] = [None]  # the last scanned bytes in an anonymous file

_FILE: list[tuple[bytes, str, tuple[int, int, int, int]] | None] = [None]  # bytes read whole from a file


def remember_file(data: bytes, path: str, ident: tuple[int, int, int, int]) -> None:
    """``data`` is the whole content of the regular file ``path`` whose (device, inode, size, mtime_ns)
    was ``ident`` before it was read: grep may read that file instead of a copy of ``data`` (a 19 MB
    copy into memory cost more than grep's whole scan of the page-cached file)."""
    _FILE[0] = (data, path, ident)


def file_ident(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def same_file(data: bytes) -> bool:
    """grep's scan of the remembered file is a scan of ``data``: the file is still what was read (a log
    that grew or was rewritten meanwhile is scanned again from the copy)."""
    known = _FILE[0]
    if known is None or known[0] is not data:
        return True  # grep read a copy of ``data``
    try:
        return file_ident(os.stat(known[1])) == known[2]
    except OSError:
        return False


def input_file(data: bytes) -> IO[bytes]:
    """A file holding ``data``, read from its start, for grep's stdin: the file it was read from when it
    is unchanged (checked again by :func:`same_file` once grep is done), else an in-memory copy.  The
    two scans of one big text (the literals, the line starts; they run at once) share one copy: each gets
    its own handle (own offset) on the last copy, opened again through /proc, instead of a second 19 MB
    write."""
    src = _FILE[0]
    if src is not None and src[0] is data:
        try:
            fh = open(src[1], "rb")  # (the caller closes it)
            if file_ident(os.fstat(fh.fileno())) == src[2]:
                return fh
            fh.close()
        except OSError:
            pass
        _FILE[0] = None  # changed since it was read: the copy from now on
    known = _INPUT[0]
    if known is not None and known[0] is data:
        try:
            return open(f"/proc/self/fd/{known[1].fileno()}", "rb")
        except OSError:
            pass
    f = scratch()
    f.write(data)
    f.seek(0)
    try:
        mine = open(f"/proc/self/fd/{f.fileno()}", "rb")
    except OSError:
        return f  # no /proc: the caller's copy only
    if known is not None:
        known[1].close()
    _INPUT[0] = (data, f)  # only the last text's copy is kept
    return mine


def wait(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """``proc.wait(timeout)`` that returns as soon as grep exits.  ``Popen.wait`` with a timeout polls
    with sleeps that double up to 50 ms (a 60 ms grep was waited for up to ~30 ms more); a pidfd (Linux)
    becomes readable the moment the process ends.  Raises ``subprocess.TimeoutExpired`` as ``wait``."""
    if proc.returncode is None and hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:
            fd = -1
        if fd >= 0:
            import select

            try:
                poller = select.poll()  # (not select.select: no limit on the descriptor's number)
                poller.register(fd, select.POLLIN)
                ready = poller.poll(timeout * 1000)
            finally:
                os.close(fd)
            if not ready:
                raise subprocess.TimeoutExpired(proc.args, timeout)
    return proc.wait(timeout=timeout)
