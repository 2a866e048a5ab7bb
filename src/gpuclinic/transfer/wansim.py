"""WAN simulator: a loopback HTTP/1.1 server that behaves like a long-haul link and like the Hub.

Why it exists: download behaviour (resume, retries, failover, adaptive connections) can only be
tested honestly against a server that caps each connection, adds latency, resets connections,
stalls, rate-limits, serves wrong bytes, and speaks the Hugging Face Hub's endpoints and headers.
Tests, benchmarks and demos all use this one server.  It binds 127.0.0.1 only.

The layers: wansim_link.py (pacing, failure injection, counters), wansim_hub.py (the Hub and its
CDN), this module (listeners, request parsing and routing, the ``/_sim`` control endpoints, the CLI).

Run ``python -m gpuclinic.transfer.wansim --file big.bin=200M --rate 4M`` for a demo server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import socket
import threading
import time
from dataclasses import asdict
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from gpuclinic.transfer.wansim_hub import RepoSpec, _Hub, git_blob_sha1
from gpuclinic.transfer.wansim_link import _BLOCK, Knobs, MiB, _Drop, _Stats

__all__ = ["Knobs", "MiB", "RepoSpec", "WanSim", "git_blob_sha1", "main", "make_data", "parse_size"]


class WanSim(_Hub):
    """The simulator.  ``with WanSim() as sim: sim.add_file("a.bin", data); url = sim.file_url("a.bin")``.

    Two listeners: the main one (files and Hub endpoints) and a "CDN" on its own port, so that the
    Hub's LFS redirect goes to another origin exactly like huggingface.co -> cdn-lfs.
    """

    def __init__(self, knobs: Knobs | None = None, token: str | None = None) -> None:
        super().__init__(knobs, token)
        self.files: dict[str, bytes] = {}
        self._etags: dict[str, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.base_events.Server] = []

    # ----------------------------------------------------------------- content
    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        self._etags[name] = hashlib.sha256(data).hexdigest()
        return self.file_url(name)

    def file_url(self, name: str) -> str:
        return f"{self.base_url}/files/{quote(name)}"

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
