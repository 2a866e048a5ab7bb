"""``gpuclinic sync``, planning part: endpoints, the ssh command, file lists, link probes, the plan.

Why: ``rsync -a`` and ``scp`` move everything over one TCP connection.  On a long or shaped path one
connection is capped (window / RTT, or a per-flow policer) far below the link, so a laptop <-> GPU
server copy crawls while the link is idle.  ``sync`` measures the path (RTT, one stream, eight
streams, CPU for compression), then runs several real ``rsync`` processes, each over its own ssh
connection, on size-balanced file lists; files too big to balance are sent as block ranges over
parallel ssh streams into a part file that is verified (sha256) and renamed atomically.

The user's ssh setup is honoured by asking ``ssh -G`` (Host aliases, ports, keys, ProxyJump) with
the same ``-e/--rsh`` command rsync would use.  Our streams disable connection sharing
(``ControlMaster=no``): multiplexed channels share one TCP connection and its cap.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gpuclinic.errors import EXIT_USAGE, GpuclinicError, InputError

MiB = 1024 * 1024
BLOCK = 2 * MiB  # resume, verification and balancing granularity of big files
BIG_MIN = 32 * MiB
PART_SUFFIX = ".gpuclinic-part"


class SyncError(GpuclinicError):
    """A sync that could not run or complete (one line; partial data is kept for a rerun)."""


@dataclass(frozen=True)
class Endpoint:
    host: str | None  # [user@]host or an ssh alias; None = local
    path: str

    def __str__(self) -> str:
        return f"{self.host}:{self.path}" if self.host else self.path


def parse_endpoint(text: str) -> Endpoint:
    """rsync's rule: ``HOST:PATH`` is remote when the colon comes before any slash."""
    if not text:
        raise InputError("empty path", exit_code=EXIT_USAGE)
    if "::" in text or text.startswith("rsync://"):
        raise InputError(f"rsync daemon paths are not supported: {text}", exit_code=EXIT_USAGE)
    head, sep, tail = text.partition(":")
    if sep and head and "/" not in head:
        return Endpoint(head, tail or ".")
    return Endpoint(None, text)


@dataclass
class Entry:
    name: str  # relative to the source root, "/"-separated
    size: int
    mtime: float
    mode: int
    kind: str  # "f" file, "l" symlink, "d" empty directory


class Ssh:
    """The ssh command for one host: the user's ``-e`` command (or ``ssh``) plus our stream options."""

    def __init__(self, host: str, rsh: str | None = None) -> None:
        self.host = host
        try:
            self.argv = shlex.split(rsh) if rsh else ["ssh"]
        except ValueError as e:
            raise InputError(f"bad -e/--rsh command: {e}", exit_code=EXIT_USAGE) from None
        if not self.argv:
            raise InputError("empty -e/--rsh command", exit_code=EXIT_USAGE)
        self._config: dict[str, str] | None = None
        # ssh compresses a whole connection, chosen when its master opens (a session's own Compression
        # option is ignored): --compress yes opens every stream's connection compressed
        self.compress_connections = False

    def stream_opts(self, compress: bool = False, control: str | None = None) -> list[str]:
        """Options of our connections.  ``control``: a socket private to one stream, so that its
        sequential sessions (rsync, dd, sha256sum) reuse one TCP connection and one handshake while
        the streams stay separate connections; never the user's shared ControlPath."""
        mux = (
            ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}", "-o", "ControlPersist=15"]
            if control
            else ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        )
        return [
            *mux,
            "-o",
            "BatchMode=yes",
            "-o",
            f"Compression={'yes' if compress or (control and self.compress_connections) else 'no'}",
            "-o",
            "ServerAliveInterval=15",
        ]

    def cmd(self, remote: str, *, compress: bool = False, control: str | None = None) -> list[str]:
        return [*self.argv, *self.stream_opts(compress, control), self.host, remote]

    def rsh(self, compress: bool = False, control: str | None = None) -> str:
        """The ``-e`` string for rsync (rsync applies its own compression, so ssh's stays off)."""
        return shlex.join([*self.argv, *self.stream_opts(compress, control)])

    def close_master(self, control: str) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [*self.argv, "-o", f"ControlPath={control}", "-O", "exit", self.host],
                capture_output=True,
                timeout=10,
            )

    def config(self) -> dict[str, str]:
        """``ssh -G HOST``: the effective configuration (aliases resolved, defaults filled in)."""
        if self._config is None:
            try:
                r = subprocess.run([*self.argv, "-G", self.host], capture_output=True, text=True, timeout=15)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise SyncError(f"cannot run {self.argv[0]}: {e}") from None
            if r.returncode != 0:
                raise SyncError(f"ssh -G {self.host}: {(r.stderr.strip().splitlines() or ['failed'])[-1]}")
            cfg: dict[str, str] = {}
            for line in r.stdout.splitlines():
                k, _, v = line.partition(" ")
                if k and k.lower() not in cfg:
                    cfg[k.lower()] = v.strip()
            self._config = cfg
        return self._config

    def run(
        self, remote: str, *, input: bytes | None = None, timeout: float = 120, control: str | None = None
    ) -> bytes:
        try:
            r = subprocess.run(
                self.cmd(remote, control=control), input=input, capture_output=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise SyncError(f"ssh {self.host}: no answer within {timeout:.0f} s") from None
        except OSError as e:
            raise SyncError(f"cannot run {self.argv[0]}: {e}") from None
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace").strip().splitlines()
            raise SyncError(f"ssh {self.host}: {err[-1] if err else f'exit {r.returncode}'}")
        return r.stdout


def q(path: str) -> str:
    return shlex.quote(path)


# ---------------------------------------------------------------------- file lists
def split_source(path: str, is_dir: bool) -> tuple[str, str]:
    """(root, start) as rsync reads SRC: ``dir/`` copies the contents, ``dir`` the directory itself."""
    if is_dir and path.endswith("/"):
        return path.rstrip("/") or "/", "."
    p = path.rstrip("/") or "/"
    parent, _, base = p.rpartition("/")
    return (parent or ("/" if p.startswith("/") else ".")), base


def list_local(path: str) -> tuple[str, list[Entry]]:
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise InputError(f"source does not exist: {path}", exit_code=EXIT_USAGE)
    root, start = split_source(path, p.is_dir())
    out: list[Entry] = []
    base = Path(root)
    top = base / start
    if not top.is_dir() or top.is_symlink():
        st = top.lstat()
        out.append(
            Entry(start, st.st_size, st.st_mtime, st.st_mode & 0o7777, "l" if top.is_symlink() else "f")
        )
        return root, out
    for d, dirs, files in os.walk(top):
        rel = os.path.relpath(d, base)
        if not dirs and not files and rel != ".":
            st = os.lstat(d)
            out.append(Entry(rel.replace(os.sep, "/"), 0, st.st_mtime, st.st_mode & 0o7777, "d"))
        for f in files:
            fp = os.path.join(d, f)
            st = os.lstat(fp)
            kind = "l" if os.path.islink(fp) else "f"
            name = os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/")
            out.append(Entry(name, st.st_size if kind == "f" else 0, st.st_mtime, st.st_mode & 0o7777, kind))
        for dn in dirs:
            dp = os.path.join(d, dn)
            if os.path.islink(dp):
                st = os.lstat(dp)
                out.append(
                    Entry(
                        os.path.normpath(os.path.join(rel, dn)).replace(os.sep, "/"),
                        0,
                        st.st_mtime,
                        0o777,
                        "l",
                    )
                )
    return root, out


def list_remote(ssh: Ssh, path: str, control: str | None = None) -> tuple[str, list[Entry]]:
    """GNU find on the server: one round trip for any number of files."""
    probe = (
        ssh.run(
            f"if [ -d {q(path)} ]; then echo d; elif [ -e {q(path)} ]; then echo f; else echo missing; fi",
            control=control,
        )
        .decode()
        .strip()
    )
    if probe == "missing":
        raise InputError(f"source does not exist on {ssh.host}: {path}", exit_code=EXIT_USAGE)
    root, start = split_source(path, probe == "d")
    return root, _find(ssh, root, start, "\\( -type f -o -type l -o -type d -empty \\)", control)


def _find(ssh: Ssh, root: str, start: str, test: str, control: str | None) -> list[Entry]:
    raw = ssh.run(
        f"cd {q(root)} && find {q(start)} {test} -printf '%y\\t%s\\t%T@\\t%m\\t%p\\0'",
        timeout=600,
        control=control,
    )
    out: list[Entry] = []
    for rec in raw.split(b"\0"):
        if not rec:
            continue
        kind, size, mtime, mode, name = rec.decode("utf-8", "surrogateescape").split("\t", 4)
        name = os.path.normpath(name).replace(os.sep, "/")
        if kind == "d" and name == start == ".":
            continue
        out.append(Entry(name, int(size) if kind == "f" else 0, float(mtime), int(mode, 8), kind))
    return out


def extraneous(src: list[Entry], dst: list[str]) -> list[str]:
    """What ``rsync --delete`` removes: destination names the source does not have, each reported
    once at its highest such directory (removing ``old/`` removes what is in it).  Our own part
    files of source files being resumed are kept."""
    names = {e.name for e in src}
    dirs = {"."} | {e.name for e in src if e.kind == "d"}
    for e in src:
        parts = e.name.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    keep = set()
    for n in names:
        d, _, base = n.rpartition("/")
        keep.add(f"{d}/.{base}{PART_SUFFIX}" if d else f".{base}{PART_SUFFIX}")
    out: set[str] = set()
    for n in dst:
        if n in names or n in dirs or n in keep:
            continue
        parts = n.split("/")
        top = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) not in dirs), n)
        out.add(top)
    return sorted(out)


def list_dest(ssh: Ssh | None, root: str, start: str, control: str | None = None) -> list[str]:
    """Every name under ``root/start`` at the destination (files, links, directories), relative to
    ``root`` like the source list; empty when it does not exist yet."""
    if ssh is not None:
        raw = ssh.run(
            f"cd {q(root)} 2>/dev/null && [ -d {q(start)} ] && find {q(start)} -mindepth 1 -print0 || true",
            timeout=600,
            control=control,
        )
        return [
            os.path.normpath(n).replace(os.sep, "/")
            for n in raw.decode("utf-8", "surrogateescape").split("\0")
            if n
        ]
    top = os.path.join(root, start)
    if not os.path.isdir(top) or os.path.islink(top):
        return []
    out: list[str] = []
    for d, dirs, files in os.walk(top):
        rel = os.path.relpath(d, root)
        out += [os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/") for f in dirs + files]
    return out


def check_names(entries: list[Entry]) -> None:
    for e in entries:
        parts = e.name.split("/")
        if e.name.startswith("/") or ".." in parts or "\n" in e.name or "\r" in e.name:
            raise SyncError(f"refusing a file name that could escape the destination: {e.name!r}")


# ---------------------------------------------------------------------- the plan
@dataclass
class Task:
    kind: str  # "rsync" (a list of names) or "range" (blocks of one big file)
    size: int
    names: list[str] = field(default_factory=list)
    name: str = ""
    first_block: int = 0
    nblocks: int = 0


def balance(entries: list[Entry], buckets: int) -> list[list[Entry]]:
    """Longest-processing-time-first: each file goes to the lightest bucket (sizes + a per-file cost)."""
    out: list[list[Entry]] = [[] for _ in range(max(1, buckets))]
    load = [0] * len(out)
    for e in sorted(entries, key=lambda e: -e.size):
        i = load.index(min(load))
        out[i].append(e)
        load[i] += e.size + 64 * 1024  # a file costs about a round of the protocol
    return [b for b in out if b]


def range_tasks(name: str, size: int, todo: list[int], streams: int) -> list[Task]:
    """Contiguous runs of missing blocks, cut so that the streams share the file evenly."""
    if not todo:
        return []
    per = max(1, math.ceil(len(todo) / max(1, streams)))
    tasks: list[Task] = []
    run: list[int] = []
    for b in todo:
        if run and (b != run[-1] + 1 or len(run) >= per):
            tasks.append(_mk_range(name, size, run))
            run = []
        run.append(b)
    if run:
        tasks.append(_mk_range(name, size, run))
    return tasks


def guided_cuts(sizes: list[int], streams: int, min_piece: int) -> list[int]:
    """Where to cut a queue of work (guided self-scheduling): each piece is about the remaining work
    over twice the streams, but at least ``min_piece``.  Big pieces first, short ones last, so the
    streams run out of work together instead of a few finishing a long last task alone."""
    cuts: list[int] = []
    left = sum(sizes)
    acc = 0
    want = max(min_piece, left / (2 * max(1, streams)))
    for i, s in enumerate(sizes):
        acc += s
        if acc >= want:
            cuts.append(i + 1)
            left -= acc
            acc = 0
            want = max(min_piece, left / (2 * max(1, streams)))
    if acc and cuts and acc < min_piece:
        cuts[-1] = len(sizes)  # a crumb joins the piece before it
    elif acc:
        cuts.append(len(sizes))
    return cuts


def guided_range_tasks(name: str, size: int, todo: list[int], streams: int, min_piece: int) -> list[Task]:
    """Block ranges of one big file in guided sizes (contiguous runs only: a resume leaves gaps)."""
    sizes = [min(size, (b + 1) * BLOCK) - b * BLOCK for b in todo]
    tasks: list[Task] = []
    start = 0
    for cut in guided_cuts(sizes, streams, min_piece):
        tasks += range_tasks(name, size, todo[start:cut], 1)
        start = cut
    return tasks


def _mk_range(name: str, size: int, run: list[int]) -> Task:
    end = min(size, (run[-1] + 1) * BLOCK)
    return Task("range", end - run[0] * BLOCK, name=name, first_block=run[0], nblocks=len(run))


def block_hashes_local(path: str, size: int) -> list[str]:
    out: list[str] = []
    try:
        with open(path, "rb") as f:
            for _ in range(math.ceil(size / BLOCK)):
                out.append(hashlib.sha256(f.read(BLOCK)).hexdigest())
    except OSError:
        return []
    return out


def block_hashes_remote(ssh: Ssh, path: str, control: str | None = None) -> list[str]:
    """sha256 of every block, computed on the server in one round trip (GNU split --filter)."""
    raw = ssh.run(
        f"[ -f {q(path)} ] && split -b {BLOCK} --filter=sha256sum {q(path)} || true",
        timeout=1800,
        control=control,
    )
    return [line.split()[0] for line in raw.decode().splitlines() if line.strip()]
