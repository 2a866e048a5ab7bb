"""Bounded low-level network steps (resolve, connect, CONNECT proxy, TLS, one HTTP request) and the
per-endpoint latency probe.  Every step has its own timeout under one run deadline; resolver and
connector are injectable so tests stay on 127.0.0.1.  Split from :mod:`gpuclinic.sources.network`,
which re-exports these names."""

from __future__ import annotations

import errno
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gpuclinic import __version__
from gpuclinic.facts.network import Endpoint, EndpointProbe
from gpuclinic.sources.netproxy import ProxyRoute, redact_url, route_for

Addr = tuple[int, tuple[Any, ...]]  # (address family, sockaddr)
Resolver = Callable[[str, int, float], list[Addr]]
Connector = Callable[[Addr, float], socket.socket]

USER_AGENT = f"gpuclinic/{__version__} (net probe)"
MIB = 1024 * 1024
# ----------------------------------------------------------------------------------------------
# Low-level steps (each bounded)


def default_resolver(host: str, port: int, timeout: float) -> list[Addr]:
    """getaddrinfo in a daemon thread: a hung resolver costs ``timeout``, never the whole run."""
    box: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["v"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except BaseException as e:  # handed to the caller
            box["e"] = e
        finally:
            done.set()

    threading.Thread(target=run, name=f"dns-{host}", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"no answer in {timeout:g}s")
    if "e" in box:
        raise box["e"]  # type: ignore[misc]
    seen: list[Addr] = []
    for fam, _t, _p, _c, sa in box["v"]:  # type: ignore[attr-defined]
        a = (fam, tuple(sa))
        if a not in seen:
            seen.append(a)
    return seen


def default_connector(addr: Addr, timeout: float) -> socket.socket:
    fam, sa = addr
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.connect(sa)
    except BaseException:
        s.close()
        raise
    return s


def default_route_present() -> bool | None:
    """Is there a default route (IPv4 or IPv6)?  Read from /proc; sends nothing.  None: unknown."""
    found_any = False
    try:
        with open("/proc/net/route", encoding="ascii") as fh:
            found_any = True
            for line in fh.readlines()[1:]:
                f = line.split()
                if len(f) > 2 and f[1] == "00000000" and (int(f[3], 16) & 0x1):
                    return True
    except OSError:
        pass
    try:
        with open("/proc/net/ipv6_route", encoding="ascii") as fh:
            found_any = True
            for line in fh:
                f = line.split()
                if len(f) >= 10 and f[0] == "0" * 32 and f[1] == "00" and f[9] != "lo":
                    return True
    except OSError:
        pass
    return False if found_any else None


def describe_error(e: BaseException, timeout: float | None = None) -> str:
    """One short phrase for a network error ("refused", "timed out after 3s", "network unreachable")."""
    if isinstance(e, socket.gaierror):
        if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
            return "name does not resolve"
        if e.errno == socket.EAI_AGAIN:
            return "temporary failure in name resolution (no DNS server answers)"
        return f"resolver error: {e.strerror or e}"
    if isinstance(e, (TimeoutError, socket.timeout)):
        msg = str(e)
        if msg.startswith("no answer"):
            return msg
        return f"timed out after {timeout:g}s" if timeout else "timed out"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, ConnectionResetError):
        return "connection reset by peer"
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {e.verify_message or e.reason}"
    if isinstance(e, ssl.SSLError):
        return f"TLS error: {e.reason or e}"
    if isinstance(e, OSError) and e.errno is not None:
        names = {errno.ENETUNREACH: "network unreachable (no route)", errno.EHOSTUNREACH: "host unreachable",
                 errno.EADDRNOTAVAIL: "address not available", errno.ECONNABORTED: "connection aborted"}
        if e.errno in names:
            return names[e.errno]
        return e.strerror or str(e)
    return str(e) or type(e).__name__


class ProbeError(Exception):
    """A step failed; ``phase`` is dns | connect | proxy | tls | http."""

    def __init__(self, phase: str, msg: str) -> None:
        super().__init__(msg)
        self.phase = phase


class _Reader:
    """Minimal buffered reader over a (TLS) socket for HTTP/1.1 headers."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def read_head(self, limit: int = 65536) -> bytes:
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(16384)
            if not chunk:
                raise ProbeError("http", "connection closed before a response")
            self.buf += chunk
            if len(self.buf) > limit:
                raise ProbeError("http", "response headers too large")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("iso-8859-1").split("\r\n")
    m = re.match(r"^HTTP/\d(?:\.\d)?\s+(\d{3})", lines[0])
    if not m:
        raise ProbeError("http", f"not an HTTP response: {lines[0][:60]!r}")
    headers: dict[str, str] = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        if k:
            headers[k.strip().lower()] = v.strip()
    return int(m.group(1)), headers


@dataclass
class ProbeConfig:
    """Limits and injection points for one run of probes."""

    deadline_s: float = 30.0
    dns_timeout_s: float = 3.0
    connect_timeout_s: float = 3.0
    connect_samples: int = 5
    tls_timeout_s: float = 5.0
    http_timeout_s: float = 5.0
    throughput: bool = True
    window_s: float = 2.0
    max_bytes_per_conn: int = 16 * MIB
    parallel: int = 4
    fast_enough_bps: float = 50e6  # origin this fast: mirrors of it are not worth measuring
    max_workers: int = 32
    resolver: Resolver = default_resolver
    connector: Connector = default_connector
    ssl_context: ssl.SSLContext | None = None
    route_check: Callable[[], bool | None] = default_route_present
    env: Mapping[str, str] | None = None  # for proxy routing; default os.environ

    def context(self) -> ssl.SSLContext:
        if self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        return self.ssl_context


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def cap(self, t: float) -> float:
        left = self.left()
        if left <= 0.05:
            raise ProbeError("deadline", "overall deadline reached")
        return min(t, left)


def _connect_any(addrs: list[Addr], cfg: ProbeConfig, dl: _Deadline) -> tuple[socket.socket, Addr, float]:
    """Connect to the first address that accepts; returns (socket, address, seconds)."""
    last: BaseException | None = None
    last_t = cfg.connect_timeout_s
    for a in addrs:
        t = dl.cap(cfg.connect_timeout_s)
        t0 = time.perf_counter()
        try:
            s = cfg.connector(a, t)
            return s, a, time.perf_counter() - t0
        except OSError as e:
            last = e
            last_t = t
    raise ProbeError("connect", describe_error(last, last_t) if last else "no address")


def _proxy_connect(sock: socket.socket, host: str, port: int, auth: str | None, cfg: ProbeConfig,
                   dl: _Deadline) -> None:
    """Open an HTTP CONNECT tunnel on ``sock`` (already connected to the proxy)."""
    req = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: {USER_AGENT}\r\n"
    if auth:
        req += f"Proxy-Authorization: Basic {auth}\r\n"
    sock.settimeout(dl.cap(cfg.http_timeout_s))
    try:
        sock.sendall((req + "\r\n").encode())
        status, _h = parse_head(_Reader(sock).read_head())
    except OSError as e:
        raise ProbeError("proxy", f"proxy CONNECT failed: {describe_error(e, cfg.http_timeout_s)}") from e
    if status == 407:
        raise ProbeError("proxy", f"proxy requires authentication for CONNECT {host}:{port} (HTTP 407)"
                         + (": the credentials given were rejected" if auth else
                            ": put user:password in the proxy URL (http://USER:PASS@HOST:PORT)"))
    if status != 200:
        raise ProbeError("proxy", f"proxy refused CONNECT {host}:{port} with HTTP {status}")


def _wrap_tls(sock: socket.socket, host: str, cfg: ProbeConfig, dl: _Deadline) -> tuple[ssl.SSLSocket, float]:
    sock.settimeout(dl.cap(cfg.tls_timeout_s))
    t0 = time.perf_counter()
    try:
        tls = cfg.context().wrap_socket(sock, server_hostname=host)
    except (OSError, ssl.SSLError) as e:
        raise ProbeError("tls", describe_error(e, cfg.tls_timeout_s)) from e
    return tls, time.perf_counter() - t0


def _open(url: str, cfg: ProbeConfig, dl: _Deadline, addrs: dict[str, list[Addr]]) -> socket.socket:
    """A connected (tunnelled, TLS-wrapped) socket to ``url``'s host, honouring the proxy route."""
    p = urlsplit(url)
    route = route_for(url, cfg.env if cfg.env is not None else os.environ)
    if route.proxy_url:
        scheme, phost, pport, auth = route.proxy_parts
        if scheme not in ("http", "https"):
            route = ProxyRoute(route.host, route.port)  # SOCKS: probe the direct path
        else:
            key = f"{phost}:{pport}"
            if key not in addrs:
                addrs[key] = _resolve(phost, pport, cfg, dl)
            s, _a, _t = _connect_any(addrs[key], cfg, dl)
            try:
                if scheme == "https":
                    s, _ = _wrap_tls(s, phost, cfg, dl)
                if p.scheme == "https":
                    _proxy_connect(s, route.host, route.port, auth, cfg, dl)
                    s, _ = _wrap_tls(s, route.host, cfg, dl)
            except BaseException:
                s.close()
                raise
            return s
    key = f"{route.host}:{route.port}"
    if key not in addrs:
        addrs[key] = _resolve(route.host, route.port, cfg, dl)
    s, _a, _t = _connect_any(addrs[key], cfg, dl)
    if p.scheme == "https":
        try:
            s, _ = _wrap_tls(s, route.host, cfg, dl)
        except BaseException:
            s.close()
            raise
    return s


def _resolve(host: str, port: int, cfg: ProbeConfig, dl: _Deadline) -> list[Addr]:
    t = dl.cap(cfg.dns_timeout_s)
    try:
        out = cfg.resolver(host, port, t)
    except (OSError, TimeoutError) as e:
        raise ProbeError("dns", describe_error(e, t)) from e
    if not out:
        raise ProbeError("dns", "no addresses")
    return out


def _request(sock: socket.socket, url: str, *, method: str = "GET", rng: str | None = None,
             proxied_plain: bool = False) -> None:
    p = urlsplit(url)
    target = url if proxied_plain else (p.path or "/") + (f"?{p.query}" if p.query else "")
    host = p.netloc.rsplit("@", 1)[-1]
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"User-Agent: {USER_AGENT}",
             "Accept: */*", "Accept-Encoding: identity", "Connection: close"]
    if rng:
        lines.append(f"Range: {rng}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii", "replace"))


def _is_proxied_plain(url: str, cfg: ProbeConfig) -> bool:
    if urlsplit(url).scheme != "http":
        return False
    r = route_for(url, cfg.env if cfg.env is not None else os.environ)
    return bool(r.proxy_url) and r.proxy_parts[0] in ("http", "https")


# ----------------------------------------------------------------------------------------------
# One endpoint: latency phases


_Tunnel = tuple[str, int, str | None, str]  # target host, port, proxy auth, proxy scheme


def probe_latency(ep: Endpoint, cfg: ProbeConfig, dl: _Deadline) -> EndpointProbe:
    """DNS, connect samples, TLS and TTFB for one endpoint; never raises."""
    t_start = time.monotonic()
    p = urlsplit(ep.url)
    pr = EndpointProbe(endpoint=ep, host=p.hostname or "",
                       port=p.port or (443 if p.scheme == "https" else 80))
    first_hop, tunnel = _first_hop(pr, ep, cfg)
    try:
        # DNS (of the first hop: with a proxy, the proxy resolves the target)
        addrs = _dns(pr, first_hop, cfg, dl)
        if not addrs:
            return pr
        order = _connect_samples(pr, addrs, cfg, dl)
        if not pr.connect_ms:
            return pr
        # TLS handshake (through the tunnel if proxied), then time to first byte on the same socket
        sock, _a, _secs = _connect_any(order, cfg, dl)
        held = [sock]  # the socket in use: TLS wrapping replaces it, and the newest is the one to close
        try:
            if _handshakes(pr, held, p.scheme, first_hop, tunnel, cfg, dl):
                plain = tunnel is not None and p.scheme == "http"
                _ttfb(pr, held[-1], ep, proxied_plain=plain, cfg=cfg, dl=dl)
        finally:
            held[-1].close()
    except ProbeError as e:
        if e.phase == "deadline":
            pr.deadline_hit = True
        elif e.phase == "connect" and not pr.connect_error:
            pr.connect_error = str(e)
        elif not pr.http_error:
            pr.http_error = str(e)
    except Exception as e:  # never let one endpoint break the run
        pr.http_error = f"{type(e).__name__}: {e}"
    finally:
        pr.elapsed_s = time.monotonic() - t_start
        pr.summarize()
    return pr


def _first_hop(pr: EndpointProbe, ep: Endpoint, cfg: ProbeConfig) -> tuple[tuple[str, int], _Tunnel | None]:
    """Where the first connection goes (the endpoint, or its HTTP(S) proxy) and the tunnel to open."""
    env = cfg.env if cfg.env is not None else os.environ
    route = route_for(ep.url, env)
    if not route.proxy_url:
        return (pr.host, pr.port), None
    scheme, phost, pport, auth = route.proxy_parts
    pr.via_proxy = redact_url(route.proxy_url)
    if scheme in ("http", "https"):
        return (phost, pport), (pr.host, pr.port, auth, scheme)
    pr.via_proxy = f"{pr.via_proxy} (SOCKS: probed directly)"
    return (pr.host, pr.port), None


def _dns(pr: EndpointProbe, first_hop: tuple[str, int], cfg: ProbeConfig, dl: _Deadline) -> list[Any]:
    """Resolve the first hop; an empty list (with ``pr.dns_error`` set) when it does not resolve."""
    t = dl.cap(cfg.dns_timeout_s)
    t0 = time.perf_counter()
    try:
        addrs = cfg.resolver(first_hop[0], first_hop[1], t)
    except (OSError, TimeoutError) as e:
        pr.dns_error = describe_error(e, t)
        return []
    pr.dns_ms = (time.perf_counter() - t0) * 1000
    pr.addresses = [str(a[1][0]) for a in addrs][:8]
    if not addrs:
        pr.dns_error = "no addresses"
    return list(addrs)


def _connect_samples(pr: EndpointProbe, addrs: list[Any], cfg: ProbeConfig, dl: _Deadline) -> list[Any]:
    """Connect ``cfg.connect_samples`` times, sticking to the first address that works; returns the
    addresses in the order to use next."""
    order = list(addrs)
    for _ in range(max(1, cfg.connect_samples)):
        pr.connect_attempts += 1
        try:
            s, a, secs = _connect_any(order, cfg, dl)
        except ProbeError as e:
            if e.phase == "deadline":
                raise
            pr.connect_failures += 1
            pr.connect_error = str(e)
            if str(e).startswith("network unreachable") and pr.connect_failures >= 2 and not pr.connect_ms:
                break  # no route: more samples will say the same
            continue
        s.close()
        order = [a] + [x for x in order if x != a]
        pr.connect_ms.append(secs * 1000)
    return order


def _handshakes(
    pr: EndpointProbe, held: list[Any], scheme: str, first_hop: tuple[str, int], tunnel: _Tunnel | None,
    cfg: ProbeConfig, dl: _Deadline,
) -> bool:
    """TLS to an HTTPS proxy, CONNECT through it, TLS to the endpoint; each wrapped socket is appended
    to ``held``.  False when a step failed (recorded on ``pr``)."""
    if tunnel is not None:
        if tunnel[3] == "https":
            held.append(_wrap_tls(held[-1], first_hop[0], cfg, dl)[0])
        if scheme == "https":
            try:
                _proxy_connect(held[-1], tunnel[0], tunnel[1], tunnel[2], cfg, dl)
            except ProbeError as e:
                pr.connect_error = str(e)
                pr.http_error = str(e)
                return False
    if scheme == "https":
        try:
            s, secs = _wrap_tls(held[-1], pr.host, cfg, dl)
        except ProbeError as e:
            if e.phase == "deadline":
                raise
            pr.tls_error = str(e)
            return False
        held.append(s)
        pr.tls_ms = secs * 1000
        pr.tls_version = s.version() if isinstance(s, ssl.SSLSocket) else None
    return True


def _ttfb(pr: EndpointProbe, s: Any, ep: Endpoint, *, proxied_plain: bool, cfg: ProbeConfig,
          dl: _Deadline) -> None:
    """Send a 1 KiB range request and time the first byte of the answer; read its status."""
    url = ep.url + (ep.probe_path if ep.probe_path.startswith("/") else "/" + ep.probe_path)
    s.settimeout(dl.cap(cfg.http_timeout_s))
    t0 = time.perf_counter()
    try:
        _request(s, url, rng="bytes=0-1023", proxied_plain=proxied_plain)
        first = s.recv(1)
        if not first:
            raise ProbeError("http", "connection closed before a response")
        pr.ttfb_ms = (time.perf_counter() - t0) * 1000
        rd = _Reader(s)
        rd.buf = first
        status, _h = parse_head(rd.read_head())
        pr.http_status = status
    except ProbeError as e:
        if e.phase == "deadline":
            raise
        pr.http_error = str(e)
    except OSError as e:
        pr.http_error = describe_error(e, cfg.http_timeout_s)


# ----------------------------------------------------------------------------------------------
# Throughput
