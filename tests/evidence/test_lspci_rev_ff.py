"""A GPU that fell off the bus still shows in ``lspci`` with its configuration space read as all ones
(``(rev ff)``, ``!!! Unknown header type 7f``): a plain ``lspci | grep -i nvidia`` of such a node was "not
recognised" by ``doctor --from`` and HEALTHY for ``explain`` (real text: shine-cluster#171)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.explain import explain_text
from gpuclinic.model import Severity
from gpuclinic.sources import lspci
from gpuclinic.sources.evidence import load_evidence

CORPUS = Path(__file__).resolve().parents[1] / "fixtures/realworld/corpus"
REAL = CORPUS / "lspci_rev_ff_quadro_rtx8000_shinecluster_171.txt"


def test_a_plain_listing_is_lspci_and_rev_ff_is_read() -> None:
    text = REAL.read_text()
    assert lspci.looks_like(text)
    devs = lspci.parse(text.splitlines())
    assert [d.bus_id for d in devs if d.config_unreadable] == [f"0000:1c:00.{i}" for i in range(4)]
    assert len(devs) == 12 and sum(d.is_gpu for d in devs) == 3
    assert not lspci.looks_like("1c:00.0 VGA compatible controller: Intel Corporation UHD 630 (rev 02)\n")


def test_the_card_that_reads_all_ones_is_off_the_bus_once() -> None:
    report = explain_text(REAL.read_text(), "lspci.txt")
    off = [f for f in report.findings if f.code == "gpu.fallen_off_bus"]
    assert len(off) == 1 and off[0].severity == Severity.CRITICAL
    assert off[0].gpu is not None and off[0].gpu.pci_bus_id == "0000:1c:00.0"
    assert len(off[0].evidence) == 4  # its GPU, audio and two USB functions
    snap = load_evidence([str(REAL)])  # doctor --from reads it too
    assert snap.pci_devices and any(d.config_unreadable for d in snap.pci_devices)


def test_healthy_listing_and_the_verbose_form() -> None:
    healthy = REAL.read_text().replace("(rev ff)", "(rev a1)")
    assert not [f for f in explain_text(healthy, "lspci.txt").findings if f.severity >= Severity.WARNING]
    verbose = (
        "3b:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)\n"
        "\t!!! Unknown header type 7f\n"
        "\tKernel driver in use: nvidia\n"
    )
    devs = lspci.parse(verbose.splitlines())
    assert [d.config_unreadable for d in devs] == [True]


def test_the_kernel_log_saying_it_first_is_not_repeated() -> None:
    kern = "[  12.3] NVRM: GPU 0000:1c:00.0: GPU has fallen off the bus.\n"
    report = explain_text(kern + REAL.read_text(), "mixed.txt")
    off = [f for f in report.findings if f.code == "gpu.fallen_off_bus"]
    assert len(off) == 1 and off[0].source != "lspci"
