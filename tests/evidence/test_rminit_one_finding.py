"""One RmInitAdapter failure is one finding: the kernel-log reader's gpu.init_failed (per GPU), not also
the explain error signature nvrm.rm_init_failed for the same line (doctor --from and explain agree)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import evidence

LOG = (
    "[   37.673624] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x24:0x72:1568)\n"
    "[   37.673683] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0\n"
)


def test_doctor_reports_init_failure_once(tmp_path: Path) -> None:
    p = tmp_path / "dmesg.txt"
    p.write_text(LOG)
    codes = [f.code for f in diagnose(evidence.load_evidence([str(p)])).findings]
    assert "gpu.init_failed" in codes
    assert not [c for c in codes if "rm_init_failed" in c], codes


def test_explain_reports_init_failure_once() -> None:
    codes = [f.code for f in explain_text(LOG, "dmesg").findings]
    assert codes.count("gpu.init_failed") == 1, codes
    assert not [c for c in codes if "rm_init_failed" in c], codes


def test_prose_quote_without_a_kernel_line_still_matches() -> None:
    text = "after the update the driver says RmInitAdapter failed and nothing works\n"
    codes = [f.code for f in explain_text("NVRM: " + text, "prose").findings]
    assert any(c in ("gpu.init_failed", "error.nvrm.rm_init_failed") for c in codes), codes
