"""Keep secrets (HF tokens, signed-URL signatures, URL passwords) out of every message we print.

Why: error messages and progress lines end up in CI logs, issue reports and `capture` tarballs.
Every user-visible string from the transfer code goes through :func:`redact`, and URLs through
:func:`safe_url`.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_lock = threading.Lock()
_secrets: set[str] = set()

# query keys that carry credentials on CDNs and presigned object stores
_SECRET_KEYS = re.compile(r"(sig|signature|token|key|credential|auth|policy|password|secret)", re.I)
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
_BEARER = re.compile(r"(Bearer\s+)\S+", re.I)


def add_secret(value: str | None) -> None:
    """Register a secret so that it is replaced by ``***`` wherever it would be printed."""
    if value and len(value) >= 4:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """Remove registered secrets, HF-style tokens and bearer credentials from ``text``."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for s in secrets:
        text = text.replace(s, "***")
    text = _HF_TOKEN.sub("hf_***", text)
    return _BEARER.sub(r"\1***", text)


def safe_url(url: str) -> str:
    """A URL fit for printing: no userinfo, and credential-like query values replaced by ``***``."""
    try:
        p = urlsplit(url)
        host = p.hostname or ""
        if p.port:  # raises for a port out of range
            host = f"{host}:{p.port}"
    except ValueError:
        return redact(url)
    query = p.query
    if query:
        pairs = [
            (k, "***" if _SECRET_KEYS.search(k) else v) for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        query = urlencode(pairs, safe="*")
    return redact(urlunsplit((p.scheme, host, p.path, query, "")))
