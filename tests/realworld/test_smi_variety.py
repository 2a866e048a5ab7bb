"""nvidia-smi output variety seen in real captures: 610+ header names, terminal escapes, MIG listings.

Fixtures are in ``tests/fixtures/realworld/corpus`` (SOURCES.md names each public source).  Each test pins
what was misread before its fix, through the same readers ``doctor --from`` and ``explain`` use.
"""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Verdict
from gpuclinic.sources import smi_table, smi_text
from gpuclinic.sources.evidence import detect, load_evidence, snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def snap_of(name: str) -> Snapshot:
    return snapshot_from_text((CORPUS / name).read_text(), name)


def test_610_q_header_drops_the_deprecation_note() -> None:
    """610 prints "Driver Version : 610.57.04 [Deprecated; ... Use KMD Version instead]": the version only."""
    text = (CORPUS / "q_610_kmd_version_deprecated_rtx2080s_gpuexporter.txt").read_text()
    dump = smi_text.parse(text)
    assert (dump.driver_version, dump.cuda_version) == ("610.57.04", "13.3")
    s = snap_of("q_610_kmd_version_deprecated_rtx2080s_gpuexporter.txt")
    assert (s.driver_version, s.cuda_driver_version, len(s.gpus)) == ("610.57.04", "13.3", 1)


def test_610_q_kmd_lines_alone_give_the_version() -> None:
    """A paste of only the new lines (``KMD Version`` / ``CUDA UMD Version``) still names the driver."""
    text = (
        "==============NVSMI LOG==============\n\nKMD Version                  : 610.57.04\n"
        "CUDA UMD Version             : 13.3\n\nAttached GPUs                : 1\nGPU 00000000:0C:00.0\n"
        "    Product Name             : NVIDIA GeForce RTX 2080 SUPER\n"
    )
    dump = smi_text.parse(text)
    assert (dump.driver_version, dump.cuda_version) == ("610.57.04", "13.3")


def test_610_table_header_kmd_and_umd_version() -> None:
    """The 610 table header says "KMD Version:" and "CUDA UMD Version:" (no "Driver Version:")."""
    text = (CORPUS / "table_610_kmd_umd_version_wddm_rtx2080s_gpuexporter.txt").read_text()
    assert smi_table.has_table(text)
    dump = smi_table.parse(text)
    assert (dump.driver_version, dump.cuda_version) == ("610.62", "13.3")
    (g,) = dump.gpus
    assert g.name and g.name.startswith("NVIDIA GeForce RTX 2080")
    s = snap_of("table_610_kmd_umd_version_wddm_rtx2080s_gpuexporter.txt")
    assert s.driver_version == "610.62" and diagnose(s).verdict == Verdict.HEALTHY


def test_topo_matrix_with_terminal_underline_escapes() -> None:
    """``topo -m`` captured from a terminal underlines its header (ESC[4m..ESC[0m): still a topology matrix,
    not an unrecognised input."""
    path = CORPUS / "topo_m_ansi_underline_header_h100_590_gpuexporter.txt"
    text = path.read_text()
    assert "\x1b[4m" in text
    assert detect(text) == "smi_topo"
    s = load_evidence([str(path)])
    notes = [n for n in s.notes if "topo -m" in n or "CPU affinity" in n]
    assert any("nvidia-smi topo -m: 1 GPU(s)" in n for n in notes)
    assert any("GPU0 CPUs 0-19 (NUMA 0)" in n for n in notes)
    # the same paste with only the ESC bytes lost ("[4mGPU0 ...[0m")
    s2 = snapshot_from_text(text.replace("\x1b", ""), "stripped")
    assert any("CPUs 0-19" in n for n in s2.notes)


def test_smi_l_with_mig_devices_is_one_gpu() -> None:
    s = snap_of("smi_L_mig_devices_h100_590_gpuexporter.txt")
    assert len(s.gpus) == 1 and diagnose(s).verdict == Verdict.HEALTHY


def test_dmon_samples_are_the_gpus_readings() -> None:
    """``nvidia-smi dmon`` was "not recognised" by doctor --from; its last sample per GPU is its reading."""
    path = CORPUS / "dmon_590_h100_gpu_burn_631w_gpuexporter.txt"
    s = load_evidence([str(path)])
    (g,) = s.gpus
    assert (g.index, g.power_draw_w, g.temperature_c, g.memory_temperature_c) == (0, 636, 65, 59)
    assert (g.utilization_gpu_pct, g.sm_clock_mhz, g.mem_clock_mhz) == (100, 1980, 2619)
    assert diagnose(s).verdict == Verdict.HEALTHY
    s2 = load_evidence([str(CORPUS / "dmon_595_l40s_load_gpuexporter.txt")])
    assert s2.gpus[0].memory_temperature_c is None  # "-": no reading


DMON_DT = "\n".join(
    [
        '$ nvidia-smi dmon --select=pucvmet --options=DT --count=2',
        '#Date        Time         gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg'
        '    ofa   mclk   pclk  pviol  tviol     fb   bar1   ccpm  sbecc  dbecc    pci  rxpci  txpci',
        '#YYYYMMDD    HH:MM:SS     Idx      W      C      C      %      %      %      %      %'
        '      %    MHz    MHz      %   bool     MB     MB     MB   errs   errs   errs   MB/s   MB/s',
        ' 20260816    09:22:34       0    296     88      -     99     40      0      0      0'
        '      0   9501   1410     80      1   2000      2      0      -      -      0      0      2',
        ' 20260816    09:22:34       1    290     62      -     99     40      0      0      0'
        '      0   9501   1980      0      0   2000      2      0      -      -      0      0      2',
        ' 20260816    09:22:35       0    297     93      -     99     40      0      0      0'
        '      0   9501   1395     85      1   2000      2      0      -      -      0      0      2',
    ]
) + "\n"


def test_dmon_with_date_and_time_columns_and_every_group() -> None:
    """``-o DT -s pucvmet``: date/time columns before ``gpu``, violation/ECC/PCIe columns after; two GPUs."""
    s = snapshot_from_text(DMON_DT, "dmon")
    by = {g.index: g for g in s.gpus}
    assert sorted(by) == [0, 1]
    assert (by[0].temperature_c, by[0].power_draw_w, by[0].sm_clock_mhz) == (93, 297, 1395)  # its last sample
    assert by[1].temperature_c == 62
    assert "thermal.slowdown" in {f.code for f in diagnose(s).findings if f.gpu and f.gpu.index == 0}


def test_pmon_is_not_read_as_gpus() -> None:
    pmon = (
        "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"
        "# Idx           #    C/G      %      %      %      %      %      %    name \n"
        "    0      21198     C    100     10      -      -      -      -    gpu_burn       \n"
    )
    s = snapshot_from_text(pmon + DMON_DT.split("\n", 1)[1], "pmon+dmon")
    assert sorted(g.index for g in s.gpus) == [0, 1]  # the dmon's two GPUs; the pmon row is a process


def test_mig_tables_alone_name_their_gpu() -> None:
    """``nvidia-smi mig -lgip``/``-lgi`` pasted without a table was "not recognised": the GPU they name is
    read, in MIG mode (a GPU-instance list exists only then), and the instances go to the notes."""
    path = CORPUS / "smi_mig_lgip_lgipp_lgi_4x1g6gb_summerlo.txt"
    s = load_evidence([str(path)])
    (g,) = s.gpus
    assert (g.index, g.mig_mode_current) == (0, True)
    assert any("GPU 0 GPU instances: 1g.6gb, 1g.6gb, 1g.6gb, 1g.6gb" in n for n in s.notes)
    assert any("GPU instance profiles: 1g.6gb, 1g.6gb+me, 2g.12gb, 4g.24gb" in n for n in s.notes)
    assert diagnose(s).verdict == Verdict.HEALTHY


def test_mig_compute_instance_rows_have_the_gi_id_between() -> None:
    s = snap_of("smi_mig_esxi_a100_pcie_510_lgi_lci_hpejp.txt")
    assert len(s.gpus) == 1 and s.driver_version == "510.47.03"
    assert any("GPU 0 Compute instances: 1g.5gb, 1g.5gb, 1c.2g.10gb, 1c.3g.20gb" in n for n in s.notes)
    assert diagnose(s).verdict == Verdict.HEALTHY


def test_smi_l_with_a_lower_case_device_handle_error() -> None:
    """``-L`` printed "Unable to determine the device handle for gpu 0000:18:00.0: Unknown Error" (lower
    case "gpu") in GPU 0's place: it read HEALTHY with 3 GPUs; the lost GPU is critical and all 4 count."""
    s = snap_of("smi_L_handle_lowercase_gpu_unknown_error_3x2080ti_sonar_72.txt")
    assert len(s.gpus) == 4
    lost = [g for g in s.gpus if g.lost]
    assert [g.pci_bus_id for g in lost] == ["0000:18:00.0"]
    report = diagnose(s)
    assert report.verdict == Verdict.DRAIN
    assert any(f.code == "gpu.missing" for f in report.findings)


def test_nvidia_gpu_exporter_scrape_is_read_by_its_query_gpu_names() -> None:
    """``nvidia_smi_*`` samples (utkuozdemir/nvidia_gpu_exporter) were "not recognised"; units are SI."""
    path = CORPUS / "metrics_nvidia_smi_exporter_h100_590_load_gpuexporter.txt"
    s = load_evidence([str(path)])
    (g,) = s.gpus
    assert (s.driver_version, s.cuda_driver_version, g.name, g.pci_bus_id) == (
        "590.48.01", "13.1", "NVIDIA H100 80GB HBM3", "0000:00:09.0"
    )
    assert (g.temperature_c, g.memory_temperature_c, g.power_draw_w, g.power_limit_w) == (59, 54, 631.95, 700)
    assert (g.sm_clock_mhz, g.utilization_gpu_pct, g.performance_state) == (1980, 100, "P0")
    assert (g.memory_total_bytes or 0) // 2**20 == 81559 and (g.pcie_gen, g.pcie_width) == (5, 16)
    assert (g.ecc_volatile_uncorrected, g.remapped_rows_pending, g.remapped_rows_failure) == (0, False, False)
    assert diagnose(s).verdict == Verdict.HEALTHY


def test_nvidia_gpu_exporter_scrape_with_a_pending_row_remap() -> None:
    text = (CORPUS / "metrics_nvidia_smi_exporter_h100_590_load_gpuexporter.txt").read_text()
    text = text.replace(
        'nvidia_smi_remapped_rows_pending{uuid="00000000-0000-0000-0000-000000000000"} 0',
        'nvidia_smi_remapped_rows_pending{uuid="00000000-0000-0000-0000-000000000000"} 1',
    ).replace(
        'nvidia_smi_ecc_errors_uncorrected_volatile_total{uuid="00000000-0000-0000-0000-000000000000"} 0',
        'nvidia_smi_ecc_errors_uncorrected_volatile_total{uuid="00000000-0000-0000-0000-000000000000"} 2',
    )
    s = snapshot_from_text(text, "scrape")
    (g,) = s.gpus
    assert (g.remapped_rows_pending, g.ecc_volatile_uncorrected) == (True, 2)
    assert "memory.row_remap_pending" in {f.code for f in diagnose(s).findings}


def test_csv_noheader_under_a_shell_prompt_takes_the_commands_columns() -> None:
    """``$ nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` then rows: the prompt line made the
    rows unlabelled prose ("not recognised"); the command names their columns."""
    s = load_evidence([str(CORPUS / "csv_noheader_prompt_8x_titanx_gpustat_5.txt")])
    assert len(s.gpus) == 8
    g = s.gpus[1]
    assert (g.name, g.temperature_c, g.utilization_gpu_pct) == ("GeForce GTX TITAN X", 54, 86)
    assert (g.memory_used_bytes or 0) // 2**20 == 10032


def test_xml_pasted_from_inside_the_gpu_element() -> None:
    """An -q -x excerpt starting at ``</double_bit_retirement>`` (no root, no GPU id) was "not recognised":
    its elements are one GPU's, end tags whose start was cut off are dropped, the cut is noted."""
    text = (CORPUS / "xml_fragment_from_inside_gpu_element_telegraf_12996.txt").read_text()
    assert detect(text) == "smi_xml"
    s = snapshot_from_text(text, "frag")
    (g,) = s.gpus
    assert (g.temperature_c, g.slowdown_temp_c, g.power_draw_w, g.power_limit_w) == (32, 95, 18, 350)
    assert any("inside a GPU's element" in n for n in s.notes)
    assert diagnose(s).verdict == Verdict.HEALTHY


def test_prose_with_a_few_tags_is_not_an_xml_fragment() -> None:
    assert detect("see <b>this</b> and <temperature>hot</temperature>\nok\n") != "smi_xml"


DCGMI_DMON = """\
$ dcgmi dmon -e 150,155,203,311,395,396 -c 2
#Entity   TMPTR  POWER    GPUTL  EDVTL  RRF    RRP
ID        C      W
GPU 0     91     285.123  100    0      0      0
GPU 1     61     280.456  100    2      0      1
GPU 0     93     286.001  100    0      0      0
GPU 1     62     281.000  100    2      0      1
"""


def test_dcgmi_dmon_columns_are_gpu_readings() -> None:
    """``dcgmi dmon -e`` columns the field schema names (DCGM's short names: TMPTR, POWER, GPUTL, EDVTL,
    RRF, RRP) become readings, the last sample per GPU winning; before, only XIDER was read."""
    s = snapshot_from_text(DCGMI_DMON, "dmon")
    by = {g.index: g for g in s.gpus}
    assert (by[0].temperature_c, by[0].power_draw_w, by[0].utilization_gpu_pct) == (93, 286.001, 100)
    assert (by[1].ecc_volatile_uncorrected, by[1].remapped_rows_pending, by[1].remapped_rows_failure) == (
        2, True, False
    )
    codes = {(f.code, f.gpu.index if f.gpu else None) for f in diagnose(s).findings}
    assert ("memory.ecc_uncorrectable", 1) in codes and ("memory.row_remap_pending", 1) in codes
    assert ("thermal.slowdown", 0) in codes


def test_dcgmi_dmon_xid_table_without_its_command() -> None:
    """A bare ``#Entity XIDER`` table (no "dcgmi" on the page) was "not recognised": GPU 1's Xid 120 is an
    Xid event; the table names no reading column, so no readings come from it."""
    text = "#Entity    XIDER\nID\nGPU 0      0\nGPU 1      120\n"
    s = snapshot_from_text(text, "xid")
    assert [e.xid for e in s.kernel_events] == [120]
    assert all(g.temperature_c is None for g in s.gpus)
    assert "xid.120" in {f.code for f in diagnose(s).findings}


def test_nvlink_capabilities_are_links_without_state() -> None:
    """``nvlink --capabilities`` ("Link 0, P2P is supported: true"): its GPU lines were read as an ``-L``
    listing and its links not at all (without UUIDs, old drivers: "not recognised"); now the links are
    read, with no state, so "Link is supported: false" is no fault."""
    s = load_evidence([str(CORPUS / "nvlink_capabilities_h800_3_of_8_llmaction.txt")])
    assert [g.index for g in s.gpus] == [0, 1, 7]
    assert [link.link for link in s.gpus[0].nvlinks] == list(range(8))
    assert all(link.active is None for g in s.gpus for link in g.nvlinks)
    assert diagnose(s).verdict == Verdict.HEALTHY
    old = (
        "GPU 0: Tesla V100-SXM2-32GB\n\t Link 0, P2P is supported: true\n"
        "\t Link 0, SLI is supported: false\n"
    )
    s2 = snapshot_from_text(old, "v100")  # drivers before ~450 print no UUID on the GPU line
    assert [(g.index, g.name, len(g.nvlinks)) for g in s2.gpus] == [(0, "Tesla V100-SXM2-32GB", 1)]


def test_topo_matrix_of_8_gpus_and_17_nics_is_read_at_once() -> None:
    """The header regex tried 2^columns splits on every matrix row: this 28-column matrix never finished
    (explain and doctor --from hung).  Now one pass per line."""
    import time

    text = (CORPUS / "topo_m_8x_a100_nv12_17_nics_xuesongtap.txt").read_text()
    t0 = time.process_time()
    assert detect(text) == "smi_topo"
    s = snapshot_from_text(text, "topo")
    assert time.process_time() - t0 < 5
    assert any("nvidia-smi topo -m: 8 GPU(s); GPU pairs NV12" in n for n in s.notes)


def test_csv_loop_without_a_gpu_column_is_one_gpu_sampled() -> None:
    """``-lms --query-gpu=timestamp,...`` rows without index/bus/UUID were one GPU each (5 GPUs); rows of
    one time stamp are the GPUs, a new time stamp samples them again."""
    s = load_evidence([str(CORPUS / "csv_lms_timestamp_samples_one_gpu_xuesongtap.txt")])
    (g,) = s.gpus
    assert (g.temperature_c, (g.memory_used_bytes or 0) // 2**20) == (25, 21)  # the last sample


def test_dmon_frame_buffer_column() -> None:
    """``dmon -s m`` (``# gpu fb bar1 ccpm``) names no other reading: it was "not recognised"."""
    s = load_evidence([str(CORPUS / "dmon_s_m_fb_bar1_8gpu_twice_xuesongtap.txt")])
    assert len(s.gpus) == 8 and all((g.memory_used_bytes or 0) == 4 * 2**20 for g in s.gpus)


def test_xml_versions_of_610_drivers() -> None:
    """The 610 text output's "[Deprecated; ...]" note and its KMD / CUDA UMD versions, in -q -x form (no
    real 610 XML was found: the element names follow the text keys)."""
    from gpuclinic.sources import smi_xml

    gpu = '<gpu id="00000000:0C:00.0"><product_name>NVIDIA GeForce RTX 2080 SUPER</product_name></gpu>'
    noted = (
        "<nvidia_smi_log><driver_version>610.57.04 [Deprecated; will be removed in CUDA 14.0. Use KMD "
        "Version instead]</driver_version><cuda_version>13.3 [Deprecated]</cuda_version>"
        + gpu
        + "</nvidia_smi_log>"
    )
    assert (smi_xml.parse(noted).driver_version, smi_xml.parse(noted).cuda_version) == ("610.57.04", "13.3")
    new = "<nvidia_smi_log><kmd_version>610.62</kmd_version><cuda_umd_version>13.3</cuda_umd_version>"
    d = smi_xml.parse(new + gpu + "</nvidia_smi_log>")
    assert (d.driver_version, d.cuda_version) == ("610.62", "13.3")


def test_575_memory_repair_lines() -> None:
    """575+ drivers print Channel/TPC Repair Pending and Unrepairable Memory under ECC Errors: a "Yes"
    there went unreported.  The real 590 H200 dump says "No" (healthy); its "Yes" variants are findings."""
    name = "q_590_h200_nvl_mig_devices_load_gpuexporter.txt"
    text = (CORPUS / name).read_text()
    s = snap_of(name)
    (g,) = s.gpus
    assert (g.memory_repair_pending, g.tpc_repair_pending, g.memory_unrepairable) == (False, False, False)
    line = "Channel Repair Pending                         : No"
    assert line in text
    pending = snapshot_from_text(text.replace(line, line.replace("No", "Yes")), "pending")
    assert "memory.row_remap_pending" in {f.code for f in diagnose(pending).findings}
    line = "Unrepairable Memory                            : No"
    assert line in text
    broken = snapshot_from_text(text.replace(line, line.replace("No", "Yes")), "broken")
    assert "memory.row_remap_failed" in {f.code for f in diagnose(broken).findings}
