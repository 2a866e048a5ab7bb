"""The kernel-log subsystem: where a GPU says why it died (Xid, SXid, fallen off the bus, AER, GSP).

One package serves every command: ``doctor`` (live :func:`.collect.collect`, ``--kernel-log`` files through
:func:`scan_path`), ``doctor --from`` and ``explain`` (:func:`parse_lines` over the kernel-log segments of
any input), ``watch`` and ``run`` (:func:`.follow.follow`).

* :mod:`.formats` - timestamp/host/level prefixes of every dmesg, journal, syslog, kmsg and container
  wrapper variant; candidate-line keyword tests;
* :mod:`.patterns` - message patterns and the "is this a kernel log" sniff;
* :mod:`.parse` - the stateful line parser (dispatch); its per-family extractors: :mod:`.nvrm` (Xid, SXid,
  GSP, init, NVLink, module) and :mod:`.aer` (PCIe AER record assembly);
* :mod:`.keywords` - what makes a line a candidate (imports nothing: the scan starts grep first);
* :mod:`.scan` - streaming file scan (grep via :mod:`.grepscan`, two greps per big file via :mod:`.grepsplit`;
  memmem over a reused buffer as the fallback; flat memory);
* :mod:`.collect` - live collection from journalctl/dmesg/syslog files;
* :mod:`.follow` - following a live log.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: `scan_path` must start grep before typing would even load
if TYPE_CHECKING:
    from typing import Any

    from gpuclinic.sources.kernellog.formats import is_kernel_line, split_prefix
    from gpuclinic.sources.kernellog.parse import KernelLogParser, parse_lines, parse_numbered
    from gpuclinic.sources.kernellog.patterns import looks_like_kernel_log
    from gpuclinic.sources.kernellog.scan import iter_candidate_lines, mark_previous_boots, scan_path

# Names load their module on first use: `scan_path` alone must not import the parser before grep runs.
_HOME = {
    "is_kernel_line": "formats",
    "split_prefix": "formats",
    "KernelLogParser": "parse",
    "parse_lines": "parse",
    "parse_numbered": "parse",
    "looks_like_kernel_log": "patterns",
    "iter_candidate_lines": "scan",
    "mark_previous_boots": "scan",
    "scan_path": "scan",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "KernelLogParser",
    "is_kernel_line",
    "iter_candidate_lines",
    "looks_like_kernel_log",
    "mark_previous_boots",
    "parse_lines",
    "parse_numbered",
    "scan_path",
    "split_prefix",
]
