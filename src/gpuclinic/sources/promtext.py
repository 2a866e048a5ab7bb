"""Pasted Prometheus text-format samples, line by line: what the dcgm-exporter and nvidia_gpu_exporter
readers share.  Not ``prometheus_client.parser`` (the fleet view's): a paste is often cut mid-family or
mixed with prose, and one bad line must not cost the others."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from gpuclinic import lazyre

_LABEL = lazyre.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def samples(
    lines: Iterable[tuple[int, str]], sample: lazyre.LazyPattern, meta: lazyre.LazyPattern
) -> Iterator[tuple[int, re.Match[str] | None]]:
    """(line number, ``sample``'s match) of each sample line among ``lines`` (numbered), and (line number,
    None) of each ``# HELP``/``# TYPE`` line ``meta`` matches; other lines are left out."""
    for n, line in lines:
        if meta.match(line):
            yield n, None
            continue
        m = sample.match(line)
        if m is not None:
            yield n, m


def labels(text: str | None) -> dict[str, str]:
    """``{name: value}`` of a sample's label set (``a="x",b="y"``)."""
    return dict(_LABEL.findall(text or ""))
