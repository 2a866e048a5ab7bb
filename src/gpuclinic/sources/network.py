"""Network source: how the path to GitHub, Hugging Face, PyPI and their mirrors behaves, measured.

For every endpoint: DNS time, TCP connect time over several samples (median, jitter, failure rate),
TLS handshake time, time to first byte, and for endpoints with a known large object a throughput
sample over ONE connection and over SEVERAL parallel connections in the same time window.  The
ratio of the two tells a per-connection cap (parallel >> single: use parallel downloads) from a
link cap (parallel ~= single: only a closer mirror or a faster link helps).

Every step has its own timeout and the whole run has a deadline; DNS runs in a daemon thread so a
hung resolver cannot hold the process.  The resolver, connector, route check and TLS context are
injectable, so tests reach only 127.0.0.1 and simulate an offline machine without sending traffic.
Proxy settings (env, pip, git, Hugging Face) are read the way the tools read them, probes go
through an HTTP(S) CONNECT proxy when the tools would, and credentials never leave this module.
"""

from __future__ import annotations

import base64
import configparser
import errno
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from gpuclinic import __version__
from gpuclinic.facts.network import Endpoint, EndpointProbe, NetworkFacts, ProxySettings, ThroughputSample
from gpuclinic.facts.snapshot import Snapshot

Addr = tuple[int, tuple[Any, ...]]  # (address family, sockaddr)
Resolver = Callable[[str, int, float], list[Addr]]
Connector = Callable[[Addr, float], socket.socket]

USER_AGENT = f"gpuclinic/{__version__} (net probe)"
MIB = 1024 * 1024

# ----------------------------------------------------------------------------------------------
# Redaction


def redact_url(url: str | None) -> str | None:
    """Remove user:password and query strings (signed URLs, tokens) from a URL."""
    if url is None:
        return None
    s = url.strip()
    if re.match(r"^git@[^/:]+:", s):  # scp-style ssh remote: "git" is not a secret
        return s
    try:
        parts = urlsplit(s if "://" in s else "http://" + s)
    except ValueError:
        return re.sub(r"//[^/@\s]*@", "//***@", s)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    out = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    if "://" not in s:
        out = out.split("://", 1)[1]
    return out


# ----------------------------------------------------------------------------------------------
# Proxy settings

_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
_NO_PROXY_VARS = ("no_proxy", "NO_PROXY")


def _pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's config files, lowest precedence first (global, user, site); PIP_CONFIG_FILE last."""
    home = Path(env.get("HOME") or Path.home())
    xdg_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [Path("/etc/pip.conf")]
    files += [
        home / ".pip" / "pip.conf",
        Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf",
    ]
    if env.get("VIRTUAL_ENV"):
        files.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def _check_proxy_url(name: str, value: str, problems: list[str]) -> None:
    s = value.strip()
    parts = urlsplit(s if "://" in s else "http://" + s)
    try:
        port = parts.port
    except ValueError:
        problems.append(f"{name}={redact_url(s)}: the port is not a number")
        return
    if not parts.hostname:
        problems.append(f"{name}={redact_url(s)}: no host in the proxy URL")
    elif parts.scheme not in ("http", "https", "socks4", "socks4a", "socks5", "socks5h"):
        problems.append(f"{name}={redact_url(s)}: unknown proxy scheme {parts.scheme!r}")
    elif port is None and "://" in s and parts.scheme in ("socks5", "socks5h", "socks4"):
        problems.append(f"{name}={redact_url(s)}: no port given")


def read_git_config(runner: Callable[[list[str]], str | None] | None = None) -> list[tuple[str, str]]:
    """``git config --get-regexp`` for proxy and insteadOf keys (no shell, 3 s limit)."""
    argv = ["git", "config", "--get-regexp", r"^(http\..*proxy|https\..*proxy|url\..*\.insteadof)$"]
    if runner is not None:
        out = runner(argv)
    else:
        git = shutil.which("git")
        if git is None:
            return []
        try:
            cp = subprocess.run([git, *argv[1:]], capture_output=True, text=True, timeout=3, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return []
        out = cp.stdout if cp.returncode == 0 else ""
    pairs: list[tuple[str, str]] = []
    for line in (out or "").splitlines():
        key, _, val = line.partition(" ")
        if key:
            pairs.append((key, val.strip()))
    return pairs


def _env_proxies(ps: ProxySettings, env: Mapping[str, str]) -> None:
    """Proxy variables (redacted), case variants that disagree, and the no-proxy list."""
    for name in _PROXY_VARS:
        v = env.get(name)
        if v:
            ps.env[name] = redact_url(v) or ""
            _check_proxy_url(name, v, ps.problems)
    for lower, upper in (
        ("http_proxy", "HTTP_PROXY"),
        ("https_proxy", "HTTPS_PROXY"),
        ("all_proxy", "ALL_PROXY"),
        ("no_proxy", "NO_PROXY"),
    ):
        lv, uv = env.get(lower), env.get(upper)
        if lv and uv and lv.strip() != uv.strip():
            ps.problems.append(
                f"{lower} and {upper} differ ({redact_url(lv)} vs {redact_url(uv)}): curl and git read only "
                f"{lower if lower != 'http_proxy' else 'http_proxy'}, Python tools prefer the lower-case one"
            )
    for name in _NO_PROXY_VARS:
        v = env.get(name)
        if v:
            ps.env[name] = v
            for item in v.split(","):
                item = item.strip()
                if item and item not in ps.no_proxy:
                    ps.no_proxy.append(item)


def _pip_settings(ps: ProxySettings, env: Mapping[str, str], pip_files: Iterable[Path] | None) -> None:
    """pip: files in precedence order, then PIP_* environment variables win."""
    files = list(pip_files) if pip_files is not None else _pip_config_files(env)
    for f in files:
        if not f.is_file():
            continue
        cp = configparser.RawConfigParser()
        try:
            cp.read(f, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as e:
            ps.problems.append(f"pip config {f}: unreadable ({type(e).__name__})")
            continue
        ps.pip_config_files.append(str(f))
        for section in ("global", "install", "download"):
            if not cp.has_section(section):
                continue
            if cp.has_option(section, "index-url"):
                ps.pip_index_url = redact_url(cp.get(section, "index-url").strip())
            if cp.has_option(section, "extra-index-url"):
                ps.pip_extra_index_urls = [
                    redact_url(u) or "" for u in cp.get(section, "extra-index-url").split() if u
                ]
            if cp.has_option(section, "proxy"):
                ps.pip_proxy = redact_url(cp.get(section, "proxy").strip())
    if env.get("PIP_INDEX_URL"):
        ps.pip_index_url = redact_url(env["PIP_INDEX_URL"])
    if env.get("PIP_EXTRA_INDEX_URL"):
        ps.pip_extra_index_urls = [redact_url(u) or "" for u in env["PIP_EXTRA_INDEX_URL"].split() if u]
    if env.get("PIP_PROXY"):
        ps.pip_proxy = redact_url(env["PIP_PROXY"])


def _git_settings(ps: ProxySettings, git_runner: Callable[[list[str]], str | None] | None) -> None:
    """git: http(s) proxies and url.<base>.insteadOf rewrites."""
    for key, val in read_git_config(git_runner):
        low = key.lower()
        if low == "http.proxy" or (low.startswith("http.") and low.endswith(".proxy") and "github" in low):
            ps.git_http_proxy = redact_url(val)
            _check_proxy_url(key, val, ps.problems)
        elif low == "https.proxy":
            ps.git_https_proxy = redact_url(val)
            _check_proxy_url(key, val, ps.problems)
        elif low.startswith("url.") and low.endswith(".insteadof"):
            base = key[4 : -len(".insteadof")]
            ps.git_insteadof[val] = redact_url(base) or base


def read_proxy_settings(
    env: Mapping[str, str] | None = None,
    *,
    git_runner: Callable[[list[str]], str | None] | None = None,
    pip_files: Iterable[Path] | None = None,
    hf_hub_version: str | None = None,
) -> ProxySettings:
    """Proxy and mirror settings from the environment, pip config, git config and HF variables."""
    if env is None and hf_hub_version is None:
        hf_hub_version = _installed_version("huggingface_hub")
    env = dict(os.environ if env is None else env)
    ps = ProxySettings()
    _env_proxies(ps, env)
    _pip_settings(ps, env, pip_files)
    _git_settings(ps, git_runner)
    # Hugging Face
    ps.hf_endpoint = redact_url(env.get("HF_ENDPOINT")) if env.get("HF_ENDPOINT") else None
    ps.hf_hub_enable_hf_transfer = env.get("HF_HUB_ENABLE_HF_TRANSFER")
    ps.hf_hub_disable_xet = env.get("HF_HUB_DISABLE_XET")
    ps.hf_xet_high_performance = env.get("HF_XET_HIGH_PERFORMANCE")
    ps.hf_hub_version = hf_hub_version
    return ps


def _installed_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def bypasses_proxy(host: str, no_proxy: Iterable[str]) -> bool:
    """NO_PROXY matching as curl/requests do it: ``*``, exact host, domain suffix (leading dot optional)."""
    h = host.lower().strip("[]")
    for item in no_proxy:
        it = item.strip().lower()
        if not it:
            continue
        if it == "*":
            return True
        it = it.split(":", 1)[0] if it.count(":") == 1 else it  # host:port -> host
        it = it.lstrip(".").strip("[]")
        if h == it or h.endswith("." + it):
            return True
    return False


@dataclass
class ProxyRoute:
    """How to reach a host: directly, or through an HTTP CONNECT proxy (raw URL, never stored)."""

    host: str
    port: int
    proxy_url: str | None = None  # raw, may carry credentials: use only to connect

    @property
    def proxy_parts(self) -> tuple[str, str, int, str | None]:
        assert self.proxy_url
        s = self.proxy_url if "://" in self.proxy_url else "http://" + self.proxy_url
        p = urlsplit(s)
        scheme = p.scheme or "http"
        port = p.port or (443 if scheme == "https" else 1080 if scheme.startswith("socks") else 80)
        auth = None
        if p.username is not None:
            auth = base64.b64encode(f"{unquote(p.username)}:{unquote(p.password or '')}".encode()).decode()
        return scheme, p.hostname or "", port, auth


def route_for(url: str, env: Mapping[str, str]) -> ProxyRoute:
    """The route a typical tool (curl, requests, httpx, git) takes to ``url`` given the environment."""
    p = urlsplit(url)
    host = p.hostname or ""
    port = p.port or (443 if p.scheme == "https" else 80)
    names = ("https_proxy", "HTTPS_PROXY") if p.scheme == "https" else ("http_proxy", "HTTP_PROXY")
    proxy = next((env[n] for n in (*names, "all_proxy", "ALL_PROXY") if env.get(n)), None)
    no_proxy = ",".join(env.get(n, "") for n in _NO_PROXY_VARS).split(",")
    if proxy and bypasses_proxy(host, no_proxy):
        proxy = None
    return ProxyRoute(host=host, port=port, proxy_url=proxy.strip() if proxy else None)


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
        names = {
            errno.ENETUNREACH: "network unreachable (no route)",
            errno.EHOSTUNREACH: "host unreachable",
            errno.EADDRNOTAVAIL: "address not available",
            errno.ECONNABORTED: "connection aborted",
        }
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


def _proxy_connect(
    sock: socket.socket, host: str, port: int, auth: str | None, cfg: ProbeConfig, dl: _Deadline
) -> None:
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
        raise ProbeError(
            "proxy",
            f"proxy requires authentication for CONNECT {host}:{port} (HTTP 407)"
            + (
                ": the credentials given were rejected"
                if auth
                else ": put user:password in the proxy URL (http://USER:PASS@HOST:PORT)"
            ),
        )
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


def _request(
    sock: socket.socket, url: str, *, method: str = "GET", rng: str | None = None, proxied_plain: bool = False
) -> None:
    p = urlsplit(url)
    target = url if proxied_plain else (p.path or "/") + (f"?{p.query}" if p.query else "")
    host = p.netloc.rsplit("@", 1)[-1]
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {host}",
        f"User-Agent: {USER_AGENT}",
        "Accept: */*",
        "Accept-Encoding: identity",
        "Connection: close",
    ]
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


def _connect_samples(pr: EndpointProbe, order: list[Addr], cfg: ProbeConfig, dl: _Deadline) -> list[Addr]:
    """Connect samples; stick to the first address that works (returned first in the new order)."""
    for _ in range(max(1, cfg.connect_samples)):
        pr.connect_attempts += 1
        try:
            s, a, secs = _connect_any(order, cfg, dl)
        except ProbeError as e:
            if e.phase == "deadline":
                raise
            pr.connect_failures += 1
            pr.connect_error = str(e)
            if (
                str(e).startswith("network unreachable")
                and pr.connect_failures >= 2
                and not pr.connect_ms
            ):
                break  # no route: more samples will say the same
            continue
        s.close()
        order = [a] + [x for x in order if x != a]
        pr.connect_ms.append(secs * 1000)
    return order


def _tls_and_ttfb(pr: EndpointProbe, ep: Endpoint, s: socket.socket, hop_host: str,
                  tunnel: tuple[str, int, str | None, str] | None, cfg: ProbeConfig,
                  dl: _Deadline) -> None:
    """TLS handshake (through the proxy tunnel if any) and time to first byte, into ``pr``; closes ``s``."""
    p = urlsplit(ep.url)
    try:
        if tunnel is not None:
            if tunnel[3] == "https":
                s, _ = _wrap_tls(s, hop_host, cfg, dl)
            if p.scheme == "https":
                try:
                    _proxy_connect(s, tunnel[0], tunnel[1], tunnel[2], cfg, dl)
                except ProbeError as e:
                    pr.connect_error = str(e)
                    pr.http_error = str(e)
                    return
        if p.scheme == "https":
            try:
                s, secs = _wrap_tls(s, pr.host, cfg, dl)
            except ProbeError as e:
                if e.phase == "deadline":
                    raise
                pr.tls_error = str(e)
                return
            pr.tls_ms = secs * 1000
            pr.tls_version = s.version() if isinstance(s, ssl.SSLSocket) else None
        url = ep.url + (ep.probe_path if ep.probe_path.startswith("/") else "/" + ep.probe_path)
        s.settimeout(dl.cap(cfg.http_timeout_s))
        t0 = time.perf_counter()
        try:
            _request(s, url, rng="bytes=0-1023", proxied_plain=tunnel is not None and p.scheme == "http")
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
    finally:
        s.close()


def probe_latency(ep: Endpoint, cfg: ProbeConfig, dl: _Deadline) -> EndpointProbe:
    """DNS, connect samples, TLS and TTFB for one endpoint; never raises."""
    t_start = time.monotonic()
    p = urlsplit(ep.url)
    pr = EndpointProbe(
        endpoint=ep, host=p.hostname or "", port=p.port or (443 if p.scheme == "https" else 80)
    )
    env = cfg.env if cfg.env is not None else os.environ
    route = route_for(ep.url, env)
    first_hop = (pr.host, pr.port)
    tunnel: tuple[str, int, str | None, str] | None = None
    if route.proxy_url:
        scheme, phost, pport, auth = route.proxy_parts
        pr.via_proxy = redact_url(route.proxy_url)
        if scheme in ("http", "https"):
            first_hop = (phost, pport)
            tunnel = (pr.host, pr.port, auth, scheme)
        else:
            pr.via_proxy = f"{pr.via_proxy} (SOCKS: probed directly)"
    try:
        # DNS (of the first hop: with a proxy, the proxy resolves the target)
        t = dl.cap(cfg.dns_timeout_s)
        t0 = time.perf_counter()
        try:
            addrs = cfg.resolver(first_hop[0], first_hop[1], t)
        except (OSError, TimeoutError) as e:
            pr.dns_error = describe_error(e, t)
            return pr
        pr.dns_ms = (time.perf_counter() - t0) * 1000
        pr.addresses = [str(a[1][0]) for a in addrs][:8]
        if not addrs:
            pr.dns_error = "no addresses"
            return pr
        order = _connect_samples(pr, list(addrs), cfg, dl)
        if not pr.connect_ms:
            return pr
        # TLS handshake (through the tunnel if proxied), then time to first byte on the same socket
        s, _a, _secs = _connect_any(order, cfg, dl)
        _tls_and_ttfb(pr, ep, s, first_hop[0], tunnel, cfg, dl)
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


# ----------------------------------------------------------------------------------------------
# Throughput


@dataclass
class _Stream:
    sock: socket.socket | None = None
    status: int | None = None
    final_url: str | None = None
    size: int | None = None
    buffered: int = 0
    bytes: int = 0
    end_t: float = 0.0
    error: str | None = None
    ready: threading.Event = field(default_factory=threading.Event)


def _open_ranged(
    url: str,
    start: int,
    end: int | None,
    cfg: ProbeConfig,
    dl: _Deadline,
    addrs: dict[str, list[Addr]],
    st: _Stream,
    max_redirects: int = 5,
) -> None:
    """GET ``url`` with a Range, following redirects; leaves ``st.sock`` positioned at the body."""
    rng = f"bytes={start}-{'' if end is None else end}"
    for _ in range(max_redirects + 1):
        s = _open(url, cfg, dl, addrs)
        s.settimeout(dl.cap(cfg.http_timeout_s))
        _request(s, url, rng=rng, proxied_plain=_is_proxied_plain(url, cfg))
        rd = _Reader(s)
        status, headers = parse_head(rd.read_head())
        if status in (301, 302, 303, 307, 308) and headers.get("location"):
            s.close()
            loc = headers["location"]
            if loc.startswith("/"):
                pu = urlsplit(url)
                loc = f"{pu.scheme}://{pu.netloc}{loc}"
            url = loc
            continue
        if status not in (200, 206):
            s.close()
            raise ProbeError("http", f"HTTP {status} for the throughput object")
        cr = headers.get("content-range", "")
        m = re.search(r"/(\d+)$", cr)
        st.size = (
            int(m.group(1))
            if m
            else (int(headers["content-length"]) if headers.get("content-length", "").isdigit() else None)
        )
        st.sock, st.status, st.final_url, st.buffered = s, status, redact_url(url), len(rd.buf)
        return
    raise ProbeError("http", "too many redirects")


def _read_body(st: _Stream, sock: socket.socket, per: int, end: float) -> int:
    """Read until ``per`` bytes (counting what the head read left buffered) or time ``end``."""
    buf = bytearray(256 * 1024)
    got = st.buffered
    try:
        while got < per:
            left = end - time.perf_counter()
            if left <= 0:
                break
            sock.settimeout(min(left, 1.0) + 0.01)
            try:
                n = sock.recv_into(buf, min(len(buf), per - got))
            except TimeoutError:
                continue
            if n == 0:
                break
            got += n
    except OSError as e:
        st.error = describe_error(e)
    return got


def measure_throughput(
    url: str, connections: int, cfg: ProbeConfig, dl: _Deadline, size_hint: int | None = None
) -> ThroughputSample:
    """Bytes per second over ``connections`` ranged GETs sharing one time window.

    Each connection asks for its own byte range (so a server that serves ranges sends different
    bytes), waits until all are at the body, then all read for ``window_s`` or their byte cap.
    """
    sample = ThroughputSample(connections=connections)
    per = cfg.max_bytes_per_conn
    if size_hint:
        per = max(64 * 1024, min(per, size_hint // connections))
    streams = [_Stream() for _ in range(connections)]
    go = threading.Event()
    t_go = [0.0]
    addrs: dict[str, list[Addr]] = {}
    lock = threading.Lock()
    window = cfg.window_s

    def worker(i: int, st: _Stream) -> None:
        try:
            try:
                local: dict[str, list[Addr]] = {}
                with lock:
                    local.update(addrs)
                _open_ranged(url, i * per, (i + 1) * per - 1, cfg, dl, local, st)
                with lock:
                    addrs.update(local)
            except ProbeError as e:
                st.error = str(e)
                return
            except OSError as e:
                st.error = describe_error(e, cfg.http_timeout_s)
                return
            finally:
                st.ready.set()
            if not go.wait(cfg.http_timeout_s + cfg.connect_timeout_s + cfg.tls_timeout_s) or st.sock is None:
                return
            st.bytes = _read_body(st, st.sock, per, t_go[0] + window)
            st.end_t = time.perf_counter()
        finally:
            if st.sock is not None:
                try:
                    st.sock.close()
                except OSError:
                    pass

    threads = [
        threading.Thread(target=worker, args=(i, st), daemon=True, name=f"tput-{i}")
        for i, st in enumerate(streams)
    ]
    for th in threads:
        th.start()
    setup_limit = min(
        dl.left(), cfg.dns_timeout_s + cfg.connect_timeout_s + cfg.tls_timeout_s + cfg.http_timeout_s
    )
    t_setup_end = time.monotonic() + max(0.0, setup_limit)
    for st in streams:
        st.ready.wait(max(0.0, t_setup_end - time.monotonic()))
    window = max(0.2, min(window, dl.left() - 0.2))
    t_go[0] = time.perf_counter()
    go.set()
    for th in threads:
        th.join(max(0.1, window + 2.0))
    ok = [st for st in streams if st.sock is not None and st.end_t > 0]
    sample.connections_ok = len(ok)
    sample.final_url = next((st.final_url for st in streams if st.final_url), None)
    errs = [st.error for st in streams if st.error]
    if errs:
        sample.error = errs[0] + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else "")
    if ok:
        sample.bytes = sum(st.bytes for st in ok)
        sample.seconds = max(st.end_t for st in ok) - t_go[0]
        if sample.seconds > 0 and sample.bytes > 0:
            sample.bytes_per_s = sample.bytes / sample.seconds
    return sample


def _size_of(url: str, cfg: ProbeConfig, dl: _Deadline) -> int | None:
    st = _Stream()
    try:
        _open_ranged(url, 0, 0, cfg, dl, {}, st)
    except (ProbeError, OSError):
        return None
    finally:
        if st.sock is not None:
            st.sock.close()
    return st.size


def probe_throughput(pr: EndpointProbe, cfg: ProbeConfig, dl: _Deadline) -> None:
    ep = pr.endpoint
    if not ep.throughput_path:
        return
    url = ep.url + ep.throughput_path
    try:
        size = _size_of(url, cfg, dl)
        pr.single = measure_throughput(url, 1, cfg, dl, size)
        if dl.left() > cfg.window_s + 1 and pr.single.bytes_per_s:
            pr.parallel = measure_throughput(url, cfg.parallel, cfg, dl, size)
    except ProbeError as e:
        if e.phase == "deadline":
            pr.deadline_hit = True


# ----------------------------------------------------------------------------------------------
# The run


def _throughput_order(probes: list[EndpointProbe], cfg: ProbeConfig) -> list[EndpointProbe]:
    return [p for p in probes if p.endpoint.throughput_path and p.reachable]


def probe_endpoints(
    endpoints: list[Endpoint], cfg: ProbeConfig | None = None, proxy: ProxySettings | None = None
) -> NetworkFacts:
    """Probe every endpoint (latency in parallel, throughput one endpoint at a time) within the deadline."""
    cfg = cfg or ProbeConfig()
    dl = _Deadline(cfg.deadline_s)
    t0 = time.monotonic()
    nf = NetworkFacts(
        proxy=proxy, quick=not cfg.throughput, deadline_s=cfg.deadline_s, parallel_connections=cfg.parallel
    )
    try:
        nf.default_route = cfg.route_check()
    except Exception:
        nf.default_route = None
    pool = ThreadPoolExecutor(
        max_workers=max(1, min(cfg.max_workers, len(endpoints) or 1)), thread_name_prefix="netprobe"
    )
    futs: list[tuple[Endpoint, Future[EndpointProbe]]] = [
        (ep, pool.submit(probe_latency, ep, cfg, dl)) for ep in endpoints
    ]
    probes: list[EndpointProbe] = []
    for ep, fut in futs:
        try:
            probes.append(fut.result(timeout=max(0.0, dl.left()) + 0.5))
        except Exception:
            p = urlsplit(ep.url)
            probes.append(EndpointProbe(endpoint=ep, host=p.hostname or "", deadline_hit=True))
    pool.shutdown(wait=False, cancel_futures=True)
    nf.probes = probes
    if cfg.throughput:
        # Origins first; a mirror only when the origin it stands in for is slow or unreachable.
        origin_fast: dict[str, bool] = {}
        for pr in _throughput_order([p for p in probes if p.endpoint.kind == "origin"], cfg):
            if dl.left() < cfg.window_s * 2 + 1:
                break
            probe_throughput(pr, cfg, dl)
            rate = pr.best_rate()
            if rate is not None:
                origin_fast[pr.endpoint.service] = (
                    origin_fast.get(pr.endpoint.service, False) or rate >= cfg.fast_enough_bps
                )
        for pr in _throughput_order([p for p in probes if p.endpoint.kind != "origin"], cfg):
            if origin_fast.get(pr.endpoint.service):
                continue
            if dl.left() < cfg.window_s * 2 + 1:
                break
            probe_throughput(pr, cfg, dl)
    _decide_offline(nf)
    nf.elapsed_s = time.monotonic() - t0
    return nf


def _decide_offline(nf: NetworkFacts) -> None:
    probes = [p for p in nf.probes if not p.deadline_hit]
    if not nf.probes or any(p.reachable or p.connect_ms for p in nf.probes):
        nf.offline = False
        return
    if not probes:
        nf.offline = None
        return
    if all(p.via_proxy and "SOCKS" not in p.via_proxy for p in probes):
        nf.offline = False  # the proxy is what fails: network.proxy_misconfigured says so
    elif nf.default_route is False:
        nf.offline, nf.offline_reason = True, "no default route (no network interface leads out)"
    elif all(p.dns_error for p in probes):
        nf.offline, nf.offline_reason = True, "no name resolves: " + (probes[0].dns_error or "")
    elif all(p.dns_error or p.connect_failures for p in probes):
        errs = {p.connect_error or p.dns_error for p in probes}
        nf.offline, nf.offline_reason = (
            True,
            "no host accepts connections: " + "; ".join(sorted(e for e in errs if e))[:200],
        )
    else:
        nf.offline = False


def config_for(opts_quick: bool, timeout_s: float | None = None) -> ProbeConfig:
    """Default limits: ``--quick`` measures latency only, with fewer samples."""
    if opts_quick:
        return ProbeConfig(
            deadline_s=timeout_s or 10.0,
            connect_samples=3,
            throughput=False,
            dns_timeout_s=2.0,
            connect_timeout_s=2.0,
            tls_timeout_s=3.0,
            http_timeout_s=3.0,
        )
    return ProbeConfig(deadline_s=timeout_s or 45.0)


def configured_endpoints(ps: ProxySettings, known: Iterable[Endpoint] = ()) -> list[Endpoint]:
    """Endpoints the user's tools are configured to use (HF_ENDPOINT, pip index-url, git insteadOf).

    These are probed too (kind ``configured``): a dead mirror in the config breaks every download.
    Only scheme, host and path are kept; credentials were redacted before this point.
    """
    known_urls = {e.url.rstrip("/") for e in known}
    out: list[Endpoint] = []

    def add(eid: str, service: str, url: str | None, probe: str, tput: str | None, what: str) -> None:
        if not url or "***@" in url:
            return
        p = urlsplit(url)
        if p.scheme not in ("http", "https") or not p.hostname:
            return
        base = f"{p.scheme}://{p.netloc}"
        if base in known_urls and eid != "configured:pip":
            return
        known_urls.add(base)
        out.append(
            Endpoint(
                id=eid,
                url=base,
                service=service,
                kind="configured",
                role="web",
                name=what,
                probe_path=probe,
                throughput_path=tput,
                mirror_url=url,
                source=what,
            )
        )

    if ps.hf_endpoint:
        add(
            "configured:HF_ENDPOINT",
            "huggingface",
            ps.hf_endpoint.rstrip("/"),
            "/robots.txt",
            "/openai-community/gpt2/resolve/main/model.safetensors",
            f"HF_ENDPOINT={ps.hf_endpoint}",
        )
    if ps.pip_index_url:
        path = urlsplit(ps.pip_index_url).path.rstrip("/") + "/pip/"
        add("configured:pip", "pypi", ps.pip_index_url, path, None, f"pip index-url {ps.pip_index_url}")
    for prefix, base in ps.git_insteadof.items():
        if "github.com" in prefix:
            add(f"configured:git:{base}", "github", base, "/", None, f"git url.{base}.insteadOf {prefix}")
    return out


def collect(snap: Snapshot, opts: object) -> None:
    """Live source entry point (runs only when ``CollectOptions.network`` is set)."""
    from gpuclinic.knowledge.endpoints import load_endpoints

    quick = bool(getattr(opts, "quick", False))
    proxy = read_proxy_settings()
    endpoints = load_endpoints()
    endpoints += configured_endpoints(proxy, endpoints)
    snap.network = probe_endpoints(endpoints, config_for(quick), proxy)
    if quick:
        snap.skip("network throughput", "--quick: latency only, no throughput samples")
