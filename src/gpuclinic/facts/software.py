"""Software facts: driver, kernel module, CUDA toolkits, Python GPU frameworks, containers.

Owned by the software area (issue 3); fields are added as sources learn to read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SoftwareFacts:
    driver_version: str | None = None  # from NVML or /proc/driver/nvidia/version
    # Verbatim nvidia-smi error statements seen (live or in evidence), e.g. "Failed to initialize NVML:
    # Driver/library version mismatch", "NVIDIA-SMI has failed because it couldn't communicate with the
    # NVIDIA driver", "No devices were found", "Unable to determine the device handle for GPU ...".
    nvidia_smi_errors: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ContainerFacts:
    in_container: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)
