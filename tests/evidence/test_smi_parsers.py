"""nvidia-smi text, XML and table parsers against real recorded dumps (see fixtures/evidence/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.errors import InputError
from gpuclinic.sources import smi_table, smi_text, smi_xml

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


def read(name: str) -> str:
    return (FX / name).read_text()


def test_xml_tesla_p100_v11_old_ecc_layout() -> None:
    d = smi_xml.parse(read("tesla-p100-510.xml"))
    assert (d.driver_version, d.cuda_version, d.attached_gpus) == ("510.47.03", "11.6", 1)
    (g,) = d.gpus
    assert g.name == "Tesla P100-PCIE-16GB" and g.architecture == "Pascal"
    assert g.uuid == "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e" and g.serial == "0324217145110"
    assert g.pci_bus_id == "0000:00:04.0" and g.pci_device_id == "0x15F810DE" and g.vbios == "86.00.52.00.02"
    assert (g.temperature_c, g.slowdown_temp_c, g.shutdown_temp_c, g.max_operating_temp_c) == (
        38,
        82,
        85,
        None,
    )
    assert (g.power_draw_w, g.power_limit_w, g.power_default_limit_w, g.power_enforced_limit_w) == (
        26.16,
        250,
        250,
        250,
    )
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.mem_clock_mhz, g.mem_clock_max_mhz) == (405, 1328, 715, 715)
    assert g.clock_event_reasons == ["idle"] and g.clock_event_reasons_mask == 0x1
    assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected) == (0, 0)
    assert (g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (3, 0)
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (0, 0, False)
    assert g.remapped_rows_pending is None  # Pascal has no row remapper
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max, g.pcie_replay_count) == (
        3,
        3,
        16,
        16,
        0,
    )
    assert g.memory_total_bytes == 16384 * 1024**2 and g.memory_used_bytes == 0
    assert g.utilization_gpu_pct == 0 and g.persistence_mode is False and g.ecc_mode_current is True
    assert g.lost is False and g.unreadable == {}


def test_xml_a100_mig_enabled() -> None:
    (g,) = smi_xml.parse(read("a100-sxm4-40gb-mig-510.xml")).gpus
    assert g.name == "NVIDIA A100-SXM4-40GB" and g.mig_mode_current is True and g.mig_mode_pending is True
    assert (g.memory_temperature_c, g.memory_max_operating_temp_c, g.max_operating_temp_c) == (44, 95, 85)
    assert g.utilization_gpu_pct is None  # N/A under MIG
    assert g.ecc_volatile_corrected is None and g.ecc_aggregate_uncorrected == 0
    assert g.remapped_rows_pending is None and g.clock_event_reasons == [] and g.clock_event_reasons_mask == 0


def test_xml_blackwell_tlimit_margins_become_absolute_thresholds() -> None:
    d = smi_xml.parse(read("rtx-pro-6000-blackwell-580.xml"))
    (g,) = d.gpus
    assert g.temperature_c == 37 and g.fan_percent == 40
    # T.Limit margin 56 C from 37 C: T.Limit is 93 C; slowdown at margin 0, shutdown at margin -5
    assert (g.slowdown_temp_c, g.shutdown_temp_c) == (93, 98)
    assert g.power_draw_w == 66.84  # instant draw when average is N/A


@pytest.mark.parametrize(
    "doc",
    [
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>',
        '<!DOCTYPE nvidia_smi_log [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><nvidia_smi_log><gpu '
        'id="0:1:0">&xxe;</gpu></nvidia_smi_log>',
        "<nvidia_smi_log><gpu>",
        "<other/>",
    ],
)
def test_xml_unsafe_or_broken_is_input_error(doc: str) -> None:
    with pytest.raises(InputError) as e:
        smi_xml.parse(doc, "x.xml")
    assert "x.xml" in str(e.value) and "\n" not in str(e.value)


def test_text_a100_remapped_rows_pending() -> None:
    d = smi_text.parse(read("a100-sxm4-80gb-510-remap-pending.txt"))
    assert (d.driver_version, d.cuda_version, d.attached_gpus) == ("510.73.08", "11.6", 8)
    (g,) = d.gpus
    assert g.name == "NVIDIA A100-SXM4-80GB" and g.pci_bus_id == "0000:10:1c.0"
    assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected, g.ecc_aggregate_corrected) == (177, 0, 177)
    assert (g.remapped_rows_correctable, g.remapped_rows_uncorrectable) == (1, 0)
    assert g.remapped_rows_pending is True and g.remapped_rows_failure is False
    assert g.retired_pages_sbe is None and g.retired_pages_pending is None


def test_table_a40_550_layout() -> None:
    d = smi_table.parse(read("table-a40-550.txt"))
    assert (d.driver_version, d.cuda_version) == ("550.127.05", "12.4")
    assert [g.index for g in d.gpus] == [0, 1, 2, 3]
    g = d.gpus[2]
    assert (g.name, g.pci_bus_id, g.persistence_mode) == ("NVIDIA A40", "0000:53:00.0", True)
    assert (g.fan_percent, g.temperature_c, g.performance_state, g.power_draw_w, g.power_limit_w) == (
        0,
        27,
        "P8",
        15,
        300,
    )
    assert (g.memory_used_bytes, g.memory_total_bytes) == (1024**2, 46068 * 1024**2)
    assert (g.utilization_gpu_pct, g.compute_mode, g.ecc_volatile_uncorrected) == (0, "Default", 0)
    assert d.gpus[3].temperature_c == 29  # last block is cut off in the source: still parsed


@pytest.mark.parametrize(
    ("name", "bus", "why"),
    [
        ("table-handle-gpu-lost.txt", "0000:02:00.0", "GPU is lost"),
        ("table-handle-unknown-error-525.txt", "0000:65:00.0", "Unknown Error"),
    ],
)
def test_table_unable_to_determine_handle_marks_gpu_lost(name: str, bus: str, why: str) -> None:
    d = smi_table.parse(read(name))
    assert smi_table.looks_like(read(name))
    (g,) = d.gpus
    assert g.pci_bus_id == bus and g.lost is True and why in (g.lost_reason or "")
    assert d.errors and d.errors[0].startswith("Unable to determine the device handle")


def test_text_580_clock_event_counters_and_cuda_not_found() -> None:
    d = smi_text.parse(read("rtx-pro-6000-580-memory-performance.txt"))
    assert (d.driver_version, d.cuda_version, d.attached_gpus) == ("580.105.06", None, 4)
    (g,) = d.gpus
    assert g.pci_bus_id == "0000:42:00.0" and g.performance_state == "P8"
    assert g.clock_event_reasons == [] and g.clock_event_reasons_mask == 0
    assert g.violation_ns == {
        "power": 1_202_176_000,
        "sync_boost": 0,
        "thermal": 0,
        "hw_thermal_slowdown": 0,
        "hw_power_brake_slowdown": 0,
    }


@pytest.mark.parametrize(
    ("name", "driver", "cuda", "gpu_name", "bus", "uuid", "serial", "vbios"),
    [
        (
            "tesla-k80-390.txt",
            "390.77",
            None,
            "Tesla K80",
            "0000:00:1e.0",
            "GPU-78b84756-65f8-ec6b-851d-3878b541caf4",
            "0325016129384",
            "80.21.1F.00.02",
        ),
        (
            "geforce-rtx2060-525.txt",
            "525.78.01",
            "12.0",
            "NVIDIA GeForce RTX 2060",
            "0000:00:10.0",
            "GPU-d0b2b12b-a223-ad5a-6661-e65ffde8f84b",
            None,
            "90.04.63.40.55",
        ),
    ],
)
def test_text_identity_old_and_consumer(
    name: str,
    driver: str,
    cuda: str | None,
    gpu_name: str,
    bus: str,
    uuid: str,
    serial: str | None,
    vbios: str,
) -> None:
    d = smi_text.parse(read(name))
    assert (d.driver_version, d.cuda_version) == (driver, cuda)
    (g,) = d.gpus
    assert (g.name, g.pci_bus_id, g.uuid, g.serial, g.vbios) == (gpu_name, bus, uuid, serial, vbios)
    assert g.persistence_mode is False


def test_text_section_paste_without_gpu_line_is_one_gpu() -> None:
    text = read("tesla-p100-era-ecc-temps-excerpt.txt")
    assert smi_text.looks_like(text)
    (g,) = smi_text.parse(text).gpus
    assert g.pci_bus_id is None
    assert (g.temperature_c, g.shutdown_temp_c, g.slowdown_temp_c, g.max_operating_temp_c) == (
        24,
        85,
        82,
        None,
    )
    assert (g.power_draw_w, g.power_limit_w, g.power_default_limit_w, g.power_enforced_limit_w) == (
        25.33,
        250,
        250,
        250,
    )
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (0, 0, False)


def test_table_err_cells_mark_gpu_lost() -> None:
    text = read("table-err-gsp-timeout-a100.txt")
    assert smi_table.looks_like(text)  # no header line: recognised by its GPU rows
    d = smi_table.parse(text)
    ok, bad = d.gpus
    assert (ok.index, ok.pci_bus_id, ok.lost, ok.temperature_c, ok.power_draw_w, ok.mig_mode_current) == (
        4,
        "0000:8c:00.0",
        False,
        34,
        60,
        False,
    )
    assert (bad.index, bad.pci_bus_id, bad.lost, bad.name) == (5, "0000:91:00.0", True, None)
    assert bad.temperature_c is None and bad.unreadable["temperature_c"] == "ERR!"
    assert bad.memory_total_bytes == 81920 * 1024**2


def test_table_450_layout_busy_gpu() -> None:
    d = smi_table.parse(read("table-v100s-450-busy.txt"))
    assert (d.driver_version, d.cuda_version) == ("450.51.05", "11.0")
    (g,) = d.gpus
    assert (g.name, g.persistence_mode, g.temperature_c, g.power_draw_w, g.power_limit_w) == (
        "Tesla V100S-PCI...",
        False,
        50,
        219,
        250,
    )
    assert (g.utilization_gpu_pct, g.memory_used_bytes) == (100, 4617 * 1024**2) and g.busy


def test_xml_pasted_html_escaped_from_a_web_page() -> None:
    # shape of the paste in https://github.com/1Panel-dev/1Panel/issues/11910 (escaped tags, &nbsp; indents)
    doc = (
        '&lt;nvidia_smi_log&gt;\n&nbsp; &nbsp; &lt;gpu id="00000000:01:00.0"&gt;\n'
        "&nbsp; &nbsp; &nbsp; &nbsp; &lt;fan_speed&gt;30 %&lt;/fan_speed&gt;\n"
        "&nbsp; &nbsp; &nbsp; &nbsp; &lt;performance_state&gt;P0&lt;/performance_state&gt;\n"
        "&nbsp; &nbsp; &nbsp; &nbsp; &lt;gpu_power_readings&gt;\n"
        "&nbsp; &nbsp; &nbsp; &nbsp; &nbsp; &nbsp; &lt;default_power_limit&gt;450.00 "
        "W&lt;/default_power_limit&gt;\n"
        "&nbsp; &nbsp; &nbsp; &nbsp; &nbsp; &nbsp; &lt;max_power_limit&gt;450.00 W&lt;/max_power_limit&gt;\n"
        "&nbsp; &nbsp; &nbsp; &nbsp; &lt;/gpu_power_readings&gt;\n&nbsp; &nbsp; "
        "&lt;/gpu&gt;\n&lt;/nvidia_smi_log&gt;\n"
    )
    assert smi_xml.looks_like(doc)
    (g,) = smi_xml.parse(doc).gpus
    assert (
        g.pci_bus_id,
        g.fan_percent,
        g.performance_state,
        g.power_default_limit_w,
        g.power_max_limit_w,
    ) == ("0000:01:00.0", 30, "P0", 450, 450)
    with pytest.raises(InputError):
        smi_xml.parse(
            '&lt;!DOCTYPE x [&lt;!ENTITY a "b"&gt;]&gt;&lt;nvidia_smi_log&gt;&amp;a;&lt;/nvidia_smi_log&gt;'
        )


def test_text_a10_535_complete_dump() -> None:
    d = smi_text.parse(read("a10-535-remap-pending-full.txt"))
    assert (d.driver_version, d.cuda_version, d.attached_gpus) == ("535.129.03", "12.2", 1)
    (g,) = d.gpus
    assert (g.name, g.architecture, g.serial, g.uuid, g.vbios) == (
        "NVIDIA A10",
        "Ampere",
        "1324521052681",
        "GPU-73d12ef7-f589-f867-4259-c7090ab44736",
        "94.02.5C.00.04",
    )
    assert (g.pci_bus_id, g.pci_device_id) == ("0000:07:00.0", "0x223610DE")
    assert (
        g.pcie_gen,
        g.pcie_gen_max,
        g.pcie_gen_gpu_max,
        g.pcie_width,
        g.pcie_width_max,
        g.pcie_replay_count,
    ) == (4, 4, 4, 16, 16, 0)
    assert (g.fan_percent, g.performance_state, g.clock_event_reasons, g.clock_event_reasons_mask) == (
        0,
        "P8",
        ["idle"],
        1,
    )
    assert (g.memory_total_bytes, g.memory_used_bytes) == (23028 * 1024**2, 4 * 1024**2)
    assert (g.utilization_gpu_pct, g.utilization_memory_pct, g.compute_mode) == (0, 0, "Default")
    assert (g.ecc_mode_current, g.ecc_volatile_corrected, g.ecc_volatile_uncorrected) == (True, 0, 0)
    assert (g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (0, 0)
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (None, None, None)
    assert (g.remapped_rows_correctable, g.remapped_rows_uncorrectable) == (0, 4)
    assert (g.remapped_rows_pending, g.remapped_rows_failure) == (True, False)
    assert (g.temperature_c, g.shutdown_temp_c, g.slowdown_temp_c, g.max_operating_temp_c) == (
        33,
        101,
        98,
        91,
    )
    assert g.memory_temperature_c is None
    assert (g.power_draw_w, g.power_limit_w, g.power_default_limit_w, g.power_max_limit_w) == (
        43.89,
        150,
        150,
        150,
    )
    assert g.power_enforced_limit_w is None  # not printed by 535 for this board
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz, g.mem_clock_mhz, g.mem_clock_max_mhz) == (
        225,
        1695,
        405,
        6251,
    )
    assert (g.persistence_mode, g.mig_mode_current, g.recovery_action, g.processes) == (True, None, None, [])
    assert g.unreadable == {} and not g.lost


def test_table_h100x8_550() -> None:
    d = smi_table.parse(read("table-h100x8-550.txt"))
    assert (d.driver_version, d.cuda_version) == ("550.90.07", "12.4")
    assert [g.pci_bus_id for g in d.gpus] == [
        "0000:19:00.0",
        "0000:3b:00.0",
        "0000:4c:00.0",
        "0000:5d:00.0",
        "0000:9b:00.0",
        "0000:bb:00.0",
        "0000:cb:00.0",
        "0000:db:00.0",
    ]
    assert {g.name for g in d.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert [g.temperature_c for g in d.gpus] == [27, 24, 23, 23, 27, 22, 24, 23]
    assert all(g.power_limit_w == 700 and g.mig_mode_current is False and g.processes == [] for g in d.gpus)
    assert d.gpus[5].power_draw_w == 74 and d.gpus[0].memory_total_bytes == 81559 * 1024**2


def test_text_h100_535_tlimit_margins_power_brake() -> None:
    d = smi_text.parse(read("h100-535-power-brake-gpu0-of-8.txt"))
    assert (d.driver_version, d.attached_gpus) == ("535.161.08", 8)
    (g,) = d.gpus
    assert (g.name, g.architecture, g.pci_device_id, g.mig_mode_current) == (
        "NVIDIA H100 80GB HBM3",
        "Hopper",
        "0x233010DE",
        False,
    )
    # margins: T.Limit is 29 + 56 = 85 C; shutdown at -8, slowdown at -2, max operating at 0
    assert (g.temperature_c, g.shutdown_temp_c, g.slowdown_temp_c, g.max_operating_temp_c) == (29, 93, 87, 85)
    assert (g.memory_temperature_c, g.memory_max_operating_temp_c) == (39, None)
    assert (
        g.clock_event_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]
        and g.clock_event_reasons_mask == 0x88
    )
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_replay_count, g.pcie_tx_kbps) == (5, 5, 67, 3875)
    assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (0, 0, 0)
    assert (g.remapped_rows_pending, g.remapped_rows_failure) == (False, False)
    assert (g.power_draw_w, g.power_limit_w, g.sm_clock_mhz, g.sm_clock_max_mhz) == (67.74, 700, 86, 1980)


def test_text_processes_both_layouts() -> None:
    # 450+ layout: instance ids first, details nested under "Process ID"; older: details as siblings
    new = (
        "GPU 00000000:01:00.0\n    Processes\n        GPU instance ID                   : N/A\n"
        "        Compute instance ID               : N/A\n        Process ID                        : 1117\n"
        "            Type                          : G\n            Name                          : "
        "/usr/lib/xorg/Xorg\n"
        "            Used GPU Memory               : 23 MiB\n        GPU instance ID                   : "
        "N/A\n"
        "        Compute instance ID               : N/A\n        Process ID                        : "
        "280058\n"
        "            Type                          : C\n            Name                          : "
        "/opt/conda/bin/python\n"
        "            Used GPU Memory               : 22374 MiB\n        GPU instance ID                   : "
        "N/A\n"
        "        Compute instance ID               : N/A\n        Process ID                        : 924\n"
        "            Type                          : C+G\n            Name                          : "
        "Insufficient Permissions\n"
        "            Used GPU Memory               : Not available in WDDM driver model\n"
    )
    (g,) = smi_text.parse(new).gpus
    assert [(p.pid, p.name, p.used_memory_bytes, p.kind) for p in g.processes] == [
        (1117, "/usr/lib/xorg/Xorg", 23 * 1024**2, "graphics"),
        (280058, "/opt/conda/bin/python", 22374 * 1024**2, "compute"),
        (924, None, None, "compute"),
    ]
    old = (
        "GPU 0000:05:00.0\n    Processes\n        Process ID                  : 4242\n"
        "        Type                        : C\n        Name                        : python\n"
        "        Used GPU Memory             : 1000 MiB\n        Process ID                  : 4343\n"
        "        Type                        : C\n        Name                        : python3\n"
        "        Used GPU Memory             : 200 MiB\n"
    )
    (g,) = smi_text.parse(old).gpus
    assert [(p.pid, p.name, p.used_memory_bytes) for p in g.processes] == [
        (4242, "python", 1000 * 1024**2),
        (4343, "python3", 200 * 1024**2),
    ]


def test_query_gpu_csv_with_units() -> None:
    from gpuclinic.sources import smi_csv

    text = read("query-gpu-csv-rtx2060-460.csv")
    assert smi_csv.looks_like(text)
    d = smi_csv.parse(text)
    assert d.driver_version == "460.91.03"
    (g,) = d.gpus
    assert (g.name, g.pci_bus_id, g.utilization_gpu_pct, g.utilization_memory_pct, g.temperature_c) == (
        "GeForce RTX 2060",
        "0000:09:00.0",
        20,
        8,
        36,
    )
    assert (g.memory_total_bytes, g.memory_used_bytes) == (5934 * 1024**2, 682 * 1024**2)


def test_query_gpu_csv_loop_keeps_latest_sample() -> None:
    from gpuclinic.sources import smi_csv

    d = smi_csv.parse(read("query-gpu-csv-loop-520.csv"))
    (g,) = d.gpus
    assert (
        g.index,
        g.temperature_c,
        g.utilization_gpu_pct,
        g.power_draw_w,
        g.sm_clock_mhz,
        g.mem_clock_mhz,
    ) == (0, 55, 25, 83.43, 1440, 5001)
    assert (g.fan_percent, g.performance_state) == (34, "P3")
    assert d.notes == ["12 repeated sample row(s): the last one per GPU is used"]


def test_query_csv_throttle_mask_and_remapped_rows_join() -> None:
    from gpuclinic.sources.evidence import snapshot_from_text

    text = (
        "index, pci.bus_id, clocks_throttle_reasons.active, retired_pages.pending\n"
        "0, 00000000:3B:00.0, 0x0000000000000088, [N/A]\n"
        "gpu_bus_id, remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, "
        "remapped_rows.failure\n"
        "00000000:3B:00.0, 0, 3, yes, no\n"
    )
    snap = snapshot_from_text(text)
    (g,) = snap.gpus
    assert (
        g.clock_event_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]
        and g.retired_pages_pending is None
    )
    assert (g.remapped_rows_uncorrectable, g.remapped_rows_pending, g.remapped_rows_failure) == (
        3,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("text", "reasons"),
    [
        # `nvidia-smi -q | grep -A3 'Clocks Event Reasons'` on its own, as pasted into issues and write-ups
        ("    Clocks Event Reasons\n        Idle                              : Not Active\n"
         "        SW Power Cap                      : Active\n"
         "        SW Thermal Slowdown               : Active\n", {"sw_power_cap", "sw_thermal_slowdown"}),
        # the title unindented and the value annotated by the poster
        ("Clocks Event Reasons\n    SW Thermal Slowdown               : Active      (bitmask 0x20)\n",
         {"sw_thermal_slowdown"}),
        ("Clocks Throttle Reasons\n    HW Slowdown : Active    <-- thermal\n    Idle : Not Active\n",
         {"hw_slowdown"}),
    ],
)
def test_text_clock_reasons_section_alone_is_read(text: str, reasons: set[str]) -> None:
    assert smi_text.looks_like(text)
    (g,) = smi_text.parse(text).gpus
    assert set(g.clock_event_reasons) == reasons
