"""A pasted ``scontrol show node`` record is read by the health check's own parser (``slurm/scontrol.py``
``parse_node_line``): ``doctor --from`` accepts a healthy node (not "not recognised"), a drain reason that
names a GPU fault keeps its code, and slurm.conf / gres.conf lines (which also start ``NodeName=``) are not
node records."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.slurm.scontrol import parse_node_line
from gpuclinic.sources import evidence, slurm_node_text

RECORD = (
    "NodeName=gpu-a-07 Arch=x86_64 CoresPerSocket=32 \n"
    "   CPUAlloc=0 CPUEfctv=128 CPUTot=128 CPULoad=0.12\n"
    "   Gres=gpu:h100:8(S:0-1)\n"
    "   State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
    "   CfgTRES=cpu=128,mem=2000G,billing=128,gres/gpu=8\n"
    "   AllocTRES=\n"
    "   Reason={reason}\n"
)


def _doctor(tmp_path: Path, text: str) -> dict[str, str]:
    p = tmp_path / "node.txt"
    p.write_text(text)
    return {f.code: f.severity.name.lower() for f in diagnose(evidence.load_evidence([str(p)])).findings}


def test_record_means_what_the_health_check_reads(tmp_path: Path) -> None:
    text = RECORD.format(state="IDLE+DRAIN", reason="maintenance [root@2026-11-30T10:00:00]")
    (node,), used = slurm_node_text.read(text.splitlines(), None)
    assert node == parse_node_line(" ".join(x.strip() for x in text.splitlines()))
    assert (node.name, node.drained) == ("gpu-a-07", True)
    assert (node.reason, node.reason_user) == ("maintenance", "root")
    assert used == set(range(1, 8))
    assert not {c for c, s in _doctor(tmp_path, text).items() if s in ("warning", "critical")}


def test_gres_count_reason_keeps_its_code(tmp_path: Path) -> None:
    reason = "gres/gpu count reported lower than configured (7 < 8) [slurm@2026-11-30T10:00:00]"
    text = RECORD.format(state="IDLE+DRAIN", reason=reason)
    assert _doctor(tmp_path, text).get("gpu.missing") == "critical"


def test_config_lines_are_not_node_records() -> None:
    conf = [
        "NodeName=gpu[01-04] CPUs=128 Gres=gpu:h100:8 State=UNKNOWN",
        "NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[0-7]",
    ]
    assert slurm_node_text.read(conf, None) == ([], set())
