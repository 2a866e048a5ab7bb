"""A free loopback port for a server a test starts (bound, then closed: the server binds it next).

Under pytest-xdist (scripts/test runs two workers) a port the kernel hands out for ``bind(0)`` and
that is closed again could be handed to the other worker before this one's server binds it.  So each
worker takes its ports from its own slice of 20000-32767, below the kernel's range for ``bind(0)``
and outgoing connections (32768-60999 by default): neither the other worker nor a client socket can
take it in between.
"""

from __future__ import annotations

import os
import random
import socket

_LOW, _HIGH = 20000, 32768


def _slice() -> range | None:
    """This worker's ports, or None outside xdist (then the kernel picks)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count < 1:
        return None
    size = (_HIGH - _LOW) // count
    start = _LOW + int(worker[2:]) * size
    return range(start, start + size)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A 127.0.0.1 port nothing listens on now (``kind``: SOCK_STREAM for TCP, SOCK_DGRAM for UDP)."""
    ports = _slice()
    if ports is not None:
        for port in random.sample(ports, 200):
            with socket.socket(socket.AF_INET, kind) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
