"""Xid lines across driver generations and the wrappers real posts put around them: the 2006-2012
``Xid (0001:00)`` bus:slot form, NVIDIA's R384 example without ``PCI:``, a line repeated inside ansible
output, a tool's restatement of a kernel Xid (gpud's "XID 144.0 ... detected on GPU PCI:0000:01:00"),
and NVSwitch SXid records in a markdown quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.sources.evidence import load_evidence
from gpuclinic.sources.kernellog import parse_lines

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _findings(name: str) -> list[tuple[str, str, str | None, int]]:
    rep = diagnose(load_evidence([str(CORPUS / name)]))
    return sorted(
        (f.code, f.severity.name.lower(), f.gpu.pci_bus_id if f.gpu else None, int(f.data.get("count", 1)))
        for f in rep.findings
        if f.code.startswith(("xid.", "nvlink.", "gpu."))
    )


@pytest.mark.parametrize(
    ("line", "xid", "bus"),
    [
        # Ubuntu forum syslogs of 2009-2012 (GeForce 7600 GS at 02:00.0, an nForce IGP at 00:05.0)
        (
            "Jan 11 01:40:22 adiron kernel: [55598.669205] NVRM: Xid (0002:00): 6, PE0000 1c38 00000000",
            6,
            "0000:02:00.0",
        ),
        (
            "Oct 12 09:43:43 ahg kernel: [   48.996046] NVRM: Xid (0001:00): 8, Channel 00000000",
            8,
            "0000:01:00.0",
        ),
        ("[   95.788000] NVRM: Xid (0000:05): 29,  L1 -> L0", 29, "0000:00:05.0"),
        ("[…] NVRM: Xid (0000:03:00): 14, Channel 00000001", 14, "0000:03:00.0"),
    ],
)
def test_old_driver_bus_forms_name_the_gpu(line: str, xid: int, bus: str) -> None:
    (ev,) = parse_lines([line])
    assert (ev.kind, ev.xid, ev.pci_bus_id) == ("xid", xid, bus)
    assert "bus_redacted" not in ev.detail


def test_repeated_line_in_ansible_output_counts_each_line_once() -> None:
    assert _findings("xid140_ecc_escape_ansible_ctime_repeated_llmjp_sakura.txt") == [
        ("xid.140", "critical", "0000:2a:00.0", 7)
    ]


def test_a_tools_restatement_of_a_kernel_xid_is_not_another_fault() -> None:
    found = _findings("xid144_149_nvlink5_saw_mvb_netir_link_evt_gpud_1160.txt")
    xids = [f for f in found if f[0].startswith("xid.")]
    # every Xid on its GPU; the Nonfatal SAW error stays a warning (the restatement carries no Fatal word)
    assert xids == [("xid.144", "warning", "0000:01:00.0", 1), ("xid.149", "critical", "0000:00:00.0", 2)]


def test_restated_xid_alone_takes_the_gpu_it_names() -> None:
    from gpuclinic.explain import explain_text

    line = "- XID 144.0 (err status 0x00000008) NVLINK_SAW_ERROR detected on GPU PCI:0000:01:00\n"
    rep = explain_text(line)
    (f,) = [f for f in rep.findings if f.code == "xid.144"]
    assert f.gpu is not None and f.gpu.pci_bus_id == "0000:01:00.0"


def test_sxid_records_in_a_markdown_quote() -> None:
    found = _findings("xid79_sxid20034_ltssm_fault_up_quoted_gpud_sxid_readme.txt")
    assert ("xid.79", "critical", "0000:91:00.0", 1) in found
    assert any(f[:3] == ("gpu.fallen_off_bus", "critical", "0000:91:00.0") for f in found)
    nv = [f for f in found if f[0] == "nvlink.error"]
    assert nv and all(f[1] == "critical" for f in nv)


def test_gsp_lines_naming_no_gpu_belong_to_the_one_gpu_the_log_names() -> None:
    found = _findings("xid120_crashcat_wpr2_rminit_0x62_0x40_fedora_5080_ogkm_876.txt")
    gsp = [
        f
        for f in diagnose(
            load_evidence([str(CORPUS / "xid120_crashcat_wpr2_rminit_0x62_0x40_fedora_5080_ogkm_876.txt")])
        ).findings
        if f.code == "gsp.error"
    ]
    assert [(f.gpu.pci_bus_id if f.gpu else None) for f in gsp] == ["0000:01:00.0"]
    assert ("xid.120", "critical", "0000:01:00.0", 1) in found


def test_gsp_heartbeat_without_a_bus_stays_one_finding() -> None:
    rep = diagnose(
        load_evidence([str(CORPUS / "gsp_heartbeat_rpc_recv_poll_no_hostname_indented_bazzite_4449.txt")])
    )
    (f,) = [f for f in rep.findings if f.code == "gsp.error"]
    assert f.severity.name == "CRITICAL" and "heartbeat" in f.title


def test_repeated_xid_in_a_non_english_journal_is_counted() -> None:
    found = _findings("xid38_109_repeated_polish_locale_journal_ogkm_1045.txt")
    assert ("xid.109", "critical", "0000:07:00.0", 5) in found
    assert any(f[0] == "xid.38" and f[2] == "0000:07:00.0" for f in found)


def test_one_program_named_by_pid_and_name_is_one_program() -> None:
    # four lines without a pid and one "pid=904, name=Hyprland": an application Xid, not a GPU suspect
    assert _findings("xid13_hyprland_suspend_drm_semaphore_ogkm_922.txt") == [
        ("xid.13", "warning", "0000:02:00.0", 5)
    ]
    assert _findings("xid13_shader_program_header_x7_backtick_resume_bumblebee_739.txt") == [
        ("xid.13", "warning", "0000:01:00.0", 7)
    ]


def test_fallen_off_bus_without_an_xid_is_one_finding_in_explain() -> None:
    from gpuclinic.explain import explain_text

    text = (CORPUS / "fallen_off_bus_multiline_probe_failed_570_nvsentinel_155.txt").read_text()
    codes = [f.code for f in explain_text(text).findings]
    assert "gpu.fallen_off_bus" in codes and "error.xid.fallen_off_bus" not in codes


def test_gsp_timeout_banner_head_belongs_to_the_xid_after_it() -> None:
    lines = (
        (CORPUS / "xid119_two_gpus_domain_0001_banners_ctime_a100_vllm_40652.txt").read_text().splitlines()
    )
    evs = list(parse_lines(lines))
    assert [(e.lineno, e.kind, e.pci_bus_id) for e in evs] == [
        (1, "gsp", "0001:6c:00.0"),
        (2, "gsp", "0001:6c:00.0"),
        (3, "xid", "0001:6c:00.0"),
        (4, "gsp", "0001:6c:00.0"),
        (5, "gsp", "0001:96:00.0"),
        (6, "gsp", "0001:96:00.0"),
        (7, "xid", "0001:96:00.0"),
        (8, "gsp", "0001:96:00.0"),
    ]


def test_gsp_banner_head_without_its_xid_falls_back_to_the_xid_before() -> None:
    head = "[Sun Apr 26 23:13:11 2026] NVRM: _kgspLogXid119: ***** GSP Timeout *****"
    prev = (
        "[Sun Apr 26 23:12:26 2026] NVRM: Xid (PCI:0001:6c:00): 119, pid=10200, name=NvmlTaskRunner, Timeout"
    )
    evs = list(parse_lines([prev, head]))
    assert [(e.kind, e.pci_bus_id) for e in evs] == [("xid", "0001:6c:00.0"), ("gsp", "0001:6c:00.0")]


def test_nvlink5_link_minus_one_names_no_link() -> None:
    line = "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000)"
    (ev,) = parse_lines([line])
    assert (ev.xid, ev.detail["unit"], ev.detail["fatal"]) == (149, "NETIR", True)
    assert "link" not in ev.detail
    (ev,) = parse_lines([line.replace("Link -1", "Link 13")])
    assert ev.detail["link"] == 13


@pytest.mark.parametrize(
    "prefix",
    [
        "[ 1234.567890] ",
        "[Mon Mar  4 10:11:12 2024] ",
        "Mar  4 10:11:12 host kernel: [ 1234.567890] ",
        "2024-03-04T10:11:12.123456+00:00 host kernel: ",
        '<3>1 2024-03-04T10:11:12.003Z host kernel 0 - [meta x="y"] ',
        "kern  :err   : [ 1234.567890] ",
        "3,1234,5678,-;",
        "1709547072.123456 host kernel: ",
        "host: kern: warning: [2024-03-04T10:11:12.291660856Z]: ",
        "[ 1234.567890][ T1234] ",
    ],
)
def test_xid_line_in_every_prefix_keeps_number_and_gpu(prefix: str) -> None:
    msg = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    evs = [e for e in parse_lines([prefix + msg]) if e.kind == "xid"]
    assert [(e.xid, e.pci_bus_id) for e in evs] == [(79, "0000:3b:00.0")]
    assert evs[0].time is not None or evs[0].uptime_s is not None


def test_driver_line_naming_no_gpu_is_the_one_gpu_of_the_log() -> None:
    rep = diagnose(
        load_evidence([str(CORPUS / "xid69_62_journal_ellipsized_gnome_shell_5070ti_ogkm_1045.txt")])
    )
    (f,) = [f for f in rep.findings if f.code == "gpu.recovery_action"]
    assert f.gpu is not None and f.gpu.pci_bus_id == "0000:01:00.0"
    # a log whose driver lines name no GPU: the GSP fault stays unattributed
    rep = diagnose(
        load_evidence([str(CORPUS / "gsp_heartbeat_rpc_recv_poll_no_hostname_indented_bazzite_4449.txt")])
    )
    assert all(f.gpu is None for f in rep.findings if f.code == "gsp.error")


def test_sole_gpu_bus_needs_a_machine_of_one_gpu() -> None:
    from gpuclinic.checks._kernel import sole_gpu_bus
    from gpuclinic.facts.gpu import GpuFacts
    from gpuclinic.facts.snapshot import Snapshot

    evs = list(parse_lines(["NVRM: Xid (PCI:0000:01:00): 62, 3243ec3b 0000c3d8"]))
    assert sole_gpu_bus(Snapshot(kernel_events=evs)) == "0000:01:00.0"
    one = [GpuFacts(index=0, pci_bus_id="00000000:01:00.0")]
    assert sole_gpu_bus(Snapshot(kernel_events=evs, gpus=one)) == "0000:01:00.0"
    # a live node of two GPUs whose log names one: a line naming no GPU may be the other's
    two = [*one, GpuFacts(index=1, pci_bus_id="00000000:41:00.0")]
    assert sole_gpu_bus(Snapshot(kernel_events=evs, gpus=two)) is None
