"""Property tests: no parser raises on arbitrary, truncated, binary or huge input."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclinic.errors import InputError
from gpuclinic.sources import bugreport, evidence, lspci, smi_csv, smi_table, smi_text, smi_xml

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"
TEXT_FIXTURES = sorted(p for p in FX.iterdir() if p.suffix in (".txt", ".xml", ".log", ".csv"))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _all_parsers(text: str) -> None:
    smi_text.parse(text)
    smi_table.parse(text)
    smi_csv.parse(text)
    smi_csv.looks_like(text)
    lspci.parse(text.splitlines())
    bugreport.parse_stream(io.StringIO(text), "<t>")
    evidence.detect(text)
    try:
        smi_xml.parse(text, "<t>")
    except InputError:
        pass
    try:
        evidence.snapshot_from_text(text, "<t>")
    except InputError as e:
        assert "\n" not in str(e)


@SETTINGS
@given(st.text(max_size=3000))
def test_random_text_never_raises(text: str) -> None:
    _all_parsers(text)


@SETTINGS
@given(st.binary(max_size=3000))
def test_binary_garbage_never_raises(data: bytes) -> None:
    _all_parsers(data.decode("utf-8", errors="replace"))


# Text built from real nvidia-smi vocabulary, so the parsers' deeper branches are exercised.
_TOKENS = st.sampled_from(
    [
        "GPU 00000000:3B:00.0",
        "    Product Name : NVIDIA H100",
        "    Remapped Rows",
        "        Pending : Yes",
        "        Correctable Error : [N/A]",
        "    Temperature",
        "        GPU Current Temp : ERR!",
        "    Clocks Event Reasons",
        "        HW Slowdown : Active",
        "            HW Power Brake Slowdown : Active",
        "    ECC Errors",
        "        Volatile",
        "            DRAM Uncorrectable : 3",
        "            Single Bit",
        "                Total : x",
        "    PCI",
        "        GPU Link Info",
        "            PCIe Generation",
        "                Max : 5",
        "                Current : [Unknown Error]",
        "            Link Width",
        "                Max : 16x",
        "    Processes",
        "        Process ID : 12",
        "            Name : python",
        "|   0  NVIDIA A40   On  | 00000000:4F:00.0 Off |  0 |",
        "|ERR!  ERR! ERR!    ERR! / ERR! |  0MiB / 1MiB | ERR!  Default |",
        "| NVIDIA-SMI 550.1  Driver Version: 550.1  CUDA Version: 12.4 |",
        "<nvidia_smi_log>",
        '<gpu id="0:1:0">',
        "</gpu>",
        "</nvidia_smi_log>",
        "____________________________________________",
        "*** /var/log/kern.log",
        "/usr/bin/nvidia-smi --query",
        "==============NVSMI LOG==============",
        "nvidia-bug-report.sh Version: 1",
        "Unable to determine the device handle for GPU 0000:02:00.0: Unknown Error",
        "\t\tLnkSta: Speed 8GT/s, Width x8",
        "01:00.0 VGA compatible controller [0300]: NVIDIA Corporation [10de:2204]",
        "",
        "   ",
        ":",
        " : ",
        "\x00",
        "name, pci.bus_id, temperature.gpu, power.draw [W], clocks_throttle_reasons.active",
        "x, 0:1:0, [N/A], 1 W, 0xZZ",
        "NVIDIA A100, 00000000:07:00.0, 33, 54.12 W, 0x0000000000000001",
        '"a,b", ",", ,,,,',
    ]
)


@SETTINGS
@given(st.lists(_TOKENS, max_size=80))
def test_structured_fragments_never_raise(lines: list[str]) -> None:
    _all_parsers("\n".join(lines))


@pytest.mark.parametrize("path", TEXT_FIXTURES, ids=lambda p: p.name)
def test_truncated_fixtures_never_raise(path: Path) -> None:
    text = path.read_text()
    step = max(1, len(text) // 40)
    for cut in range(0, len(text), step):
        _all_parsers(text[:cut])


def test_ten_megabyte_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    base = (FX / "a100-sxm4-80gb-510-remap-pending.txt").read_text()
    big = "x" * (10 * 1024 * 1024)
    text = base.replace("    Remapped Rows\n", f"    Junk : {big}\n    Remapped Rows\n")
    d = smi_text.parse(text)
    assert d.gpus[0].remapped_rows_pending is True
    t = smi_table.parse((FX / "table-a40-550.txt").read_text() + "\n|" + big + "|\n")
    assert len(t.gpus) == 4
    p = tmp_path / "big.log"
    p.write_text((FX / "nvidia-bug-report-excerpt.log").read_text().replace("auto\n", big + "\nauto\n"))
    rep = bugreport.parse_path(str(p))
    assert rep.driver_version == "565.57.01" and rep.smi and rep.pci_devices


@SETTINGS
@given(st.binary(min_size=1, max_size=2000))
def test_load_evidence_on_garbage_files_is_one_line_error(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x"
        p.write_bytes(data)
        try:
            evidence.load_evidence([str(p)])
        except InputError as e:
            assert "\n" not in str(e) and str(p) in str(e)
