"""Network facts: per-endpoint DNS/TCP/TLS/TTFB/throughput probes and proxy settings.  Owned by issue 4."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class NetworkFacts:
    extra: dict[str, Any] = field(default_factory=dict)
