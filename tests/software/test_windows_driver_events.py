"""Windows' record of a GPU problem: TDR resets, bug check 0x116, nvlddmkm Event 13/14/0, and the recovery
action text the driver logs without an Xid prefix.  Each was "NO KNOWN CAUSE" (exit 0) before, including a
paste holding `GPU is lost. Reboot the system` cut before its last words.

The real texts are in ``tests/fixtures/realworld/corpus`` (SOURCES.md names each URL); the one-line cases
are the messages as Microsoft and NVIDIA document them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.explain import explain_text
from gpuclinic.knowledge.signatures import match

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


@pytest.mark.parametrize(
    ("name", "ids"),
    [
        ("win_event153_tdr_gpuid_openshell_2025.txt", ["windows.tdr"]),
        ("win_event0_gpuid_error_parsec_69.txt", ["windows.nvlddmkm_error"]),
        ("win_event13_description_missing_yolov5_12491.txt", ["windows.nvlddmkm_error"]),
        ("win_gpu_lost_video_tdr_failure_wsl_41224.txt", ["gpu.lost", "windows.video_tdr_failure"]),
    ],
)
def test_real_windows_event_texts(name: str, ids: list[str]) -> None:
    found = [sm.id for sm in match((CORPUS / name).read_text())]
    assert found == ids


def test_tdr_messages_as_documented() -> None:
    for line in (
        "Display driver nvlddmkm stopped responding and has successfully recovered.",  # Display Event 4101
        "GpuRcReset TDR occurred on GPUID:100",
        "VIDEO_TDR_TIMEOUT_DETECTED (117)",
    ):
        assert [sm.id for sm in match(line)] == ["windows.tdr"], line
    # a TDR hides the launch timeout it explains (the CUDA side of the same reset)
    both = (
        "Display driver nvlddmkm stopped responding and has successfully recovered.\n"
        "RuntimeError: CUDA error: the launch timed out and was terminated"
    )
    assert [sm.id for sm in match(both)] == ["windows.tdr"]


def test_a_graphics_exception_is_the_xid_readers_when_it_is_an_xid_line() -> None:
    """On Linux the same words sit inside an Xid 13 line, which the kernel-log reader judges: one finding."""
    xid = (
        "[660093.553553] NVRM: Xid (PCI:0000:0f:00): 13, pid='<unknown>', name=<unknown>, "
        "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Illegal Instruction Parameter"
    )
    codes = [f.code for f in explain_text(xid).findings]
    assert codes == ["xid.13"]
    bare = "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): MMU NACK Errors"
    assert [f.code for f in explain_text(bare).findings] == ["error.windows.nvlddmkm_error"]


@pytest.mark.parametrize(
    ("line", "severity"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "critical"),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "critical"),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", "warning"),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", None),
    ],
)
def test_recovery_action_without_its_xid_prefix(line: str, severity: str | None) -> None:
    found = [(f.code, f.severity.name.lower()) for f in explain_text(line).findings]
    if severity is None:  # back to no action: nothing to do
        assert found == [("explain.no_match", "info")]
    else:
        assert found == [("gpu.recovery_action", severity)]


def test_an_xid_154_line_is_one_finding() -> None:
    line = (
        "[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to "
        "0x1 (GPU Reset Required)"
    )
    assert [f.code for f in explain_text(line).findings] == ["xid.154"]
