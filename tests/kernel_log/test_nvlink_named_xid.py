"""An Xid whose text names an NVLink link failure is an NVLink error whatever its number: the AWS HyperPod
agent documents "Xid ... 71, ..., NVLink: fatal error detected on link 6" (71 is the catalog's CE4 error),
which read as a warning-level copy-engine Xid only."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.sources.evidence import load_evidence, snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _codes(snap: object) -> dict[str, str]:
    return {f.code: f.severity.name.lower() for f in diagnose(snap).findings}  # type: ignore[arg-type]


def test_fatal_link_text_on_another_xid_is_a_critical_nvlink_error() -> None:
    codes = _codes(load_evidence([str(CORPUS / "xid71_hyperpod_hma_cloudwatch_json_awsdocs.txt")]))
    assert codes["nvlink.error"] == "critical"
    assert codes["xid.71"] == "warning"


def test_nonfatal_link_text_is_not_fatal_and_other_xids_are_not_nvlink() -> None:
    nonfatal = "[ 10.0] NVRM: Xid (PCI:0000:b9:00): 71, NVLink: non-fatal error detected on link 6(0x1)\n"
    assert _codes(snapshot_from_text(nonfatal, "t")).get("nvlink.error") == "warning"
    copy_engine = "[ 10.0] NVRM: Xid (PCI:0000:b9:00): 71, CE4: Unknown Error on link state 2\n"
    assert "nvlink.error" not in _codes(snapshot_from_text(copy_engine, "t"))


def test_an_nvlink5_line_cut_before_its_closing_parenthesis_is_still_nonfatal() -> None:
    """NVSentinel#1357 pasted an Xid 145 line that ends inside its register list: the "Nonfatal" word was
    read only when the list was closed, so the cut line read as a critical Xid."""
    line = (
        "NVRM: Xid (PCI:0000:c5:00): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 17 (0x04084507 0x00000004 "
        "0x00000000 0x00000000 0x00000000 0x00000000"
    )
    for text in (line + "\n", line + ")\n"):
        assert _codes(snapshot_from_text(text, "t"))["xid.145"] == "warning", text
    fatal = line.replace("Nonfatal", "Fatal")
    assert _codes(snapshot_from_text(fatal + "\n", "t"))["xid.145"] == "critical"


def test_the_safety_net_reads_every_xid_a_prose_line_names() -> None:
    """vllm-backport#62 summed up its dmesg in prose: "`Xid 94` bursts + `Xid 154` (GPU recovery action →
    Drain and Reset)"; the line's first Xid only was read. Every one it names counts now, each once."""
    text = "- `Xid 94` bursts + `Xid 154` (GPU recovery action -> Drain and Reset), `Xid 94` again\n"
    snap = snapshot_from_text(text, "t")
    assert sorted(e.xid or 0 for e in snap.kernel_events if e.kind == "xid") == [94, 154]
    assert {"xid.94", "xid.154"} <= set(_codes(snap))
