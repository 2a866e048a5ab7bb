"""WAN simulator: a loopback HTTP/1.1 server that behaves like a long-haul link and like the Hub.

Why it exists: download behaviour (resume, retries, failover, adaptive connections) can only be
tested honestly against a server that caps each connection, adds latency, resets connections,
stalls, rate-limits, serves wrong bytes, and speaks the Hugging Face Hub's endpoints and headers.
Tests, benchmarks and demos all use this one server.  It binds 127.0.0.1 only.

Pacing is done in user space per connection (a reservation clock, no TCP slow start), so a cap of
4 MiB/s per connection is steady from the first byte, like the measurements in
shared/research/download-anchors.md section 6.

Run ``python -m gpuclinic.transfer.wansim --file big.bin=200M --rate 4M`` for a demo server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import math
import random
import socket
import struct
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

MiB = 1024 * 1024
_BLOCK = 64 * 1024


@dataclass
class Knobs:
    """Link and server behaviour; may be changed while the server runs (plain attribute writes)."""

    rate_per_conn: float | None = None  # bytes/s per TCP connection
    total_rate: float | None = None  # bytes/s shared by all connections (a link cap)
    latency: float = 0.0  # seconds before the first byte of every response (an RTT)
    connect_latency: float = 0.0  # seconds added once per new TCP connection
    drop_per_mib: float = 0.0  # probability per MiB of body sent that the connection is dropped
    drop_at_bytes: list[int] = field(default_factory=list)  # drop once the server total passes each value
    drop_mode: str = "rst"  # "rst" (SO_LINGER 0: ECONNRESET) or "fin" (clean close, short body)
    stall_per_mib: float = 0.0  # probability per MiB of a stall
    stall_seconds: float = 30.0
    stall_at_bytes: list[int] = field(default_factory=list)  # stall once the server total passes each value
    pause_at_bytes: int | None = None  # freeze every body once the server total passes this...
    paused: bool = False  # ...until this is set back to False
    fail_next: list[int] = field(default_factory=list)  # statuses returned to the next data requests
    max_active: int | None = None  # more concurrent data responses than this => 429
    retry_after: float = 1.0  # Retry-After seconds sent with 429/503
    corrupt: bool = False  # flip bytes in every served file body (a bad mirror)
    no_ranges: bool = False  # ignore Range like some proxies and old servers (always 200, whole body)
    cdn_ttl: float = 3600.0  # lifetime of signed CDN URLs
    ignore_blobs: bool = False  # answer ?blobs=true without sizes, like a mirror that lacks it
    tree_page: int = 1000  # entries per page of the tree listing (Link: rel="next" pagination)
    seed: int = 7


@dataclass
class RepoSpec:
    repo_id: str
    repo_type: str  # "model" | "dataset"
    files: dict[str, bytes]
    commit: str
    refs: dict[str, str]
    lfs: set[str]
    gated: bool = False
    private: bool = False
    sha256: dict[str, str] = field(default_factory=dict)  # path -> digest, computed once
    gitsha: dict[str, str] = field(default_factory=dict)


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob: what the Hub uses as the etag of a non-LFS file."""
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


class _Stats:
    def __init__(self) -> None:
        self.bytes_served: dict[str, int] = defaultdict(int)
        self.requests: dict[str, int] = defaultdict(int)
        self.statuses: dict[int, int] = defaultdict(int)
        self.connections = 0
        self.active = 0
        self.max_active = 0
        self.drops = 0
        self.stalls = 0
        self.total_body = 0
        self.after_close = 0  # body bytes not sent because the client had hung up (not in total_body)
        self.first_byte = 0.0  # wall clock of the first and last body byte (link utilisation)
        self.last_byte = 0.0
        self.auth_headers: list[str] = []

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes_served": dict(self.bytes_served),
            "requests": dict(self.requests),
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "connections": self.connections,
            "max_active": self.max_active,
            "drops": self.drops,
            "stalls": self.stalls,
            "total_body": self.total_body,
            "after_close": self.after_close,
            "first_byte": self.first_byte,
            "last_byte": self.last_byte,
        }


class _Drop(Exception):
    pass


class WanSim:
    """The simulator.  ``with WanSim() as sim: sim.add_file("a.bin", data); url = sim.file_url("a.bin")``.

    Two listeners: the main one (files and Hub endpoints) and a "CDN" on its own port, so that the
    Hub's LFS redirect goes to another origin exactly like huggingface.co -> cdn-lfs.
    """

    def __init__(self, knobs: Knobs | None = None, token: str | None = None) -> None:
        self.knobs = knobs or Knobs()
        self.token = token
        self.files: dict[str, bytes] = {}
        self._etags: dict[str, str] = {}
        self.repos: dict[tuple[str, str], RepoSpec] = {}
        self._blobs: dict[str, bytes] = {}  # sha256 -> data, served by the CDN
        self.stats = _Stats()
        self._secret = random.Random(self.knobs.seed).randbytes(16)
        self._rng = random.Random(self.knobs.seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._total_next = 0.0
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.cdn_port = 0

    # ----------------------------------------------------------------- content
    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        self._etags[name] = hashlib.sha256(data).hexdigest()
        return self.file_url(name)

    def file_url(self, name: str) -> str:
        return f"{self.base_url}/files/{quote(name)}"

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        repo_type: str = "model",
        lfs_min_size: int = 100_000,
        gated: bool = False,
        private: bool = False,
        commit: str | None = None,
        refs: dict[str, str] | None = None,
    ) -> RepoSpec:
        commit = commit or hashlib.sha1(repo_id.encode() + str(sorted(files)).encode()).hexdigest()
        lfs = {p for p, d in files.items() if len(d) >= lfs_min_size}
        spec = RepoSpec(
            repo_id, repo_type, dict(files), commit, refs or {"main": commit}, lfs, gated, private
        )
        self.repos[(repo_type, repo_id)] = spec
        for p, d in files.items():
            spec.sha256[p] = hashlib.sha256(d).hexdigest()
            spec.gitsha[p] = git_blob_sha1(d)
        for p in lfs:
            self._blobs[spec.sha256[p]] = files[p]
        return spec

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self.cdn_port}"

    def expire_signed_urls(self) -> None:
        """Every signed CDN URL handed out so far answers 403 from now on (as if its time ran out),
        at an exact moment a test chooses rather than after a TTL raced against a busy CPU."""
        self._secret = random.Random(self._secret).randbytes(16)

    def served(self, name: str) -> int:
        """Body bytes written to sockets for a file name, a CDN blob sha256, or a resolve path."""
        return self.stats.bytes_served.get(name, 0)

    # ----------------------------------------------------------------- lifecycle
    def start(self, port: int = 0, cdn_port: int = 0) -> WanSim:
        ready = threading.Event()
        err: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                main = loop.run_until_complete(
                    asyncio.start_server(
                        self._serve_main, "127.0.0.1", port, backlog=1024, reuse_address=True
                    )
                )
                cdn = loop.run_until_complete(
                    asyncio.start_server(
                        self._serve_cdn, "127.0.0.1", cdn_port, backlog=1024, reuse_address=True
                    )
                )
            except BaseException as e:  # pragma: no cover - bind failures
                err.append(e)
                ready.set()
                return
            self._servers = [main, cdn]
            self.port = main.sockets[0].getsockname()[1]
            self.cdn_port = cdn.sockets[0].getsockname()[1]
            ready.set()
            try:
                loop.run_forever()
            finally:
                for s in self._servers:
                    s.close()
                for w in list(self._writers):
                    w.transport.abort()
                loop.run_until_complete(asyncio.sleep(0))
                loop.close()

        self._thread = threading.Thread(target=run, name="wansim", daemon=True)
        self._thread.start()
        ready.wait(10)
        if err:
            raise err[0]
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> WanSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- HTTP plumbing
    async def _serve_main(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._serve(reader, writer, cdn=False)

    async def _serve_cdn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._serve(reader, writer, cdn=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, cdn: bool) -> None:
        self.stats.connections += 1
        self._writers.add(writer)
        sock = writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer.transport.set_write_buffer_limits(high=_BLOCK)
        conn: dict[str, Any] = {"next": 0.0, "reader": reader}
        try:
            if self.knobs.connect_latency:
                await asyncio.sleep(self.knobs.connect_latency)
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, version = lines[0].split(" ", 2)
                except ValueError:
                    return
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                clen = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(clen) if clen else b""
                keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
                try:
                    await self._handle(method, target, headers, body, writer, conn, cdn=cdn)
                except _Drop:
                    return
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError, OSError):
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        headers: dict[str, str],
        body: bytes | memoryview = b"",
        *,
        head_only: bool = False,
        content_length: int | None = None,
        account: str | None = None,
        offset: int = 0,
        conn: dict[str, Any] | None = None,
        latency: bool = True,
    ) -> None:
        reason = _REASONS.get(status, "OK")
        self.stats.statuses[status] += 1
        if self.knobs.latency and latency:
            await asyncio.sleep(self.knobs.latency)
        h = {"Content-Length": str(len(body) if content_length is None else content_length), **headers}
        out = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        writer.write(out.encode("latin-1"))
        if head_only or not body:
            await writer.drain()
            return
        await self._stream_body(writer, memoryview(body), account or "", offset, conn or {"next": 0.0})

    async def _stream_body(
        self, writer: asyncio.StreamWriter, body: memoryview, account: str, offset: int, conn: dict[str, Any]
    ) -> None:
        k = self.knobs
        loop = asyncio.get_running_loop()
        rate = k.rate_per_conn
        block = _BLOCK if not rate else max(4096, min(_BLOCK, int(rate / 128)))
        conn["next"] = max(conn["next"], loop.time())
        self.stats.active += 1
        self.stats.max_active = max(self.stats.max_active, self.stats.active)
        try:
            pos = 0
            reader = conn.get("reader")
            while pos < len(body):
                if reader is not None and reader.at_eof():
                    raise _Drop()  # the client hung up: a real server stops sending too
                n = min(block, len(body) - pos)
                now = loop.time()
                wake = now
                if rate:
                    slot = max(conn["next"], now)
                    conn["next"] = slot + n / rate
                    wake = slot
                if k.total_rate:
                    slot = max(self._total_next, now)
                    self._total_next = slot + n / k.total_rate
                    wake = max(wake, slot)
                if wake > now + 0.0005:
                    await asyncio.sleep(wake - now)
                chunk = body[pos : pos + n]
                if k.corrupt:
                    chunk = memoryview(self._corrupt(bytes(chunk), offset + pos))
                # failure injection, decided per block in proportion to its size
                p = n / MiB
                if k.drop_per_mib and self._rng.random() < k.drop_per_mib * p:
                    self._drop(writer)
                if k.drop_at_bytes and self.stats.total_body + n > k.drop_at_bytes[0]:
                    k.drop_at_bytes.pop(0)
                    self._drop(writer)
                if k.pause_at_bytes is not None and self.stats.total_body + n > k.pause_at_bytes:
                    k.pause_at_bytes = None
                    k.paused = True
                while k.paused:
                    await asyncio.sleep(0.01)
                stall = bool(k.stall_per_mib) and self._rng.random() < k.stall_per_mib * p
                if k.stall_at_bytes and self.stats.total_body + n > k.stall_at_bytes[0]:
                    k.stall_at_bytes.pop(0)
                    stall = True
                if stall:
                    self.stats.stalls += 1
                    await asyncio.sleep(k.stall_seconds)
                if writer.transport.is_closing() or (reader is not None and reader.at_eof()):
                    # the client hung up (RST or FIN) while this block waited for its slot: stop
                    # here as a real server does on EPIPE/EOF, and count the block apart, not as served
                    self.stats.after_close += n
                    raise _Drop()
                writer.write(chunk)
                self.stats.last_byte = time.time()
                if not self.stats.first_byte:
                    self.stats.first_byte = self.stats.last_byte
                self.stats.bytes_served[account] += n
                self.stats.total_body += n
                pos += n
                await writer.drain()
        finally:
            self.stats.active -= 1

    def _drop(self, writer: asyncio.StreamWriter) -> None:
        self.stats.drops += 1
        if self.knobs.drop_mode == "rst":
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()
        raise _Drop()

    @staticmethod
    def _corrupt(chunk: bytes, offset: int) -> bytes:
        buf = bytearray(chunk)
        # flip one byte in every 64 KiB of the file
        first = (-offset) % 65536
        for i in range(first, len(buf), 65536):
            buf[i] ^= 0xFF
        return bytes(buf)

    # ----------------------------------------------------------------- routing
    async def _handle(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
        conn: dict[str, Any],
        *,
        cdn: bool,
    ) -> None:
        parts = urlsplit(target)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        if "authorization" in headers:
            self.stats.auth_headers.append(("cdn " if cdn else "") + headers["authorization"])
        if cdn:
            await self._cdn(method, path, query, headers, writer, conn)
            return
        if path == "/_sim/stats":  # the observer's side channel: not delayed like the simulated link
            await self._json(writer, 200, self.stats.to_dict(), latency=False)
            return
        if path == "/_sim/reset" and method == "POST":
            self.stats = _Stats()
            await self._json(writer, 200, {})
            return
        if path == "/_sim/knobs" and method == "POST":
            for key, val in json.loads(body or b"{}").items():
                if hasattr(self.knobs, key):
                    setattr(self.knobs, key, val)
            await self._json(writer, 200, asdict(self.knobs))
            return
        if path.startswith("/files/"):
            name = path[len("/files/") :]
            data = self.files.get(name)
            if data is None:
                await self._json(writer, 404, {"error": "not found"})
                return
            await self._serve_bytes(method, headers, writer, conn, data, self._etags[name], name, {})
            return
        if path.startswith("/api/"):
            await self._api(method, path, query, headers, writer)
            return
        await self._resolve(method, path, headers, writer, conn)

    async def _json(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        obj: Any,
        extra: dict[str, str] | None = None,
        *,
        latency: bool = True,
    ) -> None:
        data = json.dumps(obj).encode()
        await self._send(
            writer, status, {"Content-Type": "application/json", **(extra or {})}, data, latency=latency
        )

    async def _hub_error(
        self, writer: asyncio.StreamWriter, status: int, code: str, message: str, head: bool = False
    ) -> None:
        data = json.dumps({"error": message}).encode()
        h = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
        await self._send(writer, status, h, data, head_only=head)

    def _authorized(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        return bool(self.token) and hmac.compare_digest(auth, f"Bearer {self.token}")

    async def _rate_limited(self, writer: asyncio.StreamWriter) -> bool:
        k = self.knobs
        status = 0
        if k.fail_next:
            status = k.fail_next.pop(0)
        elif k.max_active is not None and self.stats.active >= k.max_active:
            status = 429
        if not status:
            return False
        extra = {"Retry-After": f"{k.retry_after:g}"} if status in (429, 503) else {}
        await self._json(writer, status, {"error": "slow down"}, extra)
        return True

    async def _serve_bytes(
        self,
        method: str,
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
        conn: dict[str, Any],
        data: bytes,
        etag: str,
        account: str,
        extra: dict[str, str],
    ) -> None:
        if await self._rate_limited(writer):
            return
        size = len(data)
        h = {
            "ETag": f'"{etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            **extra,
        }
        rng = None if self.knobs.no_ranges else headers.get("range")
        if_range = headers.get("if-range")
        if rng and if_range and if_range.strip('"').removeprefix("W/").strip('"') != etag:
            rng = None  # If-Range mismatch: the whole (new) object, 200
        if rng:
            start, end = _parse_range(rng, size)
            if start is None:
                h["Content-Range"] = f"bytes */{size}"
                await self._send(writer, 416, h, b"")
                return
            assert end is not None
            h["Content-Range"] = f"bytes {start}-{end}/{size}"
            body = memoryview(data)[start : end + 1]
            await self._send(
                writer, 206, h, body, head_only=method == "HEAD", account=account, offset=start, conn=conn
            )
            return
        await self._send(
            writer, 200, h, data, head_only=method == "HEAD", content_length=size, account=account, conn=conn
        )

    # ----------------------------------------------------------------- Hub
    def _find_repo(self, repo_type: str, rest: str) -> tuple[RepoSpec | None, str, str]:
        """Split ``org/name/<tail>`` into a known repo and the tail; unknown repos use two components."""
        segs = rest.split("/")
        for n in (2, 1):
            rid = "/".join(segs[:n])
            if (repo_type, rid) in self.repos:
                return self.repos[(repo_type, rid)], rid, "/".join(segs[n:])
        return None, "/".join(segs[:2]), "/".join(segs[2:])

    async def _check_access(
        self,
        spec: RepoSpec | None,
        rid: str,
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
        head: bool,
    ) -> bool:
        if spec is None or (spec.private and not self._authorized(headers)):
            if self._authorized(headers):
                await self._hub_error(writer, 404, "RepoNotFound", "Repository not found", head)
            else:
                await self._hub_error(
                    writer, 401, "RepoNotFound", "Repository Not Found. Invalid username or password.", head
                )
            return False
        if spec.gated and not self._authorized(headers):
            msg = (
                f"Access to model {rid} is restricted. You must have access to it and be authenticated "
                "to access it. Please log in."
            )
            await self._hub_error(
                writer, 401 if "authorization" not in headers else 403, "GatedRepo", msg, head
            )
            return False
        return True

    def _commit_for(self, spec: RepoSpec, rev: str) -> str | None:
        if rev == spec.commit:
            return rev
        return spec.refs.get(rev)

    def _entry(self, spec: RepoSpec, p: str) -> dict[str, Any]:
        data = spec.files[p]
        e: dict[str, Any] = {"rfilename": p, "size": len(data), "blobId": spec.gitsha[p]}
        if p in spec.lfs:
            e["lfs"] = {"sha256": spec.sha256[p], "size": len(data), "pointerSize": 134}
        return e

    async def _api(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
    ) -> None:
        segs = path.split("/", 3)  # "", "api", "models", rest
        if len(segs) < 4 or segs[2] not in ("models", "datasets"):
            await self._hub_error(writer, 404, "NotFound", "Not Found")
            return
        repo_type = segs[2][:-1]
        spec, rid, tail = self._find_repo(repo_type, segs[3])
        if not await self._check_access(spec, rid, headers, writer, False):
            return
        assert spec is not None
        kind, _, rev = tail.partition("/")
        if kind == "" or kind == "revision":
            rev = unquote(rev) or "main"
            commit = self._commit_for(spec, rev)
            if commit is None:
                await self._hub_error(writer, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return
            blobs = query.get("blobs", ["false"])[0] == "true" and not self.knobs.ignore_blobs
            sibs = [self._entry(spec, p) if blobs else {"rfilename": p} for p in sorted(spec.files)]
            info = {
                "id": rid,
                "modelId": rid,
                "sha": commit,
                "private": spec.private,
                "gated": spec.gated,
                "siblings": sibs,
            }
            await self._json(writer, 200, info)
            return
        if kind in ("tree", "treesize"):
            rev, _, sub = rev.partition("/")
            commit = self._commit_for(spec, unquote(rev))
            if commit is None:
                await self._hub_error(writer, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return
            if kind == "treesize":
                await self._json(writer, 200, {"size": sum(len(d) for d in spec.files.values())})
                return
            out: list[dict[str, Any]] = []
            dirs: set[str] = set()
            for p in sorted(spec.files):
                if sub and not p.startswith(sub.rstrip("/") + "/"):
                    continue
                parts = p.split("/")
                for i in range(1, len(parts)):
                    d = "/".join(parts[:i])
                    if d not in dirs:
                        dirs.add(d)
                        out.append(
                            {
                                "type": "directory",
                                "oid": hashlib.sha1(d.encode()).hexdigest(),
                                "size": 0,
                                "path": d,
                            }
                        )
                e = self._entry(spec, p)
                item: dict[str, Any] = {"type": "file", "oid": e["blobId"], "size": e["size"], "path": p}
                if "lfs" in e:
                    item["lfs"] = {"oid": e["lfs"]["sha256"], "size": e["size"], "pointerSize": 134}
                out.append(item)
            start = int(query.get("cursor", ["0"])[0] or 0)
            page = out[start : start + self.knobs.tree_page]
            extra = {}
            if start + self.knobs.tree_page < len(out):
                nxt = (
                    f"{self.base_url}/api/{repo_type}s/{rid}/tree/{rev}?recursive=true&expand=false"
                    f"&cursor={start + self.knobs.tree_page}"
                )
                extra["Link"] = f'<{nxt}>; rel="next"'
            await self._json(writer, 200, page, extra)
            return
        await self._hub_error(writer, 404, "NotFound", "Not Found")

    async def _resolve(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
        conn: dict[str, Any],
    ) -> None:
        head = method == "HEAD"
        rest = path.lstrip("/")
        repo_type = "model"
        if rest.startswith("datasets/"):
            repo_type, rest = "dataset", rest[len("datasets/") :]
        if "/resolve/" not in rest:
            await self._hub_error(writer, 404, "NotFound", "Not Found", head)
            return
        spec, rid, tail = self._find_repo(repo_type, rest)
        if not tail.startswith("resolve/"):
            spec = None
        if not await self._check_access(spec, rid, headers, writer, head):
            return
        assert spec is not None
        rev, _, fpath = tail[len("resolve/") :].partition("/")
        commit = self._commit_for(spec, rev)
        if commit is None:
            await self._hub_error(writer, 404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return
        data = spec.files.get(fpath)
        if data is None:
            h = {
                "X-Error-Code": "EntryNotFound",
                "X-Error-Message": "Entry not found",
                "X-Repo-Commit": commit,
            }
            await self._send(writer, 404, h, b'{"error":"Entry not found"}', head_only=head)
            return
        common = {"X-Repo-Commit": commit, "X-Linked-Size": str(len(data))}
        if fpath in spec.lfs:
            sha = spec.sha256[fpath]
            # rounded up: a signed URL lives at least cdn_ttl (int() gave a 1-s TTL anything from 0 to 1 s)
            expires = math.ceil(time.time() + self.knobs.cdn_ttl)
            sig = hmac.new(self._secret, f"{sha}:{expires}".encode(), "sha256").hexdigest()[:32]
            loc = f"{self.cdn_url}/cdn/{sha}?Expires={expires}&Signature={sig}"
            h = {**common, "X-Linked-Etag": f'"{sha}"', "ETag": f'"{sha}"', "Location": loc}
            await self._send(writer, 302, h, b"", head_only=True, content_length=0)
            return
        etag = spec.gitsha[fpath]
        await self._serve_bytes(method, headers, writer, conn, data, etag, f"{rid}/{fpath}", common)

    async def _cdn(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        writer: asyncio.StreamWriter,
        conn: dict[str, Any],
    ) -> None:
        sha = path.removeprefix("/cdn/")
        data = self._blobs.get(sha)
        if data is None:
            await self._send(writer, 404, {}, b"NoSuchKey")
            return
        try:
            expires = int(query.get("Expires", ["0"])[0])
        except ValueError:
            expires = 0
        sig = hmac.new(self._secret, f"{sha}:{expires}".encode(), "sha256").hexdigest()[:32]
        if not hmac.compare_digest(sig, query.get("Signature", [""])[0]) or expires < time.time():
            await self._send(
                writer,
                403,
                {"Content-Type": "application/xml"},
                b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>",
            )
            return
        await self._serve_bytes(method, headers, writer, conn, data, sha, sha, {})


_REASONS = {
    200: "OK", 206: "Partial Content", 302: "Found", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 410: "Gone", 416: "Range Not Satisfiable", 429: "Too Many Requests",
    500: "Internal Server Error", 503: "Service Unavailable",
}  # fmt: skip


def _parse_range(value: str, size: int) -> tuple[int | None, int | None]:
    """Parse a single ``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` range; (None, None) if unsatisfiable."""
    try:
        unit, spec = value.split("=", 1)
        if unit.strip() != "bytes" or "," in spec:
            return None, None
        a, b = spec.strip().split("-", 1)
        if a == "":
            n = int(b)
            start, end = max(0, size - n), size - 1
        else:
            start = int(a)
            end = int(b) if b else size - 1
        end = min(end, size - 1)
        if start > end or start >= size:
            return None, None
        return start, end
    except ValueError:
        return None, None


def parse_size(text: str) -> int:
    """``200M`` -> bytes (binary units, as everywhere in this simulator)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1024, "M": MiB, "G": 1024 * MiB}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def make_data(size: int, seed: int = 1) -> bytes:
    """Deterministic incompressible test content."""
    return random.Random(seed).randbytes(size)


def main(argv: list[str] | None = None) -> None:
    """Serve files (and optionally a Hub repo) until interrupted; prints the URLs as JSON on one line."""
    ap = argparse.ArgumentParser(prog="python -m gpuclinic.transfer.wansim", description=__doc__)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cdn-port", type=int, default=0)
    ap.add_argument("--file", action="append", default=[], help="NAME=SIZE, e.g. big.bin=200M")
    ap.add_argument(
        "--repo", action="append", default=[], help="ORG/NAME:path=SIZE,path=SIZE (a Hub model repo)"
    )
    ap.add_argument("--rate", help="per-connection cap, e.g. 4M (bytes/s)")
    ap.add_argument("--total-rate", help="shared link cap, e.g. 8M")
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--connect-latency", type=float, default=0.0)
    ap.add_argument("--drop-per-mib", type=float, default=0.0)
    ap.add_argument("--drop-mode", choices=["rst", "fin"], default="rst")
    ap.add_argument("--token")
    args = ap.parse_args(argv)
    knobs = Knobs(
        rate_per_conn=parse_size(args.rate) if args.rate else None,
        total_rate=parse_size(args.total_rate) if args.total_rate else None,
        latency=args.latency,
        connect_latency=args.connect_latency,
        drop_per_mib=args.drop_per_mib,
        drop_mode=args.drop_mode,
    )
    sim = WanSim(knobs, token=args.token)
    out: dict[str, Any] = {"files": {}, "repos": []}
    for i, spec in enumerate(args.file):
        name, _, size = spec.partition("=")
        data = make_data(parse_size(size), seed=i + 1)
        sim.add_file(name, data)
        out["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    for j, spec in enumerate(args.repo):
        rid, _, flist = spec.partition(":")
        files = {}
        for k, item in enumerate(flist.split(",")):
            p, _, size = item.partition("=")
            files[p] = make_data(parse_size(size), seed=1000 + 100 * j + k)
        sim.add_repo(rid, files)
        out["repos"].append(rid)
    sim.start(args.port, args.cdn_port)
    out["base_url"] = sim.base_url
    out["files"] = {n: {**v, "url": sim.file_url(n)} for n, v in out["files"].items()}
    print(json.dumps(out), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()


if __name__ == "__main__":
    main()
