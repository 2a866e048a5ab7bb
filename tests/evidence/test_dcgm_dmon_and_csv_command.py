"""``dcgmi dmon`` XIDER rows become Xid events; a ``--format=csv,noheader`` paste takes its columns from the
command above it (DCGM issue 263: GPU 1 stuck with recovery action Reset and Xid 120)."""

from __future__ import annotations

from gpuclinic.sources import dcgm_dmon, smi_csv
from gpuclinic.sources.evidence import snapshot_from_text

DMON = ["dcgmi dmon  -c 1 -e 230", "#Entity    XIDER        ", "ID                      ",
        "GPU 0      0            ", "GPU 1      120          "]


def test_dmon_xider_rows_are_xids_of_their_gpu() -> None:
    (ev,) = dcgm_dmon.xid_events(DMON, "t", first=10)
    assert (ev.xid, ev.detail["gpu_index"], ev.lineno) == (120, 1, 14)


def test_dmon_without_xider_column_gives_nothing() -> None:
    assert dcgm_dmon.xid_events(["#Entity    POWER   TEMP", "GPU 1      120     40"], "t") == []


def test_noheader_csv_takes_the_command_columns_and_keeps_a_trailing_note() -> None:
    text = ("nvidia-smi --query-gpu=index,gpu_recovery_action --format=csv,noheader\n0, None\n"
            "1, Reset   <= GPU is unusable, reset required \n")
    dump = smi_csv.parse(text)
    assert [(g.index, g.recovery_action) for g in dump.gpus] == [(0, None), (1, "gpu_reset")]


def test_reset_and_xid120_together_drain_gpu_1() -> None:
    snap = snapshot_from_text(
        "nvidia-smi --query-gpu=index,gpu_recovery_action --format=csv,noheader\n0, None\n1, Reset\n\n"
        + "\n".join(DMON) + "\n", "dcgm263")
    assert [g.recovery_action for g in snap.gpus] == [None, "gpu_reset"]
    assert [(e.xid, e.detail.get("gpu_index")) for e in snap.kernel_events if e.kind == "xid"] == [(120, 1)]
