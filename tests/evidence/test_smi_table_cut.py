"""An nvidia-smi table pasted cut inside a GPU's row (a terminal scrollback or a message length limit) is
read as far as it goes and said to be partial: the GPU whose readings are missing is named, never silently
judged on half a row."""

from __future__ import annotations

from gpuclinic.explain import explain_text
from gpuclinic.sources import smi_table

HEAD = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   35C    P0             71W /  700W |       0MiB /  81559MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |                    0 |
"""
CLOSE = """\
| N/A   33C    P0             70W /  700W |       0MiB /  81559MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
"""


def test_a_whole_table_is_not_partial() -> None:
    dump = smi_table.parse(HEAD + CLOSE)
    assert [g.temperature_c for g in dump.gpus] == [35, 33] and dump.partial == []


def test_a_table_cut_inside_a_gpu_row_says_which_gpu_is_missing() -> None:
    dump = smi_table.parse(HEAD + "| N/A   33C    P0 \n")
    assert [g.index for g in dump.gpus] == [0, 1] and dump.gpus[1].temperature_c is None
    (why,) = dump.partial
    assert "GPU 1" in why and "0000:2a:00.0" in why
    rep = explain_text(HEAD)
    partial = [f for f in rep.findings if f.code == "evidence.partial"]
    assert partial and "GPU 1" in " ".join(partial[0].evidence)
