"""A loopback HTTPS Redfish service serving a DMTF mockup tree (``<dir>/<path>/index.json``).

TLS with a self-signed certificate made by ``openssl`` for 127.0.0.1, HTTP Basic auth, GET only:
the shape of a real BMC, small enough to edit a fault into a copied tree.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path


def make_cert(openssl: str, d: Path) -> tuple[Path, Path]:
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
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
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class _Handler(http.server.BaseHTTPRequestHandler):
    root: Path
    auth: str
    log: list[str]

    def log_message(self, fmt: str, *args: object) -> None:
        self.log.append(fmt % args)

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != self.auth:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="redfish"')
            self.end_headers()
            return
        path = self.path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
        if not path.startswith("/redfish/v1"):
            self.send_error(404)
            return
        rel = path[len("/redfish/v1") :].strip("/")
        f = (self.root / rel / "index.json").resolve()
        if self.root.resolve() not in f.parents or not f.is_file():
            self.send_error(404)
            return
        body = f.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serving(root: Path, user: str, password: str, cert: Path, key: Path) -> Iterator[tuple[str, list[str]]]:
    log: list[str] = []
    token = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    handler = type("H", (_Handler,), {"root": root, "auth": token, "log": log})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"https://127.0.0.1:{srv.server_address[1]}", log
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)
