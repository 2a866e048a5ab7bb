"""The TCP proxy must cap, delay, count and corrupt exactly as it claims, or the image and sync
benchmarks measure nothing."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from gpuclinic.transfer.wansim_tcp import ProxyKnobs, TcpProxy

MiB = 1024 * 1024


class _Echo:
    """A loopback server that sends N bytes of a pattern to every client, or echoes what it reads."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        # a client the proxy cut (the reset and corruption tests) resets this side: expected, not an
        # error of the server thread
        with c, contextlib.suppress(ConnectionError):
            cmd = c.recv(1)
            if cmd == b"G":
                c.sendall(self.payload)
            else:
                while data := c.recv(65536):
                    self.received += len(data)
                c.sendall(b"ok")


@pytest.fixture
def payload_server() -> Iterator[_Echo]:
    srv = _Echo(bytes(range(256)) * 4096 * 2)  # 2 MiB
    yield srv
    srv.sock.close()


def _get(port: int) -> tuple[bytes, float]:
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"G")
        buf = bytearray()
        while data := s.recv(65536):
            buf += data
    return bytes(buf), time.monotonic() - t


def test_per_connection_cap_total_cap_and_counts(payload_server: _Echo) -> None:
    with TcpProxy("127.0.0.1", payload_server.port, ProxyKnobs(rate_per_conn=4 * MiB)) as p:
        data, dt = _get(p.port)
        assert data == payload_server.payload
        assert dt >= (2 * MiB - 64 * 1024) / (4 * MiB)  # never faster than the cap
        assert p.stats()["down"] == 2 * MiB and p.stats()["connections"] == 1
        # two connections in parallel each get their own cap: together well under 2x one
        p.reset_stats()
        t = time.monotonic()
        ths = [threading.Thread(target=_get, args=(p.port,)) for _ in range(2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert time.monotonic() - t < 2 * dt
        assert p.stats()["down"] == 4 * MiB
        # a total cap binds both: 4 MiB at 4 MiB/s total takes about one second
        p.knobs.rate_per_conn = None
        p.knobs.total_rate = 4 * MiB
        t = time.monotonic()
        ths = [threading.Thread(target=_get, args=(p.port,)) for _ in range(2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert time.monotonic() - t >= (4 * MiB - 128 * 1024) / (4 * MiB)


def test_latency_is_added_each_round_trip(payload_server: _Echo) -> None:
    with TcpProxy("127.0.0.1", payload_server.port, ProxyKnobs(latency=0.2)) as p:
        _, dt = _get(p.port)
        assert dt >= 0.2  # request one way + reply the other way


def test_upload_direction_and_corruption(payload_server: _Echo) -> None:
    with TcpProxy("127.0.0.1", payload_server.port, ProxyKnobs(corrupt_every=MiB, corrupt_from=1000)) as p:
        data, _ = _get(p.port)
        diff = [i for i, (a, b) in enumerate(zip(data, payload_server.payload, strict=True)) if a != b]
        assert diff == [MiB // 2, MiB + MiB // 2] and p.stats()["corrupted"] == 2
        p.reset_stats()
        with socket.create_connection(("127.0.0.1", p.port)) as s:
            s.sendall(b"U" + b"x" * 300_000)
            s.shutdown(socket.SHUT_WR)  # half-close must travel through the proxy
            assert s.recv(16) == b"ok"
        assert p.stats()["up"] == 300_001


def test_cut_resets_open_connections(payload_server: _Echo) -> None:
    with TcpProxy("127.0.0.1", payload_server.port, ProxyKnobs(rate_per_conn=256 * 1024)) as p:
        s = socket.create_connection(("127.0.0.1", p.port))
        s.sendall(b"G")
        s.recv(1000)
        p.cut()
        got = 0
        with pytest.raises(ConnectionResetError):
            s.settimeout(5)
            while data := s.recv(65536):
                got += len(data)
        s.close()
        assert got < 2 * MiB
