"""A '[GPU requires reset]' answer is a fault wherever it is pasted: in a headerless
``--format=csv,noheader`` row (which no nvidia-smi reader takes) it is not NO KNOWN CAUSE, and where an
nvidia-smi reader already took it (a CSV with its header, ``-q``) it is reported once, per GPU."""

from __future__ import annotations

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources.evidence import snapshot_from_text

NOHEADER = "0, NVIDIA A100-SXM4-80GB, [GPU requires reset], 35, [Unknown Error]\n"
WITH_HEADER = (
    "index, temperature.gpu, utilization.gpu [%], memory.used [MiB]\n"
    "0, [GPU requires reset], [GPU requires reset], 0 MiB\n"
)
Q_TEXT = "GPU 00000000:3B:00.0\n    Temperature\n        GPU Current Temp : [GPU requires reset]\n"


def _codes(text: str) -> list[str]:
    return [f.code for f in diagnose(snapshot_from_text(text, "t")).findings]


def test_headerless_row_is_a_recovery_action() -> None:
    assert _codes(NOHEADER) == ["gpu.recovery_action"]
    rep = explain_text(NOHEADER, "t")
    assert [f.code for f in rep.findings] == ["gpu.recovery_action"]
    assert rep.exit_code == 2


def test_read_by_a_smi_reader_once_per_gpu() -> None:
    for text in (WITH_HEADER, Q_TEXT):
        rep = diagnose(snapshot_from_text(text, "t"))
        (f,) = [f for f in rep.findings if f.code == "gpu.recovery_action"]
        assert f.gpu is not None and f.gpu.index == 0


def test_prose_without_the_brackets_is_not_a_finding() -> None:
    rep = explain_text("the GPU requires reset after the crash\n", "t")
    assert "gpu.recovery_action" not in [f.code for f in rep.findings]
