"""Loopback servers for network tests: a rate-capped HTTP(S) file server and an HTTP CONNECT proxy.

The file server paces in user space so caps hold from the first byte: ``per_conn_bps`` limits each
connection, ``total_bps`` limits all connections together (a token bucket shared by every handler).
Everything binds 127.0.0.1.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import socketserver
import ssl
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

BIG = 64 * 1024 * 1024


class TokenBucket:
    """Shared pacing: ``take(n)`` sleeps until n bytes may be sent at ``rate`` bytes/s."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.next_t = time.monotonic()

    def take(self, n: int) -> None:
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_t)
            self.next_t = start + n / self.rate
            wait = self.next_t - now
        if wait > 0:
            time.sleep(wait)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FileServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        srv = self.server.owner
        srv.requests.append(self.path)
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/big.bin")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/big"):
            size = BIG
        else:
            body = b"User-agent: *\nDisallow:\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a or 0)
            end = min(int(b), size - 1) if b else size - 1
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        n = end - start + 1
        self.send_header("Content-Length", str(n))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        chunk = b"\0" * 16384
        per = TokenBucket(srv.per_conn_bps) if srv.per_conn_bps else None
        sent = 0
        try:
            while sent < n:
                k = min(len(chunk), n - sent)
                if per:
                    per.take(k)
                if srv.total:
                    srv.total.take(k)
                self.wfile.write(chunk[:k])
                sent += k
        except OSError:
            pass

    do_HEAD = do_GET


class FileServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # probes open ~12 connections at once: a backlog of 5 drops SYNs (1 s stalls)
    owner: LoopbackFileServer


class LoopbackFileServer:
    """``with LoopbackFileServer(per_conn_bps=...) as s: s.url`` -> http(s)://127.0.0.1:PORT"""

    def __init__(self, *, per_conn_bps: float | None = None, total_bps: float | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.per_conn_bps = per_conn_bps
        self.total = TokenBucket(total_bps) if total_bps else None
        self.requests: list[str] = []
        self.httpd = FileServer(("127.0.0.1", 0), _Handler)
        self.httpd.owner = self
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackFileServer:
        self.thread.start()
        return self

    def __exit__(self, *a: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def make_cert(tmp: Path) -> tuple[Path, Path] | None:
    """A self-signed cert for localhost/*.test names via the openssl CLI; None when openssl is missing."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    key, crt = tmp / "key.pem", tmp / "cert.pem"
    cp = subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(crt),
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,DNS:hub.test,DNS:mirror.test,DNS:git.test,IP:127.0.0.1",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if cp.returncode != 0:
        return None
    return crt, key


def loopback_resolver(host: str, port: int, timeout: float) -> list[tuple[int, tuple[str, int]]]:
    """Every name is 127.0.0.1: tests never leave the machine."""
    return [(socket.AF_INET, ("127.0.0.1", port))]



class ConnectProxy:
    """A tiny HTTP CONNECT proxy on 127.0.0.1 that counts tunnels (optionally refuses with 403)."""

    def __init__(self, refuse: bool = False, status: str = "403 Forbidden") -> None:
        self.refuse = refuse
        self.status = status
        self.tunnels: list[str] = []
        self.auth: list[str | None] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ConnectProxy:
        self.thread.start()
        return self

    def __exit__(self, *a: object) -> None:
        self.stop.set()
        self.sock.close()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(c,), daemon=True).start()

    def _handle(self, c: socket.socket) -> None:
        buf = b""
        c.settimeout(5)
        try:
            while b"\r\n\r\n" not in buf:
                d = c.recv(4096)
                if not d:
                    return
                buf += d
            head = buf.split(b"\r\n\r\n", 1)[0].decode()
            line = head.split("\r\n")[0]
            auth = next(
                (
                    h.split(":", 1)[1].strip()
                    for h in head.split("\r\n")[1:]
                    if h.lower().startswith("proxy-authorization")
                ),
                None,
            )
            self.auth.append(auth)
            method, target, _ = line.split(" ", 2)
            if method != "CONNECT" or self.refuse:
                c.sendall(f"HTTP/1.1 {self.status}\r\nContent-Length: 0\r\n\r\n".encode())
                return
            self.tunnels.append(target)
            host, port = target.rsplit(":", 1)
            up = socket.create_connection(("127.0.0.1", int(port)), timeout=5)  # every name is loopback here
            c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            c.settimeout(None)
            up.settimeout(None)

            def pipe(a: socket.socket, b: socket.socket) -> None:
                try:
                    while True:
                        d = a.recv(65536)
                        if not d:
                            break
                        b.sendall(d)
                except OSError:
                    pass
                finally:
                    for s in (a, b):
                        try:
                            s.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass

            t = threading.Thread(target=pipe, args=(up, c), daemon=True)
            t.start()
            pipe(c, up)
            t.join(10)
        except OSError:
            pass
        finally:
            c.close()


class FlakyTcpProxy:
    """Forwards 127.0.0.1:port -> 127.0.0.1:target; connection i follows ``plan[i]`` (then "ok").

    ``"ok"`` passes everything; an int N cuts both directions after N bytes came back from the
    target (a transfer that breaks mid-stream, like a reset on a long-haul link).
    """

    def __init__(self, target_port: int, plan: list[str | int] | None = None) -> None:
        self.target = target_port
        self.plan = list(plan or [])
        self.count = 0
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FlakyTcpProxy:
        self.thread.start()
        return self

    def __exit__(self, *a: object) -> None:
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                mode = self.plan[self.count] if self.count < len(self.plan) else "ok"
                self.count += 1
            threading.Thread(target=self._handle, args=(c, mode), daemon=True).start()

    def _handle(self, c: socket.socket, mode: str | int) -> None:  # noqa: C901  (split pending, issue 14)
        try:
            up = socket.create_connection(("127.0.0.1", self.target), timeout=10)
        except OSError:
            c.close()
            return
        limit = None if mode == "ok" else int(mode)
        done = threading.Event()

        def close_all() -> None:
            """Reset both sides: linger 0 makes close() send RST; SHUT_RD wakes the other thread's recv."""
            done.set()
            for s in (c, up):
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
            for s in (c, up):
                try:
                    s.close()
                except OSError:
                    pass

        def down() -> None:  # target -> client, counted
            sent = 0
            try:
                while not done.is_set():
                    d = up.recv(65536)
                    if not d:
                        break
                    if limit is not None and sent + len(d) >= limit:
                        c.sendall(d[: max(0, limit - sent)])
                        close_all()
                        return
                    c.sendall(d)
                    sent += len(d)
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        def upstream() -> None:
            try:
                while not done.is_set():
                    d = c.recv(65536)
                    if not d:
                        break
                    up.sendall(d)
                up.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        t = threading.Thread(target=down, daemon=True)
        t.start()
        upstream()
        t.join(30)
        if not done.is_set():
            for s in (c, up):
                try:
                    s.close()
                except OSError:
                    pass
