"""dcgm-exporter's ``/metrics`` text (Prometheus exposition of DCGM fields) as GPU facts.

People paste ``curl localhost:9400/metrics`` (or a ``grep DCGM_`` of it) into tickets: the same facts
``nvidia-smi -q`` carries (ECC counts, retired pages, remapped rows, clock-event reasons, temperatures),
one sample per line, the GPU named by the ``gpu``/``UUID``/``modelName`` labels.  Which DCGM field is
which fact is the ``dcgm`` column of ``knowledge/data/gpu_fields.json``; the checks then judge the GPU
as they judge any other reading.  DCGM's blank sentinels (no value, not supported) are no reading.
Xid metrics are the fault signatures' (``knowledge/data/evidence_signatures.json``): lines read here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cache

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import gpu_fields
from gpuclinic.sources import promtext
from gpuclinic.sources import smi_common as c
from gpuclinic.sources.smi_csv import Setter, setter

_SAMPLE = lazyre.compile(
    r"^\s*(?P<name>DCGM_[A-Z0-9_]+)\{(?P<labels>[^}]*)\}\s+(?P<value>[-+]?(?:\d[\d.eE+-]*|NaN|Inf))(?:\s+\d+)?\s*$"
)
_META = lazyre.compile(r"^\s*# (?:HELP|TYPE) DCGM_[A-Z0-9_]+\b")
_XID_METRICS = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERRORS_ACTIVE", "DCGM_EXP_XID_ERRORS_COUNT")


@cache
def _fields() -> dict[str, tuple[str, str, Setter]]:
    """DCGM metric name -> (fact, parse kind, setter), from the field schema."""
    return {
        name: (row.fact, row.parse, setter(row.parse, row.fact))
        for row in gpu_fields.fields()
        for name in row.dcgm
    }


def _blank(v: float) -> bool:
    blanks = gpu_fields.dcgm_schema().blank_ranges
    return math.isnan(v) or math.isinf(v) or any(a <= v <= b for a, b in blanks)


def _text(v: float, parse: str) -> str:
    """The value as the text the schema's setters read (counts as integers, presence as 1/0)."""
    if parse == "bool":
        return "1" if v > 0 else "0"
    return str(int(v)) if v == int(v) else repr(v)


def parse(lines: Iterable[tuple[int, str]]) -> tuple[c.SmiDump, set[int]]:
    """The GPUs the DCGM samples among ``lines`` (numbered) describe, and the line numbers read."""
    dump = c.SmiDump(kind="dcgm_metrics")
    gpus: dict[str, GpuFacts] = {}
    reasons: dict[str, set[str]] = {}
    used: set[int] = set()
    fields = _fields()
    counts = gpu_fields.dcgm_schema().reason_count_metrics
    for n, m in promtext.samples(lines, _SAMPLE, _META):
        if m is None:  # its # HELP / # TYPE lines
            used.add(n)
            continue
        name = m.group("name")
        known = fields.get(name)
        if known is None and name not in counts and name not in _XID_METRICS:
            continue  # a DCGM metric no check reads: left for the unread list
        used.add(n)
        labels = promtext.labels(m.group("labels"))
        dump.driver_version = dump.driver_version or labels.get("DCGM_FI_DRIVER_VERSION") or None
        g = _gpu(gpus, labels)
        try:
            v = float(m.group("value"))
        except ValueError:
            continue
        if g is None or _blank(v):
            continue
        if known is not None:
            _fact, kind, set_ = known
            set_(g, _text(v, kind))
        elif name in counts and v > 0:
            r = gpu_fields.reason_name(labels.get(counts[name], ""))
            if r and r != "unknown":
                reasons.setdefault(_key(labels) or "", set()).add(r)
    for key, names in reasons.items():
        g = gpus.get(key)
        if g is not None:
            _add_reasons(g, names)
    dump.gpus = sorted(gpus.values(), key=lambda g: g.index)
    return dump, used


def _key(labels: dict[str, str]) -> str | None:
    return labels.get("UUID") or labels.get("uuid") or labels.get("gpu")


def _gpu(gpus: dict[str, GpuFacts], labels: dict[str, str]) -> GpuFacts | None:
    key = _key(labels)
    if key is None:
        return None
    g = gpus.get(key)
    if g is None:
        idx = labels.get("gpu", "")
        g = gpus[key] = GpuFacts(index=int(idx) if idx.isdigit() else len(gpus))
        g.uuid = (labels.get("UUID") or labels.get("uuid") or "").strip() or None
        g.name = labels.get("modelName") or labels.get("model_name") or None
        bus = labels.get("pci_bus_id")
        if bus:
            g.pci_bus_id = normalize_bus_id(bus)
    return g


def _add_reasons(g: GpuFacts, names: set[str]) -> None:
    """Reasons counted in the exporter's window join those of the mask (one vocabulary, NVML's bits)."""
    bits = gpu_fields.reason_bits()
    mask = (g.clock_event_reasons_mask or 0) | sum(bits[r] for r in names if r in bits)
    g.clock_event_reasons_mask = mask
    g.clock_event_reasons = gpu_fields.decode_reason_mask(mask)
