"""Host facts: CPU steal, load, PSI, swap, I/O wait, memory, limits, NUMA.  Owned by issue 3."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class HostFacts:
    cpu_count: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
