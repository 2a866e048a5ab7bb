"""NVRM lines of a failing GPU that read HEALTHY before: an FSP boot timeout (the GPU never comes up,
NVIDIA/nvtrust#77), a GSP event the driver failed to process (RC_TRIGGERED, OGKM#1045), and the
NV_ERR_GPU_IS_LOST / NV_ERR_RESET_REQUIRED statuses of driver assertions (OGKM#688, dra-driver#982), also
printed as a number ("status=0x0000000f", cmpunlocker#4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.sources.evidence import load_evidence
from gpuclinic.sources.kernellog import parse_lines

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def test_fsp_timeout_is_an_init_failure() -> None:
    (ev,) = parse_lines(["[  267.045903] NVRM: kfspPollForResponse_IMPL: FSP command timed out"])
    assert (ev.kind, ev.detail["what"]) == ("init_failed", "FSP command timed out")


def test_lost_gsp_event_is_a_gsp_error() -> None:
    line = ("Jun 12 16:30:53 fedora-box kernel: NVRM: GPU0 _kgspProcessRpcEvent: Failed to process received "
            "event 0x1004 (RC_TRIGGERED) from GPU0: status=0x21")
    (ev,) = parse_lines([line])
    assert (ev.kind, ev.detail["gsp"]) == ("gsp", "error")


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("fsp_timeout_no_devices_h100_cc_nvtrust_77.txt", "gpu.init_failed"),
        ("gsp_rc_triggered_fullchip_reset_assert_5080_ogkm_1045.txt", "gsp.error"),
        ("nvassert_gpu_is_lost_rpc_dgxstation_a100_ogkm_688.txt", "gpu.fallen_off_bus"),
        ("nvassert_reset_required_gb200_dradriver_982.txt", "gpu.recovery_action"),
        ("tlb_invalidate_status_0xf_cmp40hx_cmpunlocker_4.txt", "gpu.fallen_off_bus"),
    ],
)
def test_real_logs_are_critical(name: str, code: str) -> None:
    found = {f.code: f.severity.name.lower() for f in diagnose(load_evidence([str(CORPUS / name)])).findings}
    assert found.get(code) == "critical", found
