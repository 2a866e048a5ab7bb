"""WAN simulator, TCP part: a loopback proxy that caps each connection, caps the link, and adds delay.

Why it exists: the registry (``docker-registry``) and ``sshd`` are real servers that we cannot
teach to behave like a long-haul link, so tests and benches put this proxy in front of them.  A
shaped path between continents typically caps every TCP flow (policers, long fat pipes with small
windows) and the whole link; this proxy reproduces both, in each direction separately, plus a
round-trip delay, and it counts every byte it forwards so that "bytes downloaded twice" can be
measured.  It can also flip bytes (a corrupt mirror) and reset every open connection (a cut link).

Pacing uses a reservation clock per connection and per direction (as ``wansim``): a cap of
4 MiB/s is steady from the first byte.  Each direction holds at most about one bandwidth-delay
product in flight, so a slow reader pushes back on the sender as a real window does.

``python -m gpuclinic.transfer.wansim_tcp --target 127.0.0.1:5000 --rate 4M --latency 0.05`` runs
one in the foreground; it prints ``{"port": N}`` and answers ``stats`` / ``reset`` on stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any

from gpuclinic.transfer.wansim import MiB, parse_size

_READ = 64 * 1024


@dataclass
class ProxyKnobs:
    """Link behaviour; plain attribute writes take effect on the next block."""

    rate_per_conn: float | None = None  # bytes/s per TCP connection, each direction
    total_rate: float | None = None  # bytes/s shared by all connections, each direction (the link)
    latency: float = 0.0  # added round-trip time: half on each direction
    corrupt_every: int = 0  # flip one byte in every N bytes sent to the client (0: off)
    corrupt_from: int = 0  # ...only after this many bytes of a connection (spares small replies)
    paused: bool = False  # hold every byte until set back to False


class _Dir:
    """Accounting for one direction of the link."""

    def __init__(self) -> None:
        self.total = 0
        self.next = 0.0  # reservation clock of the total cap


class TcpProxy:
    """``with TcpProxy("127.0.0.1", 5000, ProxyKnobs(rate_per_conn=4*MiB, latency=0.05)) as p: p.port``."""

    def __init__(self, target_host: str, target_port: int, knobs: ProxyKnobs | None = None) -> None:
        self.target = (target_host, target_port)
        self.knobs = knobs or ProxyKnobs()
        self.down = _Dir()  # server -> client
        self.up = _Dir()  # client -> server
        self.connections = 0
        self.corrupted = 0  # bytes flipped
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # ------------------------------------------------------------------ lifecycle
    def start(self, port: int = 0) -> TcpProxy:
        ready = threading.Event()
        err: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, "127.0.0.1", port, backlog=1024, reuse_address=True)
                )
            except BaseException as e:  # pragma: no cover - bind failures
                err.append(e)
                ready.set()
                return
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            try:
                loop.run_forever()
            finally:
                self._server.close()
                for w in list(self._writers):
                    w.transport.abort()
                tasks = asyncio.all_tasks(loop)
                for t in tasks:
                    t.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.close()

        self._thread = threading.Thread(target=run, name="wansim-tcp", daemon=True)
        self._thread.start()
        ready.wait(10)
        if err:
            raise err[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        return {"down": self.down.total, "up": self.up.total, "connections": self.connections,
                "corrupted": self.corrupted}

    def reset_stats(self) -> None:
        self.down.total = self.up.total = self.connections = self.corrupted = 0

    def cut(self) -> None:
        """Reset every open connection (RST), as a dropped VPN or a NAT timeout does."""
        loop = self._loop
        if loop is None:
            return

        def do() -> None:
            for w in list(self._writers):
                sock = w.get_extra_info("socket")
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                w.transport.abort()

        loop.call_soon_threadsafe(do)

    # ------------------------------------------------------------------ forwarding
    async def _accept(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            sreader, swriter = await asyncio.open_connection(*self.target)
        except OSError:
            cwriter.transport.abort()
            return
        for w in (cwriter, swriter):
            self._writers.add(w)
            with contextlib.suppress(OSError):
                w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(
                self._pipe(creader, swriter, self.up, corrupt=False),
                self._pipe(sreader, cwriter, self.down, corrupt=True),
            )
        finally:
            for w in (cwriter, swriter):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, acct: _Dir, *, corrupt: bool
    ) -> None:
        """Copy one direction: a reader stage stamps chunks with their due time, a sender stage paces them."""
        k = self.knobs
        loop = asyncio.get_running_loop()
        rate = k.rate_per_conn
        # about one bandwidth-delay product in flight (at least 4 chunks), like a TCP window
        bdp = (rate or 64 * MiB) * max(k.latency, 0.01)
        q: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(maxsize=max(4, int(bdp // _READ) + 4))

        async def read_side() -> None:
            try:
                while True:
                    data = await reader.read(_READ)
                    if not data:
                        break
                    await q.put((loop.time() + k.latency / 2, data))
            except (ConnectionError, OSError):
                pass
            await q.put(None)

        async def send_side() -> None:
            pace = [0.0, rate or 0.0]  # this connection's next free send slot, its cap (0: none)
            offset = 0
            try:
                while True:
                    item = await q.get()
                    if item is None:
                        with contextlib.suppress(OSError, RuntimeError):
                            if writer.can_write_eof():
                                writer.write_eof()
                        return
                    due, data = item
                    now = loop.time()
                    if due > now:
                        await asyncio.sleep(due - now)
                    offset = await self._send(writer, data, acct, pace, offset, corrupt=corrupt)
            except (ConnectionError, OSError):
                writer.transport.abort()
                # drain the reader side so it is not blocked on a full queue
                while True:
                    item = await q.get()
                    if item is None:
                        return

        await asyncio.gather(read_side(), send_side())

    async def _send(
        self, writer: asyncio.StreamWriter, data: bytes, acct: _Dir, pace: list[float], offset: int, *,
        corrupt: bool,
    ) -> int:
        """Write one chunk in blocks no faster than the connection's cap (``pace``: next free slot, cap)
        and the link's; returns the stream offset after it."""
        k = self.knobs
        loop = asyncio.get_running_loop()
        rate = pace[1]
        block = _READ if not rate else max(4096, min(_READ, int(rate / 128)))
        for i in range(0, len(data), block):
            part = data[i : i + block]
            n = len(part)
            now = loop.time()
            wake = now
            if rate:
                slot = max(pace[0], now)
                pace[0] = slot + n / rate
                wake = slot
            if k.total_rate:
                slot = max(acct.next, now)
                acct.next = slot + n / k.total_rate
                wake = max(wake, slot)
            if wake > now + 0.0005:
                await asyncio.sleep(wake - now)
            while k.paused:
                await asyncio.sleep(0.01)
            if corrupt and k.corrupt_every:
                part = self._flip(part, offset)
            writer.write(part)
            offset += n
            acct.total += n
            await writer.drain()
        return offset

    def _flip(self, part: bytes, offset: int) -> bytes:
        k = self.knobs
        every = k.corrupt_every
        buf = bytearray(part)
        first = offset + (every // 2 - offset) % every  # stream positions every//2 + m*every
        for pos in range(first, offset + len(buf), every):
            if pos >= k.corrupt_from:
                buf[pos - offset] ^= 0xFF
                self.corrupted += 1
        return bytes(buf)


def main(argv: list[str] | None = None) -> None:
    """Run a proxy in the foreground; ``stats`` on stdin prints the counters as one JSON line."""
    ap = argparse.ArgumentParser(prog="python -m gpuclinic.transfer.wansim_tcp", description=__doc__)
    ap.add_argument("--target", required=True, help="HOST:PORT to forward to (loopback)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rate", help="per-connection cap, e.g. 4M (bytes/s, each direction)")
    ap.add_argument("--total-rate", help="link cap, e.g. 64M (bytes/s, each direction)")
    ap.add_argument("--latency", type=float, default=0.0, help="added round-trip time in seconds")
    ap.add_argument("--corrupt-every", type=int, default=0)
    args = ap.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    knobs = ProxyKnobs(
        rate_per_conn=parse_size(args.rate) if args.rate else None,
        total_rate=parse_size(args.total_rate) if args.total_rate else None,
        latency=args.latency,
        corrupt_every=args.corrupt_every,
    )
    proxy = TcpProxy(host or "127.0.0.1", int(port), knobs).start(args.port)
    print(json.dumps({"port": proxy.port}), flush=True)
    try:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "stats":
                print(json.dumps(proxy.stats()), flush=True)
            elif cmd == "reset":
                proxy.reset_stats()
                print("{}", flush=True)
            elif cmd == "cut":
                proxy.cut()
                print("{}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()


if __name__ == "__main__":
    main()
