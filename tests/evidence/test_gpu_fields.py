"""The GPU-field schema drives the readers: one row per fact, one clock-event vocabulary."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.knowledge import gpu_fields
from gpuclinic.sources import nvml, smi_csv, smi_text, smi_xml
from gpuclinic.sources.smi_common import CLOCK_REASON_BITS, reason_name


def test_every_row_names_a_real_fact_and_every_query_name_is_read() -> None:
    attrs = {f.name for f in dataclasses.fields(GpuFacts)}
    for row in gpu_fields.fields():
        assert row.fact in attrs, row
        for name in row.query_gpu:
            assert name in smi_csv.FIELDS, name
    assert set(smi_csv.FIELDS) == {n for r in gpu_fields.fields() for n in r.query_gpu}


@given(st.integers(min_value=0, max_value=0x3FF))
def test_nvml_and_csv_decode_a_reason_mask_alike(mask: int) -> None:
    g = GpuFacts(index=0)
    smi_csv.FIELDS["clocks_event_reasons.active"](g, hex(mask))
    assert g.clock_event_reasons == nvml.decode_reasons(mask)
    assert nvml.CLOCK_EVENT_REASONS == {b: n for n, b in CLOCK_REASON_BITS.items()}


@pytest.mark.parametrize(("label", "name"), [
    ("Clocks Throttle Reason Hw Power Brake Slowdown", "hw_power_brake_slowdown"),  # 4xx text
    ("HW Power Brake Slowdown", "hw_power_brake_slowdown"),
    ("clocks_event_reason_hw_power_brake_slowdown", "hw_power_brake_slowdown"),  # 535+ XML tag
    ("clocks_throttle_reason_sw_power_cap", "sw_power_cap"),  # pre-535 XML tag
    ("Applications Clocks Setting", "applications_clocks"),
    ("SW Thermal Slowdown", "sw_thermal_slowdown"),
    ("Display Clock Setting", "display_clocks"),
    ("Idle", "idle"),
])
def test_reason_labels_of_every_era_map_to_nvml_names(label: str, name: str) -> None:
    assert reason_name(label) == name


def test_text_and_xml_readers_use_the_same_vocabulary(fixtures: object) -> None:
    from pathlib import Path

    ev = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"
    t = smi_text.parse((ev / "h100-535-power-brake-gpu0-of-8.txt").read_text())
    x = smi_xml.parse((ev / "rtx-pro-6000-blackwell-580.xml").read_text(), "x")
    names = set(CLOCK_REASON_BITS)
    for g in [*t.gpus, *x.gpus]:
        assert set(g.clock_event_reasons) <= names
    assert "hw_power_brake_slowdown" in t.gpus[0].clock_event_reasons


def test_lifetime_counters_are_marked() -> None:
    life = gpu_fields.lifetime_facts()
    assert {"pcie_replay_count", "ecc_aggregate_uncorrected", "remapped_rows_uncorrectable"} <= life
    assert "temperature_c" not in life


def test_xml_reader_reads_the_schema_rows() -> None:
    from pathlib import Path

    ev = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"
    (g,) = smi_xml.parse((ev / "tesla-p100-510.xml").read_text(), "x").gpus
    rows = [r for r in gpu_fields.fields() if r.xml_reader == "schema"]
    assert {r.fact for r in rows} >= {
        "name",
        "uuid",
        "serial",
        "vbios",
        "persistence_mode",
        "performance_state",
    }
    assert g.name and g.name.startswith("Tesla P100") and g.uuid and g.uuid.startswith("GPU-")
    assert g.performance_state and g.performance_state.startswith("P") and g.vbios
    for r in rows:
        assert r.xml, r  # every schema-read row names its XML path


# a sample value per parse kind of the schema: (as nvidia-smi prints it, as the reader returns it)
_VALUES: dict[str, tuple[str, object]] = {
    "str": ("Some Value", "Some Value"),
    "bool": ("Enabled", True),
    "num": ("42 %", 42.0),
    "int": ("7", 7),
    "mib": ("1024 MiB", 1 << 30),
    "width": ("16x", 16),
}
# facts of the structured sections (temperatures, power, clocks, memory, PCIe, ECC, retirement) both
# readers take from the schema
_STRUCTURED = {
    "temperature_c",
    "power_draw_w",
    "sm_clock_mhz",
    "memory_used_bytes",
    "pcie_gen",
    "pcie_width",
    "pcie_replay_count",
    "ecc_mode_current",
    "retired_pages_sbe",
    "remapped_rows_pending",
}

def test_xml_reader_reads_every_schema_row_from_its_path() -> None:
    """A -q -x dump written from the schema's own element paths: every schema-read row comes back."""
    import xml.etree.ElementTree as ET

    rows = [r for r in gpu_fields.fields() if r.xml_reader == "schema"]
    assert _STRUCTURED <= {r.fact for r in rows}
    root = ET.Element("nvidia_smi_log")
    ET.SubElement(root, "driver_version").text = "550.54.14"
    gpu = ET.SubElement(root, "gpu", id="00000000:3B:00.0")
    for r in rows:
        node = gpu
        for step in r.xml[0].split("/"):
            found = node.find(step)
            node = found if found is not None else ET.SubElement(node, step)
        node.text = _VALUES[r.parse][0]
    (g,) = smi_xml.parse(ET.tostring(root, encoding="unicode"), "x").gpus
    for r in rows:
        assert getattr(g, r.fact) == _VALUES[r.parse][1], r.fact


def test_text_reader_reads_every_schema_row_from_its_path() -> None:
    """A -q paste written from the schema's own text paths: every schema-read row comes back."""
    lines = [
        "==============NVSMI LOG==============",
        "",
        "Driver Version                        : 550.54.14",
        "Attached GPUs                         : 1",
        "GPU 00000000:3B:00.0",
    ]
    rows = [r for r in gpu_fields.fields() if r.text_reader == "schema"]
    assert len(rows) >= 40
    # the structured sections are schema rows too (temperatures, power, clocks, memory, PCIe, ECC, retirement)
    assert _STRUCTURED | {"shutdown_temp_c", "power_limit_w"} <= {r.fact for r in rows}
    open_parents: list[str] = []
    for r in sorted(rows, key=lambda r: r.smi_text[0]):
        *parents, leaf = r.smi_text[0].split("/")
        same = 0
        while same < min(len(parents), len(open_parents)) and parents[same] == open_parents[same]:
            same += 1
        for depth, p in enumerate(parents[same:], start=same + 1):
            lines.append("    " * depth + p)
        open_parents = parents
        lines.append("    " * (len(parents) + 1) + f"{leaf:<34}: {_VALUES[r.parse][0]}")
    (g,) = smi_text.parse("\n".join(lines) + "\n").gpus
    for r in rows:
        assert getattr(g, r.fact) == _VALUES[r.parse][1], r.fact


@pytest.mark.parametrize("older", [True, False])
def test_text_reader_takes_the_first_readable_spelling(older: bool) -> None:
    """Older drivers' names are later alternatives; an unreadable newest value falls back to the next one."""
    block = (
        [
            "    Power Readings",
            "        Power Draw                        : 180.50 W",
            "        Power Limit                       : 250.00 W",
        ]
        if older
        else [
            "    GPU Power Readings",
            "        Instantaneous Power Draw          : N/A",
            "        Average Power Draw                : 180.50 W",
            "        Current Power Limit               : 250.00 W",
        ]
    )
    text = (
        "\n".join(
            [
                "GPU 00000000:3B:00.0",
                "    Product Name                          : Tesla V100",
                *block,
                "    Temperature",
                "        Gpu                               : 49 C",
                "    PCI",
                "        Replays Since Reset               : [Unknown Error]",
            ]
        )
        + "\n"
    )
    (g,) = smi_text.parse(text).gpus
    assert (g.power_draw_w, g.power_limit_w, g.temperature_c) == (180.5, 250.0, 49.0)
    assert g.pcie_replay_count is None and g.unreadable.get("pcie_replay_count") == "Unknown Error"


def test_nvml_one_call_facts_are_read_from_the_schema() -> None:
    """Rows with nvml_read name a call their nvml column documents; the NVML source calls none of them by
    hand."""
    from pathlib import Path

    src = "".join(f.read_text() for f in Path(smi_xml.__file__).parent.glob("nvml*.py"))  # reader + split
    reads = [(f, r) for ph in ("static", "dynamic", "full") for f, r in gpu_fields.nvml_reads(ph)]
    assert len(reads) >= 15
    rows = {r.fact: r for r in gpu_fields.fields()}
    for fact, spec in reads:
        assert spec.fn in (rows[fact].nvml or ""), fact
        assert spec.conv in ("number", "intval", "milliwatts") and spec.phase in ("static", "dynamic", "full")
        assert f'"{spec.fn}"' not in src, spec.fn
