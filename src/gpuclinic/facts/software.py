"""Software facts: driver, kernel module, CUDA toolkits, Python GPU frameworks, containers.

Owned by the software area (issue 3); fields are added as sources learn to read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SoftwareFacts:
    driver_version: str | None = None  # from NVML or /proc/driver/nvidia/version
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ContainerFacts:
    in_container: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)
