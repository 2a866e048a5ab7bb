"""The agent's HTTP face: dashboard, JSON API and Prometheus ``/metrics``.

Loopback by default.  On any other address a token is required on every request (``/metrics``
included unless ``metrics_require_token = false``): ``Authorization: Bearer TOKEN``, or
``?token=TOKEN`` once in the browser, which sets an HttpOnly cookie for the page's own requests.
Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
import threading
import urllib.parse
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuclinic.errors import GpuclinicError, InputError
from gpuclinic.watch import reasons as R
from gpuclinic.watch.agent import SERIES_FIELDS, Agent
from gpuclinic.watch.config import DEFAULT_PORT
from gpuclinic.watch.metrics import make_registry

_STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
           "app.css": "text/css; charset=utf-8", "fleet.html": "text/html; charset=utf-8",
           "fleet.js": "text/javascript; charset=utf-8", "room.js": "text/javascript; charset=utf-8",
           "room.css": "text/css; charset=utf-8"}
_COOKIE = "gpuclinic_token"


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT``, ``PORT`` or ``[v6]:PORT`` -> (host, port)."""
    v = value.strip()
    host, port_s = "127.0.0.1", v
    if v.startswith("["):
        h, _, rest = v[1:].partition("]")
        host, port_s = h, rest.lstrip(":") or str(DEFAULT_PORT)
    elif v.count(":") == 1:
        host, port_s = v.split(":")
        host = host or "127.0.0.1"
    elif ":" in v:
        raise InputError(f"bad --listen {value!r}: write IPv6 as [addr]:port")
    elif not v.isdigit():
        host, port_s = v, str(DEFAULT_PORT)
    try:
        port = int(port_s)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        raise InputError(f"bad --listen {value!r}: port must be 0-65535") from None
    return host, port


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_howto(base_url: str) -> str:
    """How to pass the token, for the 401 page and the agent's start-up lines (never the token itself)."""
    return (
        f"Browser: open {base_url}/?token=TOKEN once (it sets a cookie for this dashboard). "
        f"curl / scripts: -H 'Authorization: Bearer TOKEN'. Prometheus: authorization: {{credentials: "
        f"TOKEN}} "
        "(type Bearer). TOKEN is the one `gpuclinic watch` printed at start, or the --token / "
        "GPUCLINIC_WATCH_TOKEN value it was given."
    )


def new_token() -> str:
    return secrets.token_urlsafe(24)


def event_json(ev: Any) -> dict[str, Any]:
    d: dict[str, Any] = ev.to_dict()
    d.pop("key", None)
    return d


class _Handler(BaseHTTPRequestHandler):
    server: WatchHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: request lines may carry ?token=
        return

    def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; "
            "style-src 'self'; script-src 'self'; frame-ancestors 'none'",
        )
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj: Any, code: int = 200) -> None:
        self._send(code, json.dumps(obj, default=str).encode(), "application/json")

    def _authorized(self, path: str, query: dict[str, list[str]]) -> tuple[bool, dict[str, str]]:
        token = self.server.token
        if token is None or (path == "/metrics" and not self.server.metrics_require_token):
            return True, {}
        given: list[str] = []
        auth = self.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            given.append(auth[7:].strip())
        if "token" in query:
            given.append(query["token"][0])
        cookie = SimpleCookie(self.headers.get("Cookie", ""))
        if _COOKIE in cookie:
            given.append(cookie[_COOKIE].value)
        for g in given:
            if hmac.compare_digest(g.encode(), token.encode()):
                extra = {}
                if "token" in query:
                    extra["Set-Cookie"] = f"{_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
                return True, extra
        return False, {}

    def do_HEAD(self) -> None:
        self.do_GET()

    def _host_ok(self) -> bool:
        """Without a token, only answer requests addressed to an IP or localhost (blocks DNS rebinding:
        a web page whose name resolves to 127.0.0.1 must not read the agent through the user's browser)."""
        if self.server.token is not None:
            return True
        host = self.headers.get("Host", "")
        name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] or host
        if name in ("localhost", ""):
            return True
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return False

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if not self._host_ok():
            self._send(
                HTTPStatus.FORBIDDEN,
                b"unexpected Host header (use the IP address or localhost)\n",
                "text/plain; charset=utf-8",
            )
            return
        ok, extra = self._authorized(url.path, query)
        if not ok:
            host = self.headers.get("Host") or ""
            if not re.fullmatch(r"[A-Za-z0-9.:\[\]-]{1,300}", host):  # echo only a plain host[:port]
                host = self.server.url.split("://", 1)[1]
            body = f"token required.\n{token_howto('http://' + host)}\n".encode()
            self._send(
                HTTPStatus.UNAUTHORIZED,
                body,
                "text/plain; charset=utf-8",
                {"WWW-Authenticate": 'Bearer realm="gpuclinic"'},
            )
            return
        try:
            self._route(url.path, query, extra)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # never a traceback to the client
            self._json({"error": f"{type(e).__name__}"}, 500)
            self.server.agent.log(f"watch: HTTP {url.path} failed: {type(e).__name__}: {e}")

    def _route(self, path: str, query: dict[str, list[str]], extra: dict[str, str]) -> None:
        agent = self.server.agent
        if path in ("/", "/index.html"):
            self._static("index.html", extra)
        elif path.startswith("/static/"):
            self._static(path[len("/static/") :], extra)
        elif path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            st = agent.status_snapshot()
            self._json({"ok": not st.stalled, "sample_age_s": st.sample_age})
        elif path == "/api/state":
            self._json(state_json(agent))
        elif path == "/api/series":
            since = float(query["since"][0]) if "since" in query else None
            gpu = int(query["gpu"][0]) if "gpu" in query else None
            self._json(
                {"fields": SERIES_FIELDS, "gpus": {str(k): v for k, v in agent.series(gpu, since).items()}}
            )
        elif path == "/api/incidents":
            self._json(incidents_json(agent))
        elif path == "/api/events":
            self._json({"events": events_json(agent, float(query["since"][0]) if "since" in query else None)})
        elif path == "/fleet":  # with `watch --peers`: this node and its peers (gpuclinic.fleet.page)
            self._static("fleet.html", extra)
        elif path == "/api/fleet":
            page = self.server.fleet_page
            if page is None:
                self._send(404, b"no peers (start watch with --peers)\n", "text/plain; charset=utf-8")
            else:
                self._json(page.json())
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _static(self, name: str, extra: dict[str, str]) -> None:
        if name not in _STATIC:  # fixed list: no path tricks
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        body = resources.files("gpuclinic.watch").joinpath("static").joinpath(name).read_bytes()
        self._send(200, body, _STATIC[name], extra)


def incidents_json(agent: Agent) -> dict[str, Any]:
    """The node verdict and the open incidents (root cause, symptoms, evidence, runbook), worst first."""
    return {
        "verdict": agent.verdict().value,
        "incidents": [
            dict(t.incident.to_dict(), id=t.id, opened=t.opened, events=sorted(t.members))
            for t in agent.incidents.open_incidents()
        ],
    }


def state_json(agent: Agent) -> dict[str, Any]:
    st = agent.status_snapshot()
    gpus = []
    for g in st.gpus:
        act = R.active(g.clock_event_reasons_mask, g.clock_event_reasons)
        gpus.append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "pci_bus_id": g.pci_bus_id,
                "lost": g.lost,
                "temperature_c": g.temperature_c,
                "slowdown_temp_c": g.slowdown_temp_c,
                "power_w": g.power_draw_w,
                "power_limit_w": g.power_enforced_limit_w or g.power_limit_w,
                "sm_clock_mhz": g.sm_clock_mhz,
                "sm_clock_max_mhz": g.sm_clock_max_mhz,
                "utilization_pct": g.utilization_gpu_pct,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_total_bytes": g.memory_total_bytes,
                "reasons": act,
                "processes": [
                    {"pid": p.pid, "name": p.name, "used_memory_bytes": p.used_memory_bytes}
                    for p in g.processes[:8]
                ],
            }
        )
    return {
        "host": agent.host,
        "backend": st.backend,
        "driver_version": st.driver_version,
        "now": st.now,
        "verdict": st.verdict.value,
        "gpus": gpus,
        "open_events": [event_json(e) for e in st.open_events],
        "incidents": incidents_json(agent)["incidents"],
        "reasons": [{"bit": b, "name": n, "description": d} for b, n, d in R.REASONS],
        "status": {
            "sample_age_s": st.sample_age,
            "stalled": st.stalled,
            "samples": st.samples_total,
            "sample_errors": st.sample_errors_total,
            "store_error": st.store_error,
            "store_buffered": st.store_buffered,
            "notify_sent": st.notify_sent,
            "notify_failed": st.notify_failed,
            "notify_spooled": st.notify_spooled,
            "notes": st.notes,
        },
        "room": _room_state(agent),
    }


def _room_state(agent: Agent) -> dict[str, Any] | None:
    """The BMC's latest poll (inlet, fans, PSUs) when the agent polls one (sources/bmc/poller.py)."""
    if getattr(agent, "room_poller", None) is None:
        return None
    from gpuclinic.sources.bmc.poller import room_state

    return room_state(agent.room_poller)


def events_json(agent: Agent, since: float | None) -> list[dict[str, Any]]:
    seen: dict[tuple[str, float], dict[str, Any]] = {}
    if agent.store is not None and agent.store.error is None:
        try:
            for ev in agent.store.events(since=since, limit=300):
                seen[(ev.key, ev.opened)] = event_json(ev)
        except Exception:  # the store is optional for the live view
            pass
    for ev in [*agent.book.recent_resolved, *agent.book.open_events()]:
        if since is None or ev.opened >= since or ev.resolved is None or ev.resolved >= since:
            seen[(ev.key, ev.opened)] = event_json(ev)
    return sorted(seen.values(), key=lambda d: (d["resolved"] is not None, -d["opened"]))


class WatchHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, addr: tuple[str, int], agent: Agent, *, token: str | None, metrics_require_token: bool = True
    ) -> None:
        if ":" in addr[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.agent = agent
        self.token = token
        self.metrics_require_token = metrics_require_token
        self.registry = make_registry(agent)
        self.fleet_page: Any = None  # gpuclinic.fleet.page.FleetPage when started with --peers
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        h = f"[{host}]" if ":" in host else host
        return f"http://{h}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.5}, name="gpuclinic-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def serve(
    agent: Agent, listen: str, *, token: str | None = None, metrics_require_token: bool = True
) -> tuple[WatchHTTPServer, str | None]:
    """Start the server.  Returns (server, generated token or None)."""
    host, port = parse_listen(listen)
    generated = None
    if token is None and not is_loopback(host):
        token = generated = new_token()
    try:
        srv = WatchHTTPServer((host, port), agent, token=token, metrics_require_token=metrics_require_token)
    except OSError as e:
        raise GpuclinicError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    srv.start()
    return srv, generated
