"""nvidia_gpu_exporter's ``/metrics`` text (``nvidia_smi_*`` samples) as GPU facts.

utkuozdemir/nvidia_gpu_exporter runs ``nvidia-smi --query-gpu=...`` and exports each field as
``nvidia_smi_<field, dots as underscores>[_<unit>]{uuid="..."} value`` with the unit in base SI
(``clocks_current_sm_clock_hz``, ``power_draw_watts``, ``memory_used_bytes``, ``utilization_gpu_ratio``),
Active/Enabled/Yes as 1/0, the P-state as its number, and one ``nvidia_smi_gpu_info{name=...,index=...,
pci_bus_id=...,driver_version=...}`` sample per GPU.  Each field goes through the ``--query-gpu`` setter of
the field schema (``smi_csv.FIELDS``, ``knowledge/data/gpu_fields.json``), so the checks judge these
readings as they judge the CSV the exporter read.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.sources import promtext
from gpuclinic.sources import smi_common as c
from gpuclinic.sources.smi_csv import FIELDS, Setter

PREFIX = "nvidia_smi_"
_SAMPLE = lazyre.compile(
    r"^\s*nvidia_smi_(?P<name>[a-z0-9_]+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>[-+]?(?:\d[\d.eE+-]*|NaN))"
    r"(?:\s+\d+)?\s*$"
)
_META = lazyre.compile(r"^\s*# (?:HELP|TYPE) nvidia_smi_\w+")
# the exporter's unit suffixes -> how its base-unit value becomes the text nvidia-smi's CSV prints
_UNITS: tuple[tuple[str, str], ...] = (
    ("_clock_hz", "mhz"),
    ("_hz", "mhz"),
    ("_watts", ""),
    ("_bytes", "mib"),
    ("_ratio", "percent"),
)


@cache
def _fields() -> dict[str, tuple[str, Setter]]:
    """Metric name (no prefix, no unit) -> (the --query-gpu field, its setter)."""
    return {name.replace(".", "_"): (name, set_) for name, set_ in FIELDS.items()}


def _text(value: float, unit: str, field: str) -> str:
    """The exporter's value as the CSV text the field's setter reads."""
    if unit == "mhz":
        value /= 1e6
    elif unit == "percent":
        value *= 100
    elif unit == "mib":
        value /= 1024 * 1024
    if field == "pstate":
        return f"P{int(value)}"
    text = str(int(value)) if value == int(value) else f"{value:.2f}"
    return f"{text} MiB" if unit == "mib" else text


def _split(name: str) -> tuple[str, str]:
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return name[: -len(suffix)], unit
    return name, ""


def parse(lines: Iterable[tuple[int, str]]) -> tuple[c.SmiDump, set[int]]:
    """The GPUs the ``nvidia_smi_*`` samples among ``lines`` (numbered) describe, and the lines read."""
    dump = c.SmiDump(kind="smi_exporter_metrics")
    gpus: dict[str, GpuFacts] = {}
    used: set[int] = set()
    fields = _fields()
    for n, m in promtext.samples(lines, _SAMPLE, _META):
        if m is None:  # its # HELP / # TYPE lines
            used.add(n)
            continue
        labels = promtext.labels(m.group("labels"))
        key = labels.get("uuid")
        name = m.group("name")
        if key is None:
            if name in ("command_exit_code", "count", "failed_scrapes_total", "last_collect_success"):
                used.add(n)
            continue
        g = gpus.get(key)
        if g is None:
            g = gpus[key] = GpuFacts(index=len(gpus), uuid=key)
        if name == "gpu_info":
            _info(dump, g, labels)
            used.add(n)
            continue
        base, unit = _split(name)
        known = fields.get(base)
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if known is None or value != value:  # not a field the checks read, or NaN (no reading)
            continue
        field, set_ = known
        set_(g, _text(value, unit, field))
        used.add(n)
    dump.gpus = sorted(gpus.values(), key=lambda g: g.index)
    return dump, used


def _info(dump: c.SmiDump, g: GpuFacts, labels: dict[str, str]) -> None:
    """``nvidia_smi_gpu_info``: the GPU's name, index, bus id, and the driver and CUDA versions."""
    g.name = labels.get("name") or g.name
    if labels.get("index", "").isdigit():
        g.index = int(labels["index"])
    if labels.get("pci_bus_id"):
        g.pci_bus_id = normalize_bus_id(labels["pci_bus_id"])
    g.vbios = labels.get("vbios_version") or g.vbios
    g.compute_capability = labels.get("compute_cap") or g.compute_capability
    dump.driver_version = dump.driver_version or c.clean(labels.get("driver_version"))
    dump.cuda_version = dump.cuda_version or c.clean(labels.get("cuda_version"))
