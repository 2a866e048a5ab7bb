"""``doctor --from`` and ``explain`` name the same GPU for an error paste that names one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.model import Finding
from gpuclinic.sources.evidence import load_evidence

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "realworld"


def _gpu_of(findings: Sequence[Finding], code: str) -> int | None:
    f = next(f for f in findings if f.code == code)
    return f.gpu.index if f.gpu else None


@pytest.mark.parametrize(
    ("name", "gpu"),
    [
        # "GPU 7 has a total capacity of 95.00 GiB": the OOM happened on GPU 7 of an 8-GPU H20 node
        ("corpus/sglang_capture_cuda_graph_oom_h20_sglang_5285.txt", 7),
        ("corpus/oom_other_process_dotsocr_196.txt", 0),
    ],
)
def test_oom_gpu_index_survives_doctor_from(name: str, gpu: int) -> None:
    path = REAL / name
    explained = explain_text(path.read_text(encoding="utf-8"), origin=str(path))
    doctored = diagnose(load_evidence([str(path)]))
    assert _gpu_of(explained.findings, "error.cuda.oom") == gpu
    assert _gpu_of(doctored.findings, "error.cuda.oom") == gpu
