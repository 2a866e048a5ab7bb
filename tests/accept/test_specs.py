"""Spec rows: every SKU the issue names is there with a source, and NVML names find the right row."""

from __future__ import annotations

import re

import pytest

from gpuclinic.accept.specs import accept_data, all_specs, match_spec, pcie_gbs
from gpuclinic.knowledge import load_data

REQUIRED = [
    "V100 SXM2",
    "V100 PCIe",
    "A10",
    "A100 40GB PCIe",
    "A100 80GB PCIe",
    "A100 40GB SXM",
    "A100 80GB SXM",
    "L4",
    "L40S",
    "H100 PCIe",
    "H100 SXM",
    "H200 SXM",
    "B200",
    "RTX 3090",
    "RTX 4090",
    "RTX 5090",
    "RTX 6000 Ada",
]


def test_required_skus_have_sources_and_numbers() -> None:
    rows = {s.sku: s for s in all_specs()}
    for sku in REQUIRED:
        s = rows[sku]
        assert re.search(r"https?://|datasheet|whitepaper", s.source), sku
        assert s.memory_bandwidth_gbs and s.pcie, sku
    assert rows["H100 SXM"].peak_tflops("bf16") == 989.5 and rows["H100 SXM"].nvlink_total_gbs == 900
    assert rows["V100 SXM2"].dtypes() == ["fp16"]  # no bf16, tf32 or fp8 on Volta
    assert rows["B200"].dtypes() == ["bf16", "fp16", "tf32", "fp8"]  # compute capability 10.0 is not < 8
    assert rows["A100 80GB SXM"].dtypes() == ["bf16", "fp16", "tf32"]  # no fp8 on Ampere
    assert rows["RTX 6000 Ada"].dtypes() == []  # tensor peaks unsourced: left null, nothing invented


@pytest.mark.parametrize(
    ("name", "sku"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # nvidia-smi's name for the SXM part (tests/fixtures)
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 5090", "RTX 5090"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ],
)
def test_nvml_names_match_their_row(name: str, sku: str) -> None:
    s = match_spec(name)
    assert s is not None and s.sku == sku


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A800 80GB PCIe",
        "Tesla V100S-PCIE-32GB",
        "NVIDIA A10G",
        "NVIDIA L40",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 3090 Ti",
        None,
        "",
    ],
)
def test_unknown_parts_match_nothing(name: str | None) -> None:
    assert match_spec(name) is None


def test_pcie_rates() -> None:
    assert pcie_gbs(4, 16) == pytest.approx(31.5, abs=0.01)
    assert pcie_gbs(5, 16) == pytest.approx(63.0, abs=0.02)
    assert pcie_gbs(3, 8) == pytest.approx(7.88, abs=0.01)
    assert pcie_gbs(None, 16) is None


def test_every_threshold_and_mode_has_a_source() -> None:
    d = accept_data()
    for section in ("thresholds", "modes"):
        for k, v in d[section].items():
            assert v.get("source"), f"{section}.{k}"
    for k, v in d["simulation"].items():
        assert k == "_about" or v.get("source"), k
    assert d["modes"]["full"]["burn_s"] == 300
    assert load_data("gpu_specs.json")["_about"]["source"]
