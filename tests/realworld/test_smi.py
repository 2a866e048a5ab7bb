"""Real nvidia-smi outputs (tables, ``-q`` sections, XML, CSV, ``nvlink -s``) -> parsed facts and diagnosis.

Fixtures in ``tests/fixtures/realworld/smi`` were posted publicly (SOURCES.md lists each source); they are
pasted the way people paste: quoted with "> ", indented, cut off, Windows/WSL variants.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.errors import InputError
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Severity, Verdict
from gpuclinic.sources.evidence import detect, load_evidence, snapshot_from_text

SMI = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "smi"
MiB = 1024 * 1024


def snap_of(name: str) -> Snapshot:
    return snapshot_from_text((SMI / name).read_text(), name)


def codes(snap: Snapshot) -> dict[str, Severity]:
    return {f.code: f.severity for f in diagnose(snap).findings}


def test_every_fixture_has_a_source() -> None:
    sources = (SMI.parent / "SOURCES.md").read_text()
    for p in SMI.iterdir():
        assert f"`smi/{p.name}`" in sources, p.name


# name -> (kind, driver, cuda, [(index, name, bus, temp, used MiB, total MiB, power, cap)])
TABLES: dict[
    str,
    tuple[
        str, str | None, str | None, list[tuple[int, str, str, float, int, int, float | None, float | None]]
    ],
] = {
    "table_wsl_cuda_err_545_wsl_11589.txt": (
        "smi_table",
        "546.80",
        None,
        [(0, "NVIDIA GeForce RTX 3060 ...", "0000:01:00.0", 54, 816, 6144, 16, 80)],
    ),
    "table_wddm_460_wsl_6014.txt": (
        "smi_table",
        "460.15",
        "11.1",
        [(0, "GeForce RTX 207...", "0000:01:00.0", 45, 176, 8192, 12, None)],
    ),
    "table_wddm_indented_517_wsl_9134.txt": (
        "smi_table",
        "517.48",
        "11.7",
        [(0, "NVIDIA GeForce ...", "0000:0a:00.0", 31, 576, 11264, 16, 250)],
    ),
    "table_p100_361_openbmc_637.txt": (
        "smi_table",
        "361.89",
        None,
        [
            (0, "Tesla P100-SXM2...", "0002:01:00.0", 25, 931, 16280, 35, 300),
            (1, "Tesla P100-SXM2...", "0003:01:00.0", 26, 1477, 16280, 40, 300),
            (2, "Tesla P100-SXM2...", "0006:01:00.0", 25, 931, 16280, 35, 300),
        ],
    ),
    "table_rtx3060_550_ctk_394.txt": (
        "smi_table",
        "550.54.14",
        "12.4",
        [(0, "NVIDIA GeForce RTX 3060", "0000:81:00.0", 32, 9, 12288, 38, 170)],
    ),
    "table_t4_570_dstack_2860.txt": (
        "smi_table",
        "570.133.20",
        "12.8",
        [(0, "Tesla T4", "0000:00:1e.0", 29, 0, 15360, 10, 70)],
    ),
    "table_quoted_rtx4090_560_vllm_15335.txt": (
        "smi_table",
        "560.35.03",
        "12.6",
        [(0, "NVIDIA GeForce RTX 4090", "0000:13:00.0", 22, 4, 24564, 14, 450)],
    ),
    "table_2080ti_450_libnvc_131.txt": (
        "smi_table",
        "450.102.04",
        "11.2",
        [(0, "GeForce RTX 208...", "0000:19:00.0", 37, 6, 11019, 7, 250)],
    ),
    # vGPU-unlock host: "CUDA Version: N/A", power "N/A /  N/A" at 100 % utilisation
    "table_vgpu_unlock_cuda_na_460_30.txt": (
        "smi_table",
        "460.32.04",
        None,
        [(0, "Quadro P400", "0000:01:00.0", 60, 1011, 2047, None, None)],
    ),
    # 580 layout: "+----" under the header line; the paste ends inside the last border
    "table_a800_580_hami_1903.txt": (
        "smi_table",
        "580.119.02",
        "13.0",
        [
            (0, "NVIDIA A800 80GB PCIe", "0000:01:00.0", 27, 0, 81920, 46, 300),
            (1, "NVIDIA A800 80GB PCIe", "0000:81:00.0", 26, 0, 81920, 47, 300),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_tables(name: str) -> None:
    kind, drv, cuda, rows = TABLES[name]
    text = (SMI / name).read_text()
    assert detect(text) == kind
    s = snapshot_from_text(text, name)
    assert s.driver_version == drv
    assert s.cuda_driver_version == cuda
    got = [
        (
            g.index,
            g.name,
            g.pci_bus_id,
            g.temperature_c,
            (g.memory_used_bytes or 0) // MiB,
            (g.memory_total_bytes or 0) // MiB,
            g.power_draw_w,
            g.power_limit_w,
        )
        for g in s.gpus
    ]
    assert got == rows
    assert not any(g.lost for g in s.gpus)
    r = diagnose(s)
    assert r.verdict == Verdict.HEALTHY, [(f.code, f.severity) for f in r.findings]


def test_wsl_cuda_version_err_is_not_a_lost_gpu() -> None:
    """WSL prints "CUDA Version: ERR!" in the header when its libcuda is broken; the GPU row is fine."""
    s = snap_of("table_wsl_cuda_err_545_wsl_11589.txt")
    assert s.gpus[0].lost is False and s.cuda_driver_version is None


def test_wddm_insufficient_permissions_is_not_a_process_name() -> None:
    g = snap_of("table_wddm_460_wsl_6014.txt").gpus[0]
    assert [(p.pid, p.name) for p in g.processes] == [(1752, None), (2424, "...b3d8bbwe\\WinStore.App.exe")]
    assert all(p.used_memory_bytes is None for p in g.processes)  # WDDM: "N/A"


def test_q_performance_section_495() -> None:
    s = snap_of("q_performance_495_mangohud_636.txt")
    assert (s.driver_version, s.cuda_driver_version) == ("495.44", "11.5")
    (g,) = s.gpus
    assert g.pci_bus_id == "0000:0e:00.0" and g.performance_state == "P0"
    assert "hw_slowdown" not in g.clock_event_reasons and "sw_thermal_slowdown" not in g.clock_event_reasons
    assert diagnose(s).verdict == Verdict.HEALTHY


def test_q_throttle_grep_paste() -> None:
    s = snap_of("q_throttle_grep_kubeflow_68.txt")
    assert len(s.gpus) == 1 and diagnose(s).verdict == Verdict.HEALTHY


def test_q_remap_pending_four_lines() -> None:
    s = snap_of("q_remap_pending_gpud_80.txt")
    (g,) = s.gpus
    assert (g.remapped_rows_correctable, g.remapped_rows_uncorrectable, g.remapped_rows_pending) == (
        0,
        4,
        True,
    )
    c = codes(s)
    assert "memory.row_remap_pending" in c and c["memory.row_remap_pending"] >= Severity.WARNING


def test_q_rtx4090_535_idle_node() -> None:
    """GeForce on 535: T.Limit margins, 'Addressing Mode: Unknown Error', Gen1 link at P8 idle, a big
    python."""
    s = snap_of("q_rtx4090_535_gpu0_of_8_gpud.txt")
    g = s.gpus[0]
    # "Attached GPUs : 8" above the one pasted block: the other seven are counted, without facts
    assert len(s.gpus) == 8 and all(x.name is None and "evidence" in x.unreadable for x in s.gpus[1:])
    assert g.name == "NVIDIA GeForce RTX 4090" and g.uuid == "GPU-6b7298f4-721f-9e24-a277-9ec909ba76f0"
    assert (g.temperature_c, g.pcie_gen, g.pcie_gen_max, g.pcie_width) == (27, 1, 4, 16)
    assert g.slowdown_temp_c is not None and g.slowdown_temp_c > 80  # margins turned into thresholds
    assert g.shutdown_temp_c is not None and g.shutdown_temp_c > g.slowdown_temp_c
    assert g.lost is False and g.ecc_mode_current is False
    assert [(p.pid, p.name, p.used_memory_bytes) for p in g.processes] == [
        (2180559, "/opt/conda/bin/python", 22072 * MiB)
    ]
    r = diagnose(s)
    assert r.verdict == Verdict.HEALTHY
    pcie = [f for f in r.findings if f.code == "pcie.link_degraded"]
    assert all(f.severity == Severity.INFO and f.data.get("reason") == "idle_gen" for f in pcie)


def test_q_wsl_wddm_head() -> None:
    s = snap_of("q_wsl_gtx1650_510_ctk_271.txt")
    assert (s.driver_version, s.cuda_driver_version) == ("510.06", "11.6")
    (g,) = s.gpus
    assert g.name == "NVIDIA GeForce GTX 1650 Ti with Max-Q Design" and g.pci_bus_id == "0000:01:00.0"


def test_q_windows_header_only() -> None:
    s = snap_of("q_windows_header_451_nvdocker_1352.txt")
    assert (s.driver_version, s.cuda_driver_version) == ("451.67", "11.0")


def test_q_ecc_all_na_is_not_an_error() -> None:
    s = snap_of("q_ecc_na_titanrtx_nvdocker_1070.txt")
    (g,) = s.gpus
    assert g.ecc_volatile_uncorrected is None and g.retired_pages_dbe is None
    assert diagnose(s).verdict == Verdict.HEALTHY


def test_query_gpu_csv_windows() -> None:
    s = snap_of("query_gpu_wddm_2080s_466_exporter.csv")
    (g,) = s.gpus
    assert (s.driver_version, g.name, g.uuid, g.compute_capability, g.fan_percent) == (
        "466.63",
        "NVIDIA GeForce RTX 2080 SUPER",
        "GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa",
        "7.5",
        38,
    )
    assert g.memory_used_bytes == 575 * MiB and g.serial is None


def test_truncated_xml_is_read_as_far_as_it_goes() -> None:
    s = snap_of("xml_truncated_gtx1660ti_430_cpux_115.xml")
    assert (s.driver_version, s.cuda_driver_version) == ("430.64", "10.1")
    (g,) = s.gpus
    assert (g.name, g.uuid, g.pci_bus_id) == (
        "GeForce GTX 1660 Ti",
        "GPU-e189fb8d-1627-f8f0-2ba3-c0585a8e9e85",
        "0000:29:00.0",
    )
    assert any("cut off" in n for n in s.notes)


def test_nvlink_s_inactive_links_drain_the_gpu() -> None:
    s = snap_of("nvlink_s_inactive_v100_azhpc_73.txt")
    (g,) = s.gpus
    assert (g.index, g.name, g.uuid) == (3, "Tesla V100-SXM2-32GB", None)
    assert [(link.link, link.active) for link in g.nvlinks] == [
        (0, True),
        (1, True),
        (2, True),
        (3, False),
        (4, True),
        (5, False),
    ]
    r = diagnose(s)
    f = next(f for f in r.findings if f.code == "nvlink.error")
    assert f.severity == Severity.CRITICAL and "3, 5" in " ".join(f.evidence)
    assert r.verdict == Verdict.DRAIN


def test_nvlink_joins_the_table_gpu_by_index(tmp_path: Path) -> None:
    """A table and `nvlink -s` of the same node give one GPU with its links."""
    table = (SMI / "table_p100_361_openbmc_637.txt").read_text()
    nvl = "GPU 1: Tesla P100-SXM2-16GB (UUID: GPU-x)\n         Link 0: 20 GB/s\n         Link 1: <inactive>\n"
    (tmp_path / "t.txt").write_text(table)
    (tmp_path / "n.txt").write_text(nvl.replace("GPU-x", "..."))
    s = load_evidence([str(tmp_path)])
    assert len(s.gpus) == 3
    g1 = next(g for g in s.gpus if g.index == 1)
    assert g1.pci_bus_id == "0003:01:00.0"
    assert [(link.link, link.active) for link in g1.nvlinks] == [(0, True), (1, False)]


def test_nvlink_all_inactive_is_a_fault_only_on_an_nvlink_part() -> None:
    """`all links are inActive` drains an SXM part (B200, H100 SXM) but not a PCIe card without a bridge."""
    line = "NVML: Unable to retrieve NVLink information as all links are inActive\n"
    sxm = snapshot_from_text("GPU 2: NVIDIA B200 (UUID: GPU-xxx)\n" + line, "b200")
    assert sxm.gpus[0].nvlink_all_inactive is True
    (f,) = [f for f in diagnose(sxm).findings if f.code == "nvlink.error"]
    assert f.severity == Severity.CRITICAL and "all NVLink links are inactive" in f.title
    pcie = snapshot_from_text("GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-x)\n" + line, "3090")
    assert pcie.gpus[0].nvlink_all_inactive is True
    assert not [f for f in diagnose(pcie).findings if f.code == "nvlink.error"]


def test_nvlink_error_counters_join_status() -> None:
    s = snapshot_from_text((SMI / "nvlink_s_inactive_v100_azhpc_73.txt").read_text(), "s")
    from gpuclinic.sources.evidence import add_text

    add_text(
        s,
        "GPU 3: Tesla V100-SXM2-32GB (UUID: ...)\n\t Link 0: Replay Errors: 7\n\t Link 0: Recovery Errors: "
        "1\n"
        "\t Link 0: CRC Errors: 0\n",
        "e",
    )
    link0 = s.gpus[0].nvlinks[0]
    assert (link0.active, link0.replay_errors, link0.recovery_errors, link0.crc_flit_errors) == (
        True,
        7,
        1,
        0,
    )


@pytest.mark.parametrize(
    "name",
    [
        "table_mig_devices_nvitop_8.txt",  # a MIG-only block names no GPU's health
        "q_wddm_processes_465_nvdocker_1458.txt",  # a process list without its GPU
    ],
)
def test_unusable_pastes_are_one_clean_error(name: str) -> None:
    with pytest.raises(InputError) as e:
        snap_of(name)
    assert "\n" not in str(e.value) and name in str(e.value)


def test_doctor_from_all_realworld_smi_at_once() -> None:
    """Every real sample in one `doctor --from` run: no traceback, unusable ones listed, the node drained."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--from", str(SMI), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    import json

    rep = json.loads(proc.stdout)
    assert any(f["code"] == "nvlink.error" for f in rep["findings"])


@pytest.mark.parametrize(
    ("name", "driver", "bus", "temp"),
    [
        ("q_temperature_304_monitorix_28.txt", "304.108", "0000:01:05.0", 49),  # "Gpu : 49 C", 4-digit domain
        ("q_temperature_325_monitorix_28.txt", "325.15", "0000:03:00.0", 39),
    ],
)
def test_q_temperature_section_of_old_drivers(name: str, driver: str, bus: str, temp: float) -> None:
    s = snap_of(name)
    (g,) = s.gpus
    assert (s.driver_version, g.pci_bus_id, g.temperature_c) == (driver, bus, temp)


def test_q_a100_470_head() -> None:
    s = snap_of("q_a100_470_head_cudalibsamples_104.txt")
    (g,) = s.gpus
    assert (s.driver_version, s.cuda_driver_version) == ("470.103.01", "11.4")
    assert (g.name, g.serial, g.pci_bus_id, g.mig_mode_current, g.persistence_mode) == (
        "NVIDIA A100-SXM4-80GB",
        "1324621114474",
        "0000:94:00.0",
        False,
        True,
    )


def test_a800_580_mig_disabled_and_ecc_zero() -> None:
    s = snap_of("table_a800_580_hami_1903.txt")
    assert [(g.mig_mode_current, g.ecc_mode_current, g.ecc_volatile_uncorrected) for g in s.gpus] == [
        (False, True, 0),
        (False, True, 0),
    ]


def test_query_gpu_nounits_with_blank_line_and_unknown_error() -> None:
    """Windows 442.19 CSV: a blank line after the header and "[Unknown Error]" in one column."""
    s = snap_of("query_gpu_nounits_unknown_error_442_mindminer_627.csv")
    (g,) = s.gpus
    assert (
        g.name,
        g.utilization_gpu_pct,
        g.utilization_memory_pct,
        g.temperature_c,
        g.power_draw_w,
        g.power_limit_w,
        g.fan_percent,
    ) == ("GeForce RTX 2080 Ti", 100, 37, 56, 228.82, 210, 56)
    assert g.power_default_limit_w is None and g.unreadable.get("power_default_limit_w") == "Unknown Error"
    assert diagnose(s).verdict == Verdict.HEALTHY


@pytest.mark.parametrize(
    ("name", "first", "nvlink"),
    [
        ("topo_m_2x5090_club3090_1229.txt", "nvidia-smi topo -m: 2 GPU(s); GPU pairs PHB", False),
        ("topo_m_8gpu_10nic_deepep_128.txt", "nvidia-smi topo -m: 8 GPU(s); GPU pairs SYS", False),
    ],
)
def test_topo_matrix_is_read_into_notes(name: str, first: str, nvlink: bool) -> None:
    text = (SMI / name).read_text()
    assert detect(text) == "smi_topo"
    s = snapshot_from_text(text, name)
    assert s.gpus == []  # GPUn names do not identify a card; the matrix informs, it does not diagnose
    notes = [n.split(": ", 1)[1] for n in s.notes if n.startswith(name)]
    assert notes[0].startswith(first)
    assert any(n.startswith("no NVLink") for n in notes) is not nvlink
    assert any("CPUs 0-" in n for n in notes)


def test_query_gpu_every_field_of_590_h100_mig() -> None:
    """`--query-gpu=<all ~220 fields>` on 590: many unknown columns, "[Requested functionality has been
    deprecated]"."""
    s = snap_of("query_gpu_all_fields_h100_mig_590_exporter.csv")
    (g,) = s.gpus
    assert (s.driver_version, g.name, g.pci_bus_id, g.compute_capability) == (
        "590.48.01",
        "NVIDIA H100 80GB HBM3",
        "0000:00:09.0",
        "9.0",
    )
    assert (g.mig_mode_current, g.ecc_mode_current, g.ecc_volatile_uncorrected) == (True, True, 0)
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.performance_state) == (5, 5, 16, "P0")
    assert (g.power_draw_w, g.power_limit_w, g.temperature_c, g.memory_temperature_c) == (433.78, 700, 53, 59)
    assert ((g.memory_used_bytes or 0) // MiB, (g.memory_total_bytes or 0) // MiB) == (11125, 81559)
    assert g.clock_event_reasons == [] and g.sm_clock_mhz == 1980
    assert diagnose(s).verdict == Verdict.HEALTHY


def test_query_retired_pages_without_addresses_is_not_a_retirement() -> None:
    """590 lists a row per cause with "[N/A]" address: no page was retired."""
    s = snap_of("query_retired_pages_na_h100_590_exporter.csv")
    (g,) = s.gpus
    assert g.name == "NVIDIA H100 80GB HBM3" and not g.retired_pages_sbe and not g.retired_pages_dbe
    assert diagnose(s).verdict == Verdict.HEALTHY
