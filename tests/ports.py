"""A free loopback port for a server a test starts (bound, then closed: the server binds it next)."""

from __future__ import annotations

import socket


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A 127.0.0.1 port nothing listens on now (``kind``: SOCK_STREAM for TCP, SOCK_DGRAM for UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
