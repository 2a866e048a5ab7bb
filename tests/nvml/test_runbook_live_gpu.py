"""``gpuclinic runbook CODE --gpu N`` fills the bus id and UUID of GPU N from this machine: NVML (the fake
at the pynvml boundary), else ``nvidia-smi --query-gpu``, else a hint that says how to find them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pynvml
import pytest
from click.testing import CliRunner
from fake_pynvml import FakeNvml

from gpuclinic.cli import cli
from gpuclinic.sources import identify

RMA = "memory.row_remap_failed"  # its RMA step names GPU {index} (UUID {uuid}, bus {bus})


def _runbook(*args: str) -> str:
    r = CliRunner().invoke(cli, ["runbook", RMA, *args], standalone_mode=False)
    assert r.exception is None and r.return_value == 0, r.output
    return r.output


def _no_smi(argv: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    raise FileNotFoundError(argv[0])


def test_gpu_index_filled_from_nvml(install_fake: Callable[..., FakeNvml],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(8)
    monkeypatch.setattr(identify, "_run", _no_smi)
    out = _runbook("--gpu", "7")
    assert "GPU 7 (UUID GPU-00000007-aaaa-bbbb-cccc-000000000007, bus 0000:db:00.0)" in out
    assert "<uuid>" not in out and "<bus>" not in out and "{" not in out
    assert "bus 0000:db:00.0, UUID GPU-00000007-aaaa-bbbb-cccc-000000000007 (NVML on this machine)" in out
    # --bus alone: the index and UUID of the GPU at that bus
    out = _runbook("--bus", "0000:2A:00.0")
    assert "GPU 1 (UUID GPU-00000001-aaaa-bbbb-cccc-000000000001, bus 0000:2a:00.0)" in out


def test_nvidia_smi_when_nvml_cannot_start(install_fake: Callable[..., FakeNvml],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    seen: list[list[str]] = []

    def smi(argv: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
        seen.append(argv)
        out = b"0, 00000000:18:00.0, GPU-aaaa\n3, 00000000:5D:00.0, GPU-dddd\n"
        return subprocess.CompletedProcess(argv, 0, out, b"")

    monkeypatch.setattr(identify, "_run", smi)
    out = _runbook("--gpu", "3")
    assert "GPU 3 (UUID GPU-dddd, bus 0000:5d:00.0)" in out and "(nvidia-smi on this machine)" in out
    assert seen and seen[0][0].endswith("nvidia-smi") and "--query-gpu=index,pci.bus_id,uuid" in seen[0]


def test_neither_answers_leaves_a_hint_not_a_placeholder(install_fake: Callable[..., FakeNvml],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    monkeypatch.setattr(identify, "_run", _no_smi)
    out = _runbook("--gpu", "5")
    assert ("GPU 5 (UUID <UUID of GPU 5: run nvidia-smi -q -i 5>, "
            "bus <bus id of GPU 5: run nvidia-smi -q -i 5>)") in out
    assert "<uuid>" not in out and "<bus>" not in out


def test_gpu_beyond_the_count_is_not_invented(install_fake: Callable[..., FakeNvml],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(2)
    monkeypatch.setattr(identify, "_run", _no_smi)
    out = _runbook("--gpu", "6")
    assert "bus <bus id of GPU 6: run nvidia-smi -q -i 6>" in out and "on this machine)" not in out


def test_a_bus_id_that_is_not_one_is_a_usage_error() -> None:
    r = CliRunner().invoke(cli, ["runbook", RMA, "--bus", "garbage"], standalone_mode=False)
    assert r.exception is not None and getattr(r.exception, "exit_code", None) == 64
