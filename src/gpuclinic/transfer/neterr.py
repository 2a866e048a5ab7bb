"""Name the cause of a failed HTTP(S) request: DNS, connect, TLS, timeout or proxy.

Why: "ConnectError" tells a user nothing; "DNS lookup of huggingface.co failed" tells them to look
at /etc/resolv.conf or a mirror.  httpx chains the socket-level exception as ``__cause__``, so the
chain is walked instead of parsing messages.  Causes that a retry cannot fix (no DNS, refused,
no route, bad certificate) are ``permanent``: callers fail fast on them instead of backing off.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class NetCause:
    phase: str  # dns | connect | tls | timeout | proxy | transfer
    detail: str
    permanent: bool  # retrying in a few seconds will not help

    def describe(self, host: str) -> str:
        what = {
            "dns": f"DNS lookup of {host} failed",
            "connect": f"cannot connect to {host}",
            "tls": f"TLS handshake with {host} failed",
            "timeout": f"{host} did not answer in time",
            "proxy": f"the proxy refused the connection to {host}",
            "transfer": f"the connection to {host} broke",
        }[self.phase]
        return f"{what} ({self.detail})" if self.detail else what


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(out) < 10:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def net_cause(e: BaseException) -> NetCause:
    """Classify an httpx (or socket) exception."""
    chain = _chain(e)
    for c in chain:
        if isinstance(c, socket.gaierror):
            return NetCause("dns", c.strerror or str(c), True)
        if isinstance(c, ssl.SSLError):
            return NetCause("tls", getattr(c, "reason", None) or str(c), True)
        if isinstance(c, ConnectionRefusedError):
            return NetCause("connect", "connection refused", True)
        if isinstance(c, OSError) and c.errno is not None and c.strerror and not isinstance(c, TimeoutError):
            if isinstance(e, httpx.ConnectError):  # network/host unreachable, no route
                return NetCause("connect", c.strerror, True)
    if isinstance(e, httpx.ProxyError):
        return NetCause("proxy", str(e), True)
    if isinstance(e, httpx.ConnectTimeout):
        # TCP already retransmits a lost SYN within the connect timeout: a second try rarely helps
        return NetCause("timeout", "connect timed out", True)
    if isinstance(e, httpx.TimeoutException):
        return NetCause("timeout", type(e).__name__, False)
    text = str(e)
    low = text.lower()
    if "name or service not known" in low or "name resolution" in low or "nodename nor servname" in low:
        return NetCause("dns", text, True)
    if "ssl" in low or "certificate" in low or "tls" in low:
        return NetCause("tls", text, True)
    if isinstance(e, httpx.ConnectError):
        return NetCause("connect", text or "connection failed", True)
    return NetCause("transfer", type(e).__name__, False)
