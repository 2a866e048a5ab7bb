"""Network failures as users paste them: pip/uv/conda, Hugging Face (hf_transfer, Xet, 416), git and git-lfs,
registry pulls, ssh/rsync, NCCL's OFI/IB/socket paths and the c10d rendezvous.

Each case is a real public text from ``tests/fixtures/realworld/corpus`` (SOURCES.md names the URL).  Before
these signatures most were "not recognised", a certificate problem was a plain unreachable host, a pull reset
by the registry was nothing at all, and one RDMA fault was reported twice.  ``run`` must retry what a restart
can get through (a cut transfer) and not what fails the same way every time (an untrusted certificate, an
exhausted LFS quota, a plain-HTTP registry).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.knowledge.signatures import CATEGORY_FAMILY, match
from gpuclinic.supervise.classify import class_info, match_output

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"

# file -> the one signature a correct diagnosis names (nothing else: one fault, one finding)
ONLY: dict[str, str] = {
    "pip_hash_mismatch_buildkit_cut_pytorch_104598.txt": "download.hash_mismatch",
    "pip_hash_mismatch_build_backend_box_invokeai_5006.txt": "download.hash_mismatch",
    "hf_ssl_self_signed_maxretry_oneline_fastchat_2739.txt": "download.tls_verify_failed",
    "hf_ssl_ipython_cert_verify_docling_1432.txt": "download.tls_verify_failed",
    "uv_invalid_peer_certificate_unknownissuer_fingenius_19.txt": "download.tls_verify_failed",
    "conda_http_000_connection_failed_ubuntu_conda_9948.txt": "download.unreachable",
    "conda_http_000_getaddrinfo_wrapped_80col_conda_6455.txt": "download.unreachable",
    "git_gnutls_handshake_unable_to_access_openni2_7.txt": "download.tls_handshake_failed",
    "git_gnutls_handshake_curl35_python_bytes_robox_230.txt": "download.tls_handshake_failed",
    "git_lfs_quota_batch_response_pull_vectoranim_10.txt": "git.lfs_quota_exceeded",
    "git_lfs_smudge_404_object_missing_gitlfs_2868.txt": "git.lfs_download_failed",
    "pull_conn_reset_podman_blob_storage_podman_8503.txt": "pull.connection_reset",
    "pull_conn_reset_kitematic_http500_json_2151.txt": "pull.connection_reset",
    "pull_http_response_to_https_client_compose_onenet_4.txt": "pull.http_response_to_https",
    "nccl_ofi_completed_error_rc20_security_group_awsofi_156.txt": "nccl.ofi_error",
    "nccl_ofi_warn_function_line_old_format_awsofi_22.txt": "nccl.ofi_error",
    "nccl_ibv_modify_qp_unreachable_proxy_connect_ncclt_185.txt": "nccl.ibv_call_failed",
    "nccl_call_to_connect_refused_retrying_info_wenet_959.txt": "nccl.connect_failed",
    "dist_client_socket_timed_out_1800s_tcpstore_controlnet_382.txt": "dist.store_timeout",
    "dist_client_socket_failed_connect_errno110_rlswarm_197.txt": "dist.store_unreachable",
    "dist_port_in_use_two_finetunes_torchtune_392.txt": "dist.port_in_use",
    "rsync_code12_connection_unexpectedly_closed_rsyncd_rpki_420.txt": "rsync.connection_lost",
    "rsync_client_loop_broken_pipe_progress_rsync_449.txt": "ssh.connection_dropped",
    "ssh_banner_exchange_timed_out_repeated_axiom_618.txt": "ssh.connect_failed",
    "hf_transfer_reqwest_incomplete_body_hfdl_5.txt": "download.hf_transfer_failed",
    "hf_xet_cas_incomplete_body_hfhub_3036.txt": "download.xet_failed",
    "hf_416_httpx_mirror_client_error_omlx_141.txt": "download.range_not_satisfiable",
    "uv_network_timeout_uv_http_timeout_pavona_474.txt": "download.read_timeout",
    "uv_connection_reset_tree_uv_12730.txt": "download.connection_broken",
    "pull_x509_expired_current_time_after_drycc_24.txt": "download.tls_verify_failed",
    "hf_proxy_cannot_connect_filenotfound_yoloworld_521.txt": "download.unreachable",
    "nccl_proxy_service_connect_retcode2_net_ib_ncclt_111.txt": "nccl.connect_failed",
    "dist_gloo_pair_closed_by_peer_rvc_1882.txt": "nccl.connection_reset",
    "hf_httpx_remote_protocol_error_no_xet_hfhub_4349.txt": "download.connection_broken",
    "hf_gaierror_name_resolution_chatunivi_12.txt": "download.unreachable",
    "pull_skopeo_writing_blob_happened_during_read_eof_skopeo_1901.txt": "pull.unexpected_eof",
    "pip_retry_protocolerror_reset_verbose_warehouse_10523.txt": "download.connection_broken",
    "pip_retry_proxyerror_cannot_connect_10054_pip_9190.txt": "download.unreachable",
    "git_rpc_result22_http504_old_wording_grimoirelab_36.txt": "download.server_error",
    "git_rpc_result56_http0_hung_up_obyte_21.txt": "git.transfer_failed",
    "dist_rendezvous_c10d_store_json_callstack_pytorch_67547.txt": "dist.store_timeout",
    "dist_distnetworkerror_client_socket_10000ms_torchxpu_2119.txt": "dist.store_timeout",
    "pull_containerd_no_progress_cancel_k8s_131521.txt": "pull.request_canceled",
    "pull_crio_context_deadline_exceeded_tabbed_events_crio_189.txt": "pull.request_canceled",
    "nccl_ib_async_port_error_then_error12_litllama_380.txt": "nccl.ib_port_error",
    "nccl_ib_async_catastrophic_mpirun_ts_nccl_230.txt": "nccl.ib_port_error",
    "nccl_socket_poll_connect_timed_out_rank_logs_nccl_1618.txt": "nccl.connect_failed",
    "hf_offline_mode_is_enabled_kernels_553.txt": "download.offline_mode",
    "ssh_host_key_verification_git_hung_up_deliver_21.txt": "ssh.auth_failed",
    "ssh_deepspeed_passwordless_check_exit255_deepspeed_4907.txt": "ssh.connect_failed",
}


@pytest.mark.parametrize("name", sorted(ONLY))
def test_real_network_text_names_its_one_cause(name: str) -> None:
    found = [m.id for m in match((CORPUS / name).read_text(errors="replace"))]
    assert found == [ONLY[name]], found


@pytest.mark.parametrize(
    "name",
    [
        "pip_hash_mismatch_cached_cu121_installer_textgen_4414.txt",
        "hf_xet_cas_data_length_mismatch_xetcore_303.txt",
        "pull_conn_reset_image_configuration_cloudflare_docs_10309.txt",
        "pull_tls_timeout_docker_run_hubfeedback_1195.txt",
        "pull_ratelimit_buildx_hubfeedback_2429.txt",
        "ssh_connect_port22_timed_out_backuputils_304.txt",
        "git_gnutls_handshake_pull_function_wsl_textgen_4353.txt",
        "pip_retry_newconnection_permission_denied_pip_10888.txt",
        "pull_kubelet_context_canceled_large_image_testinfra_15102.txt",
    ],
)
def test_a_cut_transfer_is_the_retryable_download_class(name: str) -> None:
    found = match_output((CORPUS / name).read_text(errors="replace"))
    # `run` classifies by the specific matches; a Python traceback around them is only generic
    specific = {m.cls for m in found if not m.generic}
    assert specific == {"download"}, [(m.cls, m.title) for m in found]
    assert class_info("download")["retry"] is True


@pytest.mark.parametrize(
    "name",
    [
        "hf_ssl_urllib3_chained_maxretry_stablevirtualcamera_23.txt",
        "git_lfs_quota_fetch_reference_cdupdates_1.txt",
        "pull_http_response_to_https_client_journal_distribution_3162.txt",
        "pull_x509_expired_fata_index_v1_moby_11534.txt",
        "hf_offline_mode_is_enabled_kernels_553.txt",
        "ssh_host_key_verification_scp_exit255_proxmox_190.txt",
    ],
)
def test_a_refusal_that_repeats_on_restart_is_not_retried(name: str) -> None:
    found = match_output((CORPUS / name).read_text(errors="replace"))
    assert found and {m.cls for m in found} == {"application_error"}, [(m.cls, m.title) for m in found]


def test_registry_network_faults_are_network_family() -> None:
    """A TLS handshake timeout or a reset by the registry's CDN is the network's fault, not the software's."""
    for name in (
        "pull_tls_timeout_compose_pulling_hubfeedback_947.txt",
        "pull_unexpected_eof_retrying_forlinux_1442.txt",
    ):
        (m,) = match((CORPUS / name).read_text(errors="replace"))
        assert CATEGORY_FAMILY[m.category] == "network", (name, m.id, m.category)


def test_memlock_limit_hides_the_generic_ofi_warning() -> None:
    text = (CORPUS / "nccl_ofi_register_mr_enomem_mpi_prefixed_nccl_563.txt").read_text()
    found = [m.id for m in match(text)]
    assert "nccl.memlock_limit" in found and "nccl.ofi_error" not in found, found


def test_ofi_info_lines_are_not_errors() -> None:
    text = (
        "algo-1:462:462 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.3.0aws\n"
        "algo-1:462:462 [0] NCCL INFO NET/OFI Selected Provider is efa\n"
        "INFO: Function: ofi_init Line: 686: NET/OFI Selected Provider is efa\n"
    )
    assert match(text) == []


def test_benign_lookalikes_are_not_network_faults() -> None:
    """Lines that share words with the network signatures but report no fault: a pipe closed by `head`, NCCL
    INFO lines of a healthy init, pip's normal progress, a TLS handshake that worked."""
    text = (
        "cat: write error: Broken pipe\n"
        "tee: write error: Broken pipe\n"
        "node1:123:456 [0] NCCL INFO NET/OFI Selected Provider is efa\n"
        "node1:123:456 [0] NCCL INFO Connected all rings\n"
        "  Downloading torch-2.4.0-cp311-cp311-manylinux1_x86_64.whl (797.2 MB)\n"
        "Successfully installed torch-2.4.0\n"
        "* SSL connection using TLSv1.3 / TLS_AES_128_GCM_SHA256\n"
        "Receiving objects: 100% (22436/22436), 12.84 MiB | 864.00 KiB/s, done.\n"
    )
    assert match(text) == []


@pytest.mark.parametrize(
    ("name", "kind", "family"),
    [
        ("pull_conn_reset_podman_blob_storage_podman_8503.txt", "network", "network"),
        ("nccl_ib_async_port_error_backquoted_nccl_905.txt", "network", "network"),
        ("hf_429_hfhubhttperror_api_datasets_6488.txt", "network", "network"),
        ("xid79_oneline_nvsentinel_155.txt", "hardware", "gpu_fault"),
    ],
)
def test_explain_names_the_kind_and_family_of_a_signature(name: str, kind: str, family: str) -> None:
    """explain said "cause found: software" for a registry reset or an NCCL port error, and every signature's
    incident carried the error.* wildcard's "software" family: both follow the signature's own family."""
    from gpuclinic.explain import explain_text

    report = explain_text((CORPUS / name).read_text(errors="replace"), name)
    assert report.explain_summary()["kind"] == kind
    assert report.incidents[0].family.value == family, report.incidents[0]
