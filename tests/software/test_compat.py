"""Compatibility rules against the real tables (CUDA release notes, MVC guide, PyTorch release matrix)."""

from __future__ import annotations

import pytest

from gpuclinic.knowledge import compat, load_data


def test_every_entry_has_a_source() -> None:
    for name, key in (
        ("cuda_driver.json", "cuda_min_driver"),
        ("cuda_arch_support.json", "cuda_arch_support"),
    ):
        for k, e in load_data(name)[key].items():
            assert e["source"], (name, k)
    for e in load_data("gpu_compute_capability.json")["gpus"]:
        assert e["source"], e
    for e in load_data("torch_wheels.json")["arch_lists"]:
        assert e["source"] and e["arch_list"], e
    for k, e in load_data("cuda_driver.json")["minor_version_compat"].items():
        assert e["source"].startswith("https://docs.nvidia.com/"), k


@pytest.mark.parametrize(
    ("cuda", "driver"),
    [
        ("12.1", "530.30.02"),
        ("12.4", "550.54.14"),
        ("11.8", "520.61.05"),
        ("12.8", "570.26"),
        ("13.0", "580.65.06"),
        ("cu121", "530.30.02"),
        ("12.4.1", "550.54.15"),
        ("12.4.99", "550.54.14"),
    ],
)
def test_min_driver(cuda: str, driver: str) -> None:
    assert compat.min_driver(cuda) == driver


def test_525_runs_cu121_through_minor_version_compat() -> None:
    r = compat.driver_supports_cuda("525.60.13", "cu121")
    assert r.ok and r.mode == "minor_version"
    assert r.min_driver_full == "530.30.02" and r.min_driver_family == "525.60.13"
    assert any("PTX" in x for x in r.limits)


@pytest.mark.parametrize("driver", ["470.82.01", "470.57.02", "470.256.02", "515.65.01", "520.61.05"])
def test_470_and_r515_cannot_run_cu121(driver: str) -> None:
    r = compat.driver_supports_cuda(driver, "12.1")
    assert not r.ok and r.mode == "none"


def test_newer_driver_runs_everything_older() -> None:
    assert compat.driver_supports_cuda("580.65.06", "cu128").mode == "full"
    assert compat.driver_supports_cuda("550.54.15", "11.8").mode == "full"
    assert compat.driver_supports_cuda("470.82.01", "11.8").mode == "minor_version"
    assert not compat.driver_supports_cuda("570.124.06", "13.0").ok  # never across majors downward


def test_driver_max_cuda() -> None:
    assert compat.driver_max_cuda("470.82.01") == "11.4"
    assert compat.driver_max_cuda("535.104.05") == "12.2"
    assert compat.driver_max_cuda("560.35.03") == "12.6"
    assert compat.driver_max_cuda("580.65.06") == "13.0"
    assert compat.driver_max_cuda("390.1") is None


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("Tesla V100-SXM2-32GB", "7.0"),
        ("NVIDIA GeForce RTX 4090", "8.9"),
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        ("NVIDIA A100-PCIE-40GB", "8.0"),
        ("Tesla T4", "7.5"),
        ("NVIDIA A10G", "8.6"),
        ("NVIDIA L40S", "8.9"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        ("Quadro RTX 6000", "7.5"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("NVIDIA RTX A6000", "8.6"),
        ("Tesla P100-PCIE-16GB", "6.0"),
        ("NVIDIA GeForce RTX 3070 Ti", "8.6"),
        ("NVIDIA H200", "9.0"),
        ("NVIDIA B200", "10.0"),
        ("Tesla K80", "3.7"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
        ("NVIDIA GeForce GTX 1080 Ti", "6.1"),
    ],
)
def test_compute_capability_from_nvml_names(name: str, cc: str) -> None:
    assert compat.compute_capability_for(name) == cc


def test_unknown_gpu_name() -> None:
    assert compat.compute_capability_for("Matrox G200eW") is None
    assert compat.compute_capability_for("") is None


def test_arch_list_parsing() -> None:
    a = compat.ArchList.parse(["sm_80", "sm_90", "compute_90"])
    assert a.sass == ((8, 0), (9, 0)) and a.ptx == ((9, 0),)
    b = compat.ArchList.parse("7.0;7.5;8.0;12.0+PTX")
    assert b.names() == ["sm_70", "sm_75", "sm_80", "sm_120", "compute_120"]


def test_can_run_rules() -> None:
    a = compat.ArchList.parse(["sm_80", "sm_90"])
    assert compat.can_run(a, "8.6").via == "sass"  # same major, minor <= 6
    assert not compat.can_run(a, "7.5").ok  # lower major never
    assert not compat.can_run(a, "10.0").ok  # sm_90 SASS does not run on 10.0
    p = compat.ArchList.parse(["sm_80", "compute_80"])
    assert compat.can_run(p, "12.0").via == "ptx"
    assert not compat.can_run(p, "7.5").ok  # PTX only JITs upward


def test_sm120_with_cu126_wheel_is_not_supported() -> None:
    al = compat.torch_arch_list("2.6.0+cu126")
    assert al is not None
    assert not compat.can_run(al, "12.0").ok
    assert compat.can_run(compat.torch_arch_list("2.7.1+cu128") or al, "12.0").via == "sass"


def test_v100_with_cu128_of_2_7_or_2_11_is_not_supported() -> None:
    for v in ("2.7.1+cu128", "2.11.0+cu128"):
        al = compat.torch_arch_list(v)
        assert al is not None and not compat.can_run(al, "7.0").ok
    al = compat.torch_arch_list("2.8.0+cu128")
    assert al is not None and compat.can_run(al, "7.0").via == "sass"


def test_torch_version_parsing() -> None:
    tb = compat.parse_torch_version("2.4.1+cu121")
    assert tb and tb.minor == "2.4" and tb.variant == "cu121"
    tb2 = compat.parse_torch_version(
        "2.4.1", "12.1"
    )  # PyPI wheel: no local label, CUDA from torch/version.py
    assert tb2 and tb2.variant == "cu121"
    tb3 = compat.parse_torch_version("2.5.0a0+872d972e41.nv24.08", "12.6")  # NGC build
    assert tb3 and tb3.minor == "2.5" and tb3.variant == "cu126"
    assert compat.parse_torch_version("garbage") is None


def test_suggestion_for_old_driver() -> None:
    s = compat.suggest_torch_variant("2.4.1", "470.82.01", "8.6")
    assert s is not None and s.variant == "cu118"
    assert s.command == "pip install torch==2.4.1 --index-url https://download.pytorch.org/whl/cu118"
    assert compat.suggest_torch_variant("2.4.1", "450.36.06", "8.6") is None  # below every family floor


def test_cuda_arch_range() -> None:
    assert compat.cuda_arch_range("12.4") == ((5, 0), (9, 0))
    assert compat.cuda_arch_range("13.0") == ((7, 5), (12, 1))
    assert compat.cuda_arch_range("9.0") is None
