"""Datasheet figures per GPU SKU (``knowledge/data/gpu_specs.json``) and NVML-name matching.

Why: the scorecard's "expected" column must say where a number comes from; every row carries its
vendor source.  Thresholds and the scenario model live in ``knowledge/data/accept.json``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from gpuclinic.knowledge import load_data
from gpuclinic.record import record

# dtype -> field of the spec row holding its dense tensor peak
DTYPE_FIELDS: dict[str, str] = {
    "bf16": "fp16_bf16_tensor_tflops",
    "fp16": "fp16_bf16_tensor_tflops",
    "tf32": "tf32_tensor_tflops",
    "fp8": "fp8_tensor_tflops",
    "fp32": "fp32_tflops",
}

# PCIe per-lane per-direction rate in GB/s after line encoding (8b/10b up to Gen2, 128b/130b after)
PCIE_LANE_GBS: dict[int, float] = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8,
                                   5: 32 * 128 / 130 / 8, 6: 64 * 242 / 256 / 8}


@record(frozen=True)  # doctor's NVLink check reads specs: a record keeps dataclasses off its start-up
class GpuSpec:
    """A GPU model's datasheet row (gpu_specs.json): peak throughput, memory bandwidth, links."""

    sku: str
    row: dict[str, Any]

    @property
    def source(self) -> str:
        return str(self.row.get("source", ""))

    def peak_tflops(self, dtype: str) -> float | None:
        if dtype == "bf16" and float(self.row.get("compute_capability") or 0) < 8:
            return None  # Volta: FP16 tensor cores only
        v = self.row.get(DTYPE_FIELDS[dtype])
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def memory_bandwidth_gbs(self) -> float | None:
        v = self.row.get("memory_bandwidth_gbs")
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def nvlink_total_gbs(self) -> float | None:
        v = self.row.get("nvlink_total_gbs")
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def pcie(self) -> tuple[int, int] | None:
        p = self.row.get("pcie")
        if isinstance(p, dict) and p.get("gen") and p.get("lanes"):
            return int(p["gen"]), int(p["lanes"])
        return None

    def dtypes(self) -> list[str]:
        """The tensor dtypes this GPU has, in the order the scorecard lists them."""
        return [d for d in ("bf16", "fp16", "tf32", "fp8") if self.peak_tflops(d) is not None]


@cache
def _rows() -> list[tuple[re.Pattern[str], dict[str, Any]]]:
    data = load_data("gpu_specs.json")
    return [(re.compile(r["nvml_name_regex"], re.I), r) for r in data["gpus"]]


def all_specs() -> list[GpuSpec]:
    return [GpuSpec(r["sku"], r) for _, r in _rows()]


def match_spec(nvml_name: str | None) -> GpuSpec | None:
    """The spec row for an NVML device name (``NVIDIA H100 80GB HBM3`` -> ``H100 SXM``), or None."""
    if not nvml_name:
        return None
    name = nvml_name.strip()
    for rx, row in _rows():
        if rx.search(name):
            return GpuSpec(str(row["sku"]), row)
    return None


def pcie_gbs(gen: int | None, width: int | None) -> float | None:
    """Theoretical per-direction bandwidth of a PCIe link in GB/s (Gen4 x16 -> 31.5)."""
    if not gen or not width or gen not in PCIE_LANE_GBS:
        return None
    return PCIE_LANE_GBS[gen] * width


@cache
def accept_data() -> dict[str, Any]:
    d = load_data("accept.json")
    assert isinstance(d, dict)
    return d


def threshold(name: str) -> float:
    return float(accept_data()["thresholds"][name]["value"])


def threshold_source(name: str) -> str:
    return str(accept_data()["thresholds"][name]["source"])


def sim(name: str) -> float:
    return float(accept_data()["simulation"][name]["value"])


def mode_settings(mode: str) -> dict[str, Any]:
    m = accept_data()["modes"][mode]
    assert isinstance(m, dict)
    return dict(m)
