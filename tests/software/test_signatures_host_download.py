"""Signatures for what a GPU user pastes besides CUDA errors: downloads (Hugging Face, pip, git), the job's
scheduler (Slurm, Kubernetes), launcher summaries and library limits (Triton, vLLM).

Each case is a real public text from ``tests/fixtures/realworld/corpus`` (SOURCES.md names the URL); the
assertions are the ones a wrong reading broke before: these texts were called healthy or "not recognised",
and an HTTP download reset was called an NCCL socket failure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.knowledge.signatures import match
from gpuclinic.supervise.classify import match_output

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"

# file -> the signature a correct diagnosis names first
FIRST: dict[str, str] = {
    "hf_429_pytest_inference_api_smolagents_599.txt": "download.rate_limited",
    "download_incompleteread_progress_interleaved_ttswebui_232.txt": "download.connection_broken",
    "download_conn_aborted_reset_requests_danet_140.txt": "download.connection_broken",
    "hf_consistency_check_mineru_prefixed_raganything_168.txt": "download.size_mismatch",
    "hf_unreachable_load_the_files_new_wording_hunyuanfoley_6.txt": "download.unreachable",
    "hf_maxretry_network_unreachable_sdwebui_17165.txt": "download.unreachable",
    "pip_read_timeout_retrying_zuul_ogr_545.txt": "download.read_timeout",
    "pip_no_matching_torch_cu113_versions_none_lunar_176.txt": "pip.no_matching_distribution",
    "git_gnutls_110_chinese_eof_apollo_10378.txt": "git.transfer_failed",
    "git_rpc_curl92_no_eof_focalboard_4969.txt": "git.transfer_failed",
    "slurm_oom_kill_cgroup_script_killed_arjuna_52.txt": "slurm.oom_kill",
    "slurm_time_limit_old_wording_on_node_last_canu_1067.txt": "slurm.time_limit",
    "k8s_insufficient_gpushare_mem_gpushare_59.txt": "k8s.insufficient_gpu",
    "k8s_allocate_failed_rpc_eof_hami_71.txt": "k8s.allocate_failed",
    "k8s_allocate_failed_gpu_lost_preferred_k8s_97131.txt": "gpu.lost",
    "triton_oor_hardware_limitation_old_painless_35.txt": "triton.out_of_resources",
    "vllm_kv_cache_max_seq_len_profiling_3090_vllm_10517.txt": "vllm.kv_cache_insufficient",
    "deepspeed_return_code_minus9_dschat_3232.txt": "torchrun.sigkill",
    "deepspeed_return_code_minus11_prefix_dsexamples_626.txt": "launcher.worker_failed",
    "torchrun_childfailed_exitcode1_root_cause_minigpt4_237.txt": "launcher.worker_failed",
    "host_cpu_alloc_with_cuda_oom_hint_realesrgan_272.txt": "host.cpu_alloc_failed",
    "torch_ext_cuda_mismatch_other_wrap_droidcalib_5.txt": "torch.extension_cuda_mismatch",
    "deepspeed_cuda_home_assert_pip_install_llamachinese_168.txt": "build.cuda_home_missing",
    "flashattn_ampere_rtx5090_comfy_flashattn_1540.txt": "flashattn.arch_unsupported",
    "tf_bfc_chunk_at_dump_windows_tf_19879.txt": "tf.oom",
    "tf_eigen_allocator_fatal_zero_bytes_fastmaskrcnn_129.txt": "tf.oom",
    "bnb_cuda_setup_failed_wrapped_80col_bnb_492.txt": "bnb.cuda_setup_failed",
    "cuda_err500_device_count_userwarning_ggml_xinference_1704.txt": "cuda.symbol_not_found",
    "nccl_cuda_failure_named_symbol_repeated_nccl_1528.txt": "cuda.symbol_not_found",
    "slurm_invalid_gpu_spec_unspecified_clima_424.txt": "slurm.invalid_gres",
    "win1455_paging_file_chinese_spawn_weclip_5.txt": "host.cpu_alloc_failed",
    "nccl_bootstrap_no_socket_interface_mambatree_14.txt": "nccl.no_socket_interface",
    "nccl_ofi_register_mr_enomem_mpi_prefixed_nccl_563.txt": "nccl.memlock_limit",
    "ctk_mount_error_file_exists_escaped_wrapped_nvdocker_825.txt": "container_cli.mount_error",
    "ctk_mount_error_stat_failed_proc_gpus_busid_nvdocker_1316.txt": "container_cli.mount_error",
    "hf_gated_repo_tgi_cloudwatch_copy_optimumneuron_535.txt": "download.gated_repo",
    "gpu_bf16_unsupported_xinference_actor_prefix_xinference_3486.txt": "gpu.dtype_unsupported",
    "gpu_fp8_quant_min_capability_vllm_4327.txt": "gpu.dtype_unsupported",
    "shell_killed_bold_after_iter_fastmaskrcnn_172.txt": "torchrun.sigkill",
    "hf_503_ansi_json_escaped_hfhub_2913.txt": "download.server_error",
    "cudnn_torch_incompat_rich_log_kohya_1096.txt": "cudnn.version_mismatch",
    "cudnn_caffe2_enforce_compiled_runtime_detectron_574.txt": "cudnn.version_mismatch",
    "torchvision_cuda_mismatch_wrapped_sdeasymode_18.txt": "torch.torchvision_mismatch",
    "ptxas_sm121a_triton_dgx_spark_triton_8539.txt": "nvcc.arch_unsupported",
    "cudnn_get_no_engine_caught_exception_openvla_238.txt": "cudnn.no_engine",
    "torchvision_nms_cuda_backend_new_wording_dzfacedetailer_21.txt": "torch.torchvision_mismatch",
    "modprobe_module_not_found_series_fc30_nvidiaxrun_135.txt": "modprobe.module_not_found",
    "modprobe_insert_no_such_device_optimus_bumblebee_553.txt": "modprobe.no_device",
    "pull_dns_lookup_io_timeout_kitematic_4347.txt": "download.unreachable",
    "git_failed_to_connect_timed_out_curl28_nbplus_1.txt": "download.unreachable",
    "build_ninja_called_process_error_ds_3094.txt": "build.extension_failed",
    "dist_port_in_use_c10d_socket_warnings_fastvideo_575.txt": "dist.port_in_use",
}


def test_kernel_oom_killer_is_the_cause_of_the_shells_killed() -> None:
    ids = [m.id for m in match((CORPUS / "oom_killer_ctime_commas_autovod_7.txt").read_text())]
    assert ids == ["host.oom_killer"]


@pytest.mark.parametrize(
    "name",
    [
        "tf_bfc_not_a_failure_mnist_ok_healthy_tffrcnn_68.txt",
        "tf_bfc_not_a_failure_freed_by_count_healthy_tf_43546.txt",
    ],
)
def test_tensorflow_says_not_a_failure_so_it_is_not_one(name: str) -> None:
    """TF's BFC allocator warns "ran out of memory ... The caller indicates that this is not a failure" on
    runs that finish fine; only its chunk dump (printed when an allocation really failed) is an OOM."""
    assert match((CORPUS / name).read_text()) == []


@pytest.mark.parametrize("name", sorted(FIRST))
def test_first_signature_of_real_text(name: str) -> None:
    text = (CORPUS / name).read_text(encoding="utf-8")
    ms = match(text)
    assert ms and ms[0].id == FIRST[name], [m.id for m in ms]
    assert ms[0].matched_line in text or ms[0].matched_line in text.replace("\n", "")  # hard-wrapped pastes


def test_host_ram_failure_with_a_cuda_oom_hint_is_not_a_cuda_oom() -> None:
    ids = [m.id for m in match((CORPUS / "host_cpu_alloc_with_cuda_oom_hint_realesrgan_272.txt").read_text())]
    assert ids == ["host.cpu_alloc_failed"]


def test_cublas_alloc_failure_is_one_finding() -> None:
    ids = [
        m.id
        for m in match(
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
        )
    ]
    assert ids == ["cublas.alloc_failed"]


def test_http_download_reset_is_not_called_an_nccl_socket_reset() -> None:
    ids = [m.id for m in match((CORPUS / "download_conn_aborted_reset_requests_danet_140.txt").read_text())]
    assert "download.connection_broken" in ids and "nccl.connection_reset" not in ids


def test_gloo_reset_between_ranks_stays_nccl() -> None:
    text = (
        "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] "
        "Connection closed by peer [10.0.0.2]:24937\nConnection reset by peer"
    )
    ids = [m.id for m in match(text)]
    assert ids[0] == "nccl.connection_reset" and not any(i.startswith("download.") for i in ids)


def test_sigkill_hides_the_generic_worker_failure() -> None:
    ids = [m.id for m in match((CORPUS / "deepspeed_return_code_minus9_dschat_3232.txt").read_text())]
    assert ids == ["torchrun.sigkill"]


def test_root_cause_before_the_launcher_summary_comes_first() -> None:
    summary = (CORPUS / "torchrun_childfailed_exitcode1_root_cause_minigpt4_237.txt").read_text()
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 3.88 MiB is free.\n"
    )
    ids = [m.id for m in match(oom + summary)]
    assert ids[:2] == ["cuda.oom", "launcher.worker_failed"]


def test_slurm_cgroup_oom_hides_host_oom_and_sigkill_readings() -> None:
    text = (CORPUS / "slurm_oom_kill_step_cgroup_cancelled_hafs_101.txt").read_text()
    ids = [m.id for m in match(text)]
    assert ids == ["slurm.oom_kill"]


def test_prose_with_the_same_words_is_not_a_fault() -> None:
    text = (
        "Epoch 3: 100%|##########| 500/500 loss=0.21, no errors, 0 out of memory events\n"
        "Download complete: 4 files, consistency checks passed\n"
        "the job finished well before its time limit; exitcode of the eval script is logged separately\n"
        "Insufficient data for a validation split, using 10% of train\n"
        "Killed 3 stale workers; the run was not killed\n"
    )
    assert match(text) == []


def test_supervisor_reads_slurm_oom_as_killed_and_launcher_summary_as_generic() -> None:
    slurm = match_output((CORPUS / "slurm_oom_kill_event_step_srun_nextflow_5932.txt").read_text())
    assert any(m.cls == "killed" for m in slurm)
    summary = match_output(
        (CORPUS / "torchrun_childfailed_exitcode1_root_cause_minigpt4_237.txt").read_text()
    )
    assert summary and all(m.generic for m in summary if m.cls == "application_error")


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("k8s_insufficient_gpu_node_selector_k8sdp_283.txt", 1),
        ("git_rpc_curl92_http2_cancel_curl_16732.txt", 1),
    ],
)
def test_explain_cli_exit_code_is_warning_not_healthy(name: str, code: int) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "explain", "--json", str(CORPUS / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == code, r.stderr
    assert '"verdict": "warning"' in r.stdout


def test_explain_keeps_nvidia_smis_no_devices_found() -> None:
    """explain drops the doctor's informational "no GPU in this paste" finding; when nvidia-smi itself said
    "No devices were found" that is the diagnosis, not silence (it was reported as nothing found, exit 0)."""
    from gpuclinic.explain import explain_text

    text = (CORPUS / "smi_no_devices_ci_query_downgrade_pytorch_163658.txt").read_text()
    codes = {f.code: f.severity.label for f in explain_text(text).findings}
    assert "gpu.none_detected" in codes and "explain.no_match" not in codes, codes
    healthy = explain_text("Epoch 3: loss=0.21\n")
    assert [f.code for f in healthy.findings] == ["explain.no_match"]
