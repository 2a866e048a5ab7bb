"""nvidia-bug-report.log(.gz): sections, streaming into the kernel-log parser, lspci link facts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.sources import bugreport
from gpuclinic.sources.evidence import load_evidence

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


@pytest.mark.parametrize("name", ["nvidia-bug-report-excerpt.log", "nvidia-bug-report-excerpt.log.gz"])
def test_sections_and_facts(name: str) -> None:
    rep = bugreport.parse_path(str(FX / name))
    assert rep.hostname == "nomade007" and rep.date == "Thu Oct 27 08:50:11 PM -03 2022"
    assert rep.driver_version == "565.57.01"  # open kernel module "for x86_64" format
    assert "*** /var/log/kern.log" in rep.sections and "journalctl -b -0 _COMM=Xorg" in rep.sections
    (dump,) = rep.smi
    assert dump.gpus[0].remapped_rows_pending is True
    (dev,) = rep.pci_devices
    assert (dev.bus_id, dev.device_id, dev.class_code, dev.driver, dev.numa_node) == (
        "0000:10:1c.0", "0x20b0", "0x030200", "nvidia", 5)
    assert (
        dev.current_link_speed_gts,
        dev.current_link_width,
        dev.max_link_speed_gts,
        dev.max_link_width,
    ) == (2.5, 8, 16.0, 16)
    assert dev.is_gpu


def test_kernel_sections_stream_through_kernel_log_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only kernel-log sections reach parse_lines (not `journalctl _COMM=Xorg`), lazily, with an origin."""
    seen: list[tuple[str | None, list[str]]] = []

    def parse_lines(lines: Iterable[str], origin: str | None = None) -> Iterator[KernelEvent]:
        got = []
        for ln in lines:
            got.append(ln)
            if "Xid" in ln:
                yield KernelEvent(kind="xid", line=ln, xid=79, pci_bus_id="0000:02:00.0", origin=origin)
        seen.append((origin, got))

    monkeypatch.setattr(bugreport, "parse_lines", parse_lines)
    rep = bugreport.parse_path(str(FX / "nvidia-bug-report-excerpt.log.gz"))
    assert len(seen) == 1 and "kern.log" in (seen[0][0] or "")
    assert len([ln for ln in seen[0][1] if ln.strip()]) == 13 and not any(
        "No entries" in ln for ln in seen[0][1]
    )
    assert [e.xid for e in rep.kernel_events] == [79]
    snap = load_evidence([str(FX / "nvidia-bug-report-excerpt.log.gz")])
    assert snap.kernel_log_read is True and snap.kernel_events[0].xid == 79
    assert any("kern.log" in s for s in snap.kernel_log_sources)


def test_load_evidence_bugreport_fills_snapshot() -> None:
    snap = load_evidence([str(FX / "nvidia-bug-report-excerpt.log")])
    assert snap.driver_version == "510.73.08"  # nvidia-smi's own line wins; /proc version kept in software
    assert snap.hostname == "nomade007" and snap.pci_read is True
    assert snap.gpus[0].name == "NVIDIA A100-SXM4-80GB" and snap.gpus[0].remapped_rows_pending is True
    assert snap.pci_devices[0].current_link_width == 8


def test_lspci_nn_listing_enumerates_nvidia_devices() -> None:
    from gpuclinic.sources import lspci

    text = (FX / "lspci-nn-a100x8-azure.txt").read_text()
    devs = lspci.parse(text.splitlines())
    assert len(devs) == 14 and [d.bus_id for d in devs if d.is_gpu] == [
        "0001:00:00.0",
        "0002:00:00.0",
        "0003:00:00.0",
        "0004:00:00.0",
        "000b:00:00.0",
        "000c:00:00.0",
        "000d:00:00.0",
        "000e:00:00.0",
    ]
    assert {d.device_id for d in devs if d.is_gpu} == {"0x20b2"}
    assert {(d.device_id, d.class_code) for d in devs if not d.is_gpu} == {("0x1af1", "0x068000")}
    snap = load_evidence([str(FX / "lspci-nn-a100x8-azure.txt")])
    assert snap.pci_read and len(snap.pci_devices) == 14
    # with no nvidia-smi output, the GPUs lspci lists are the GPUs seen (issue 10: "0 GPUs seen" was wrong)
    assert [g.pci_bus_id for g in snap.gpus] == [d.bus_id for d in devs if d.is_gpu]


def test_gpus_without_readings_are_not_called_healthy() -> None:
    """The excerpt's nvidia-smi says 8 GPUs but shows one: the other seven were never read, so nothing
    says they are healthy (JSON ``unknown``, terminal and markdown ``no readings``)."""
    from gpuclinic.diagnose import diagnose
    from gpuclinic.render.markdown import render_markdown
    from gpuclinic.render.terminal import gpu_rows

    report = diagnose(load_evidence([str(FX / "nvidia-bug-report-excerpt.log.gz")]))
    gpus = {g["index"]: g for g in report.to_dict()["gpus"]}
    assert gpus[0]["verdict"] == "warning" and gpus[0]["readings"] is True
    for i in range(1, 8):
        assert (gpus[i]["verdict"], gpus[i]["readings"]) == ("unknown", False)
    rows = {r[0]: r[-1] for r in gpu_rows(report)}
    assert rows["0"] == "warning" and rows["?"] == "drain"
    assert [rows[str(i)] for i in range(1, 8)] == ["no readings"] * 7
    md = render_markdown(report)
    assert "healthy" not in md and md.count("| no readings |") == 7
