"""``nvidia-smi -q -x`` as people paste it: half HTML-escaped out of a web page ("<gpu&gt;", "&nbsp;",
1Panel issue 11910) was an internal error (an XML ParseError escaping the reader, exit 3); a dump cut off
mid-element is read up to the cut (1Panel issue 9504)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.errors import InputError
from gpuclinic.sources import smi_xml
from gpuclinic.sources.evidence import load_evidence

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def test_half_escaped_xml_is_read() -> None:
    snap = load_evidence([str(CORPUS / "xml_html_escaped_591_4090_wsl_1panel_11910.txt")])
    assert snap.driver_version == "591.74"
    assert [(g.name, g.pci_bus_id) for g in snap.gpus] == [("NVIDIA GeForce RTX 4090", "0000:01:00.0")]
    (rec,) = snap.input_records
    assert rec.unclaimed == 1  # only the shell prompt line
    assert any("cut off" in n for n in snap.notes)


def test_cut_390_dump_keeps_what_it_holds() -> None:
    snap = load_evidence([str(CORPUS / "xml_390_geforce410m_truncated_1panel_9504.txt")])
    assert snap.driver_version == "390.157"
    assert [g.name for g in snap.gpus] == ["GeForce 410M"]


def test_garbage_after_the_root_is_an_input_error_not_a_crash() -> None:
    with pytest.raises(InputError):
        smi_xml.parse("<nvidia_smi_log>\n<driver_version&#>x</driver_version>\n")
