"""The WAN simulator's link: knobs, counters, pacing, failure injection and ranged responses.

Why a module of its own: this is what makes the loopback server behave like a long-haul link
(a per-connection and a shared rate cap, latency, resets, stalls, pauses, rate limiting, wrong
bytes) and what the tests' numbers come from (the served-bytes accounting).  The Hub endpoints
(wansim_hub.py) and the routing (wansim.py) only decide what to send; every body goes out here.

Pacing is done in user space per connection (a reservation clock, no TCP slow start), so a cap of
4 MiB/s per connection is steady from the first byte, like the measurements in
shared/research/download-anchors.md section 6.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import struct
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

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


class _Link:
    """Writes responses at the simulated link's pace, counting and injecting failures."""

    def __init__(self, knobs: Knobs | None) -> None:
        self.knobs = knobs or Knobs()
        self.stats = _Stats()
        self._rng = random.Random(self.knobs.seed)
        self._total_next = 0.0
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.cdn_port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self.cdn_port}"

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
