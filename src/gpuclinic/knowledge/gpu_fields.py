"""The GPU-field schema (``knowledge/data/gpu_fields.json``): one row per fact, for every reader.

Each row names the NVML call, the ``nvidia-smi -q`` text path, the ``-q -x`` XML path, the
``--query-gpu`` names, how the value parses, and whether it is a lifetime counter (a count, never a
rate on its own).  The clock-event reasons are one vocabulary: NVML's names, used by the NVML source
and the text, XML and CSV readers alike.
"""

from __future__ import annotations

import re
from functools import cache

from gpuclinic.knowledge import load_data
from gpuclinic.record import record


@record(frozen=True)
class FieldRow:
    """One GPU fact: how each reader (NVML, -q text, XML, CSV) gets it and parses it."""

    fact: str  # GpuFacts attribute
    parse: str  # bool | bus | index | int | mask | mib | num | num_unless_set | str | width
    query_gpu: tuple[str, ...]
    nvml: str | None
    smi_text: tuple[str, ...]  # "-q" text paths, alternatives (older drivers' names) after the newest
    xml: tuple[str, ...]  # "-q -x" element paths, alternatives after the newest
    counter: str | None  # lifetime | since_driver_load | None (a gauge)
    xml_reader: str | None = None  # "schema": the XML reader reads it straight from this row
    text_reader: str | None = None  # "schema": the -q text reader reads it straight from this row
    nvml_read: NvmlRead | None = None  # how the NVML source reads it, when one call gives the value
    dcgm: tuple[str, ...] = ()  # dcgm-exporter metric names (DCGM field names) of this fact
    dcgm_dmon: tuple[str, ...] = ()  # `dcgmi dmon` column names (DCGM field short names) of this fact


@record(frozen=True)
class NvmlRead:
    """The NVML call that reads a fact, with its arguments."""

    fn: str  # the NVML call
    args: tuple[tuple[str, int], ...]  # (NVML constant name, its value when the binding lacks it)
    conv: str  # number | intval | milliwatts
    phase: str  # static (once per GPU) | dynamic (every sample) | full (doctor's full read only)


@record(frozen=True)
class ClockReason:
    """One clock-event reason bit of NVML and its name."""

    name: str
    bit: int
    nvml: str
    labels: tuple[str, ...]
    counter: str | None  # GpuFacts.violation_ns key of its "Clocks Event Reasons Counters" entry


@cache
def fields() -> tuple[FieldRow, ...]:
    return tuple(
        FieldRow(
            fact=r["fact"],
            parse=r["parse"],
            query_gpu=tuple(r["query_gpu"]),
            nvml=r.get("nvml"),
            smi_text=tuple(r.get("smi_text") or ()),
            xml=tuple(r.get("xml") or ()),
            counter=r.get("counter"),
            xml_reader=r.get("xml_reader"),
            text_reader=r.get("text_reader"),
            nvml_read=_nvml_read(r.get("nvml_read")),
            dcgm=tuple(r.get("dcgm") or ()),
            dcgm_dmon=tuple(r.get("dcgm_dmon") or ()),
        )
        for r in load_data("gpu_fields.json")["fields"]
    )


def _nvml_read(spec: dict[str, object] | None) -> NvmlRead | None:
    if not spec:
        return None
    args = spec.get("args") or []
    assert isinstance(args, list)
    return NvmlRead(
        fn=str(spec["fn"]),
        args=tuple((str(a[0]), int(a[1])) for a in args),
        conv=str(spec["as"]),
        phase=str(spec["phase"]),
    )


def nvml_reads(phase: str) -> tuple[tuple[str, NvmlRead], ...]:
    """(fact, read) for the facts the NVML source reads with one call in ``phase``, in schema order."""
    return tuple(
        (r.fact, r.nvml_read) for r in fields() if r.nvml_read is not None and r.nvml_read.phase == phase
    )


@cache
def clock_reasons() -> tuple[ClockReason, ...]:
    return tuple(
        ClockReason(
            name=r["name"],
            bit=int(r["bit"]),
            nvml=r["nvml"],
            labels=tuple(r["labels"]),
            counter=r.get("counter"),
        )
        for r in load_data("gpu_fields.json")["clock_event_reasons"]
    )


def reason_bits() -> dict[str, int]:
    """Reason name -> NVML bit."""
    return {r.name: r.bit for r in clock_reasons()}


def decode_reason_mask(mask: int) -> list[str]:
    """Names of the set bits, in bit order; unknown bits as ``bit_0x...``."""
    out = [r.name for r in clock_reasons() if mask & r.bit]
    known = sum(r.bit for r in clock_reasons())
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            out.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return out


@cache
def _label_map() -> dict[str, str]:
    return {label: r.name for r in clock_reasons() for label in (*r.labels, r.name)}


_PREFIXES = (
    "clocks_event_reason_",
    "clocks_throttle_reason_",
    "clocks_event_reasons_counters_",
    "clocks_throttle_reasons_counters_",
)


def reason_name(label: str) -> str | None:
    """An nvidia-smi reason label (text, XML tag or CSV column, any driver era) -> the NVML-style name."""
    k = re.sub(r"[^a-z]+", "_", label.lower()).strip("_")
    for prefix in _PREFIXES:
        if k.startswith(prefix):
            k = k[len(prefix) :]
    if k == "unknown":
        return "unknown"
    return _label_map().get(k)


def counter_names() -> dict[str, str]:
    """Reason name -> ``GpuFacts.violation_ns`` key, for the reasons nvidia-smi keeps time counters of."""
    return {r.name: r.counter for r in clock_reasons() if r.counter}


def lifetime_facts() -> frozenset[str]:
    """Facts that are counters (lifetime or since the driver loaded): counts, never rates by themselves."""
    return frozenset(r.fact for r in fields() if r.counter)


@record(frozen=True)
class DcgmSchema:
    """How dcgm-exporter's metric text maps onto GPU facts (the ``dcgm`` section of gpu_fields.json)."""

    blank_ranges: tuple[tuple[float, float], ...]  # DCGM's "no value" sentinels (inclusive ranges)
    reason_count_metrics: dict[str, str]  # metric name -> the label naming the clock-event reason


@cache
def dcgm_schema() -> DcgmSchema:
    """How dcgm-exporter's /metrics text maps onto GPU facts (``dcgm`` of gpu_fields.json)."""
    d = load_data("gpu_fields.json")["dcgm"]
    return DcgmSchema(
        blank_ranges=tuple((float(a), float(b)) for a, b in d["blank_ranges"]),
        reason_count_metrics=dict(d["reason_count_metrics"]),
    )
