"""The GPU hardware checks the tests of this directory run: one list, shared by the threshold tests
(test_checks.py) and the property tests (test_properties.py)."""

from __future__ import annotations

HARDWARE_CHECKS = [
    "gpu.presence",
    "gpu.unresponsive",
    "gpu.recovery_action",
    "gpu.inforom",
    "memory.ecc_uncorrectable",
    "memory.ecc_correctable_rate",
    "memory.row_remap",
    "memory.retired_pages",
    "thermal.slowdown",
    "thermal.throttle",
    "power.brake",
    "power.cap",
    "power.insufficient",
    "pcie.link_degraded",
    "pcie.replay",
    "pcie.aer_counters",
    "nvlink.error",
    "perf.straggler",
]
