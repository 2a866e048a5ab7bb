"""Signature gaps found by the real corpus: wrapped lines, table cells, TensorRT(-LLM) wordings, Slurm,
container device errors, nvidia-smi -L.  The texts are the public ones in tests/fixtures/realworld/corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.knowledge.rejoin import rejoined
from gpuclinic.knowledge.signatures import match
from gpuclinic.sources.evidence import snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _text(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize(
    ("name", "sig", "line"),
    [
        (
            "nccl_heartbeat_wrapped_vlmr1_257.txt",
            "nccl.heartbeat_timeout",
            1,
        ),  # "ProcessGroupNCCL'" / "s watchdog"
        ("nccl_watchdog_interleaved_wrapped_openr1_620.txt", "nccl.watchdog_timeout", 8),  # "colle" / "ctive"
        (
            "trtllm_mempool_not_supported_table_backend_363.txt",
            "cuda.generic",
            4,
        ),  # "operation no |" / "| t supported"
        ("trtllm_triton_status_table_wrapped_oom_backend_195.txt", "cuda.out_of_memory_generic", 1),
        ("trtllm_triton_load_failed_oom_backend_281.txt", "cuda.out_of_memory_generic", 1),
        ("trtllm_ipc_oom_version_interleaved_trtllm_1060.txt", "cuda.out_of_memory_generic", 8),
        ("torch_tensorrt_allocator_oom_4090_torchtrt_2836.txt", "cuda.out_of_memory_generic", 1),
        ("ctk_require_cuda90_escaped_2018_nvdocker_688.txt", "container_cli.require_cuda", 1),
        ("dcgm_hostengine_nvml_init_failed_gpuop_498.txt", "nvml.generic", 1),
    ],
)
def test_signature_found_at_the_line_where_it_starts(name: str, sig: str, line: int) -> None:
    got = {m.id: m.line_no for m in match(_text(name))}
    assert got.get(sig) == line, got


def test_terminal_wrap_is_joined_mid_word_and_keeps_the_first_line() -> None:
    w = 60
    msg = (
        "[rank0]:[E429 13:55:49.384] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
        "progress in "
        "monitoring enqueued collectives."
    )
    cut = [msg[i : i + w] for i in range(0, len(msg), w)]
    text = "first line\n" + "\n".join(cut) + "\nlast line\n"
    assert "watchdog got stuck" not in text
    assert rejoined(text) == [(1, msg)]
    assert [(m.id, m.line_no) for m in match(text)] == [("nccl.heartbeat_timeout", 2)]


def test_unwrapped_text_is_left_alone() -> None:
    text = "short\nlines only\n| a | b |\n| c | d |\n"
    assert rejoined(text) == []


def test_table_cell_continuation_is_joined_without_padding() -> None:
    text = (
        "| m | 1 | CUDA runtime error in cudaDeviceGetDefaultMemPool(&p, d): operation no |\n"
        "|   |   | t supported (/app/bufferManager.cpp:170)                              |\n"
    )
    assert rejoined(text) == [
        (
            0,
            "| m | 1 | CUDA runtime error in cudaDeviceGetDefaultMemPool(&p, d): operation not "
            "supported (/app/bufferManager.cpp:170)",
        )
    ]


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("container_unknown_device_gpushare_k8s_events_80.txt", "container.no_gpu_visible"),
        ("container_unknown_device_k3s_journal_ctk_108.txt", "container.no_gpu_visible"),
        ("container_unknown_device_legacy_unraid_ctk_29.txt", "container.no_gpu_visible"),
        ("container_mig_unknown_device_smi_L_ctk_203.txt", "container.no_gpu_visible"),
        ("slurm_gres_count_lower_drain_awsome_195.txt", "gpu.missing"),
        ("slurmd_cant_stat_dev_nvidia0_bibigrid_705.txt", "driver.not_loaded"),
    ],
)
def test_evidence_signature_gives_the_code_on_both_paths(name: str, code: str) -> None:
    text = _text(name)
    doctor = {f.code for f in diagnose(snapshot_from_text(text, name)).findings}
    explain = {f.code for f in explain_text(text, name).findings}
    assert code in doctor and code in explain, (doctor, explain)


def test_smi_dash_l_counts_gpus_and_names_them() -> None:
    snap = snapshot_from_text(_text("container_mig_unknown_device_smi_L_ctk_203.txt"), "x")
    assert [(g.index, g.name, g.uuid) for g in snap.gpus] == [
        (0, "NVIDIA A100 80GB PCIe", "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39")
    ]
    text = "".join(
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-1111-2222-3333-444444444444)\n" for i in range(8)
    )
    assert len(snapshot_from_text(text, "L").gpus) == 8


def test_prose_with_a_lt_sign_inside_xml_does_not_break_the_dump() -> None:
    xml = (Path(__file__).resolve().parents[1] / "fixtures" / "evidence" / "tesla-p100-510.xml").read_text()
    lines = xml.splitlines()
    lines.insert(len(lines) // 2, "   Reason=gres/gpu count reported lower than configured (0 < 1)")
    snap = snapshot_from_text("\n".join(lines) + "\n", "x")
    assert snap.gpus and "gpu.missing" in {s.code for s in snap.signals}
