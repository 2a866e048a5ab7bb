"""A job that dies on a broken download is the retryable `download` class; a refused gated download is not.

Real texts from the corpus (sources in tests/fixtures/realworld/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.supervise.classify import class_info, default_retry, match_output
from gpuclinic.supervise.jobspec import RunOptions

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


@pytest.mark.parametrize(
    "name",
    [
        "hf_429_hfhubhttperror_api_datasets_6488.txt",
        "hf_consistency_check_short_file_hfhub_1531.txt",
        "git_rpc_curl92_http2_cancel_curl_16732.txt",
    ],
)
def test_broken_download_is_the_download_class(name: str) -> None:
    found = match_output((CORPUS / name).read_text(errors="replace"))
    assert found and found[0].cls == "download", [(m.cls, m.title) for m in found]
    assert class_info("download")["retry"] is True


def test_gated_repo_is_not_retried() -> None:
    text = (
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-65)\n"
        "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-2-7b/resolve/main/config.json.\n"
    )
    found = match_output(text)
    assert found and {m.cls for m in found} == {"application_error"}, [(m.cls, m.title) for m in found]


def test_default_retry_is_the_data() -> None:
    want = {c for c in ("gpu_hardware", "nccl_network", "download", "hang", "killed")}
    assert set(default_retry()) == want
    assert RunOptions(cmd=["true"]).retry_on == frozenset(want)
