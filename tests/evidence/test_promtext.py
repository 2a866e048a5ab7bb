"""The Prometheus sample lines the exporter readers share (sources/promtext.py)."""

from __future__ import annotations

from gpuclinic import lazyre
from gpuclinic.sources import promtext

SAMPLE = lazyre.compile(r"^(?P<name>DCGM_\w+)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
META = lazyre.compile(r"^# (?:HELP|TYPE) DCGM_\w+")


def test_samples_and_meta_lines_only_in_order() -> None:
    lines = [
        (1, "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C)."),
        (2, "step 10 loss 0.5"),
        (3, 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 41'),
        (4, "# TYPE other_metric gauge"),
    ]
    got = [(n, m and m.group("value")) for n, m in promtext.samples(lines, SAMPLE, META)]
    assert got == [(1, None), (3, "41")]


def test_labels_with_escaped_quotes() -> None:
    assert promtext.labels(r'gpu="0",modelName="NVIDIA \"H100\"",Hostname="n1"') == {
        "gpu": "0",
        "modelName": r"NVIDIA \"H100\"",
        "Hostname": "n1",
    }
    assert promtext.labels(None) == {} == promtext.labels("")
