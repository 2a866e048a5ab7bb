"""Events parsed from the kernel log (dmesg, journal, kern.log, bug reports)."""

from __future__ import annotations

from typing import Any

from gpuclinic.record import field, record


@record
class KernelEvent:
    """One meaningful kernel-log event.

    ``kind`` is one of: ``xid``, ``sxid``, ``fallen_off_bus``, ``init_failed``, ``gsp``, ``nvlink``,
    ``aer``, ``pcie_limited``, ``module``, ``uuid_map``.  ``pci_bus_id`` is normalised to
    ``dddd:bb:dd.f``.  ``time`` is ISO 8601 when the log had an absolute time; ``uptime_s`` is the
    ``[  123.456]`` stamp when present.
    """

    kind: str
    line: str
    time: str | None = None
    uptime_s: float | None = None
    pci_bus_id: str | None = None
    xid: int | None = None
    pid: int | None = None
    process: str | None = None
    message: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    origin: str | None = None  # file or source it came from
    lineno: int | None = None
