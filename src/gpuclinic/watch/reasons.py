"""NVML clock-event ("throttle") reasons: bit, stable name, what it means for a user.

Bits from ``nvmlClocksEventReasons`` (nvml.h; see research gpu-health-anchors.md section 3.4).  The
names match what the NVML source decodes into ``GpuFacts.clock_event_reasons``.
"""

from __future__ import annotations

from collections.abc import Iterable

REASONS: tuple[tuple[int, str, str], ...] = (
    (0x1, "gpu_idle", "GPU idle (clocks lowered because nothing runs)"),
    (0x2, "applications_clocks_setting", "application clocks setting caps the clock"),
    (0x4, "sw_power_cap", "software power cap: drawing at the power limit"),
    (0x8, "hw_slowdown", "hardware slowdown (clock cut >= 2x: heat, power brake or fast power trigger)"),
    (0x10, "sync_boost", "sync boost with other GPUs"),
    (0x20, "sw_thermal_slowdown", "software thermal slowdown (keeping GPU/memory under max operating temp)"),
    (0x40, "hw_thermal_slowdown", "hardware thermal slowdown: the GPU is too hot"),
    (
        0x80,
        "hw_power_brake_slowdown",
        "hardware power brake: external power brake asserted (PSU/power supply)",
    ),
    (0x100, "display_clock_setting", "display clock setting"),
)
BIT = {name: bit for bit, name, _ in REASONS}
DESCRIPTION = {name: desc for _, name, desc in REASONS}
# alternate spellings seen in nvidia-smi output and older code
_ALIASES = {
    "hw_thermal": "hw_thermal_slowdown",
    "sw_thermal": "sw_thermal_slowdown",
    "hw_power_brake": "hw_power_brake_slowdown",
    "idle": "gpu_idle",
    "power_cap": "sw_power_cap",
    "applications_clocks": "applications_clocks_setting",
}


def canonical(name: str) -> str:
    n = name.strip().lower().replace(" ", "_").replace("-", "_")
    return _ALIASES.get(n, n)


def decode(mask: int | None) -> list[str]:
    if not mask:
        return []
    return [name for bit, name, _ in REASONS if mask & bit]


def mask_of(names: Iterable[str]) -> int:
    m = 0
    for n in names:
        m |= BIT.get(canonical(n), 0)
    return m


def active(mask: int | None, names: Iterable[str]) -> list[str]:
    """Active reasons from the decoded list when present, else from the mask."""
    got = [n if n in BIT else canonical(n) for n in names]
    return got if got else decode(mask)
