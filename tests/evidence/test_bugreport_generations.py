"""nvidia-bug-report.log of every generation: the layouts nvidia-bug-report.sh wrote from 2009 to 2025.

The real report (``nvidia-bug-report-rtx3060-laptop-520-excerpt.txt``, whole sections of a 2022 report) is
read as it is and pasted in an issue (prose and a Markdown fence around it); the other layouts are built
from the script's own ``echo`` lines (``append``, ``search_string_in_logs``, ``report_skip``,
``report_and_store_error``), with kernel lines of the forms the kernel-log reader is tested on.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.model import Severity
from gpuclinic.sources import bugreport
from gpuclinic.sources.evidence import load_evidence

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"
REAL = FX / "nvidia-bug-report-rtx3060-laptop-520-excerpt.txt"
SEP = "____________________________________________"
SMI_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running."
)


def _report(*sections: str, epilogue: bool = True) -> str:
    head = (
        f"{SEP}\n\nStart of NVIDIA bug report log file.  Please include this file, along\n"
        "with a detailed description of your problem, when reporting a graphics\n\n"
        "nvidia-bug-report.sh Version: 34097790\n\nDate: Tue Mar  4 10:00:00 UTC 2025\n"
        "uname: Linux gpu-node-7 6.8.0-52-generic #53-Ubuntu SMP x86_64 GNU/Linux\ncommand line flags: \n\n"
    )
    body = "".join(f"{SEP}\n\n{s.strip(chr(10))}\n\n" for s in sections)
    return head + body + (f"{SEP}\n\nEnd of NVIDIA bug report log file.\n" if epilogue else "")


def _warn_codes(path: Path) -> set[str]:
    rep = diagnose(load_evidence([str(path)]))
    return {f.code for f in rep.findings if f.severity >= Severity.WARNING}


def test_real_2022_report_is_read_and_healthy() -> None:
    rep = bugreport.parse_path(str(REAL))
    assert rep.hostname == "nomade007" and rep.driver_version is None and rep.complete
    assert "Scanning kernel log files for NVIDIA kernel messages:" in rep.kernel_sections
    assert "dmesg:" in rep.kernel_sections
    loads = [e for e in rep.kernel_events if e.kind == "module" and "NVRM: loading" in e.line]
    assert len(loads) == 3  # one per boot of journalctl -b -0/-1/-2
    assert rep.not_collected == []  # dmidecode and vulkaninfo are skipped, neither is a part we read
    snap = load_evidence([str(REAL)])
    (gpu,) = snap.gpus
    assert gpu.name == "NVIDIA GeForce RTX 3060 Laptop GPU" and snap.driver_version == "520.56.06"
    report = diagnose(snap)
    assert not [f.code for f in report.findings if f.severity >= Severity.WARNING]
    by_code = {f.code: f for f in report.findings}
    # "No NVIDIA GPU found." before each boot's successful load: resolved, not a fault
    assert by_code["driver.kernel_module"].severity == Severity.INFO
    # a notebook GPU's x8 of x16 is its board's wiring
    assert by_code["pcie.link_degraded"].data.get("reason") == "board_wired"
    assert "evidence.partial" not in by_code


def test_real_report_pasted_with_prose_and_fence_reads_the_same() -> None:
    prose = "This is the bug report of the NVIDIA GForce RTX 3060 Laptop GPU\n\n```\n"
    text = prose + REAL.read_text() + "```\n"
    report = explain_text(text, "issue.md")
    assert report.snapshot.hostname == "nomade007"
    assert [g.name for g in report.snapshot.gpus] == ["NVIDIA GeForce RTX 3060 Laptop GPU"]
    assert not [f.code for f in report.findings if f.severity >= Severity.WARNING]


def test_2020_scanning_section_previous_boot_xid_and_nvidia_smi_failure(tmp_path: Path) -> None:
    """The grep'd NVRM lines of earlier boots are kernel log; nvidia-smi's own failure is its error."""
    text = _report(
        "*** /proc/driver/nvidia/version\n"
        "*** ls: -r--r--r-- 1 root root 0 2020-06-01 /proc/driver/nvidia/version\n"
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  440.82  Wed Apr  1 20:04:33 UTC 2020",
        "Scanning kernel log files for NVIDIA kernel messages:\n\n  journalctl -b -0:\n"
        "Jun 01 09:00:01 gpu-node-7 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  440.82\n\n"
        "  journalctl -b -1:\n"
        "May 31 23:14:18 gpu-node-7 kernel: NVRM: GPU at PCI:0000:3b:00: "
        "GPU-efbdfde9-5798-a6e7-4c46-12518fa15375\n"
        "May 31 23:14:18 gpu-node-7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, "
        "GPU has fallen off the bus.",
        "dmesg:\n\n[    0.000000] Linux version 5.4.0-42-generic",
        "/usr/bin/nvidia-smi --query\n\n" + SMI_FAILED + "\n\n\n/usr/bin/nvidia-smi --query --unit\n\n"
        + SMI_FAILED,
    )
    p = tmp_path / "nvidia-bug-report.log"
    p.write_text(text)
    rep = bugreport.parse_path(str(p))
    assert rep.driver_version == "440.82" and rep.smi_sections == 1
    assert [e.xid for e in rep.kernel_events if e.kind == "xid"] == [79]
    assert {"gpu.fallen_off_bus", "driver.not_loaded"} <= _warn_codes(p)
    assert "gpu.fallen_off_bus" in {f.code for f in explain_text(text, "paste").findings}


def test_2009_layout_without_stars() -> None:
    """Titles without ``*** ``, ``... does not exist``, /proc/driver/nvidia/cards/0 with a ``bb.dd.f`` bus."""
    text = (
        f"{SEP}\n\nStart of NVIDIA bug report log file.  Please include this file\n\n"
        "nvidia-bug-report.sh Version: 4401223\n\nDate: Tue Oct 27 14:31:54 EDT 2009\n"
        "uname: Linux charles-pc 2.6.31-14-generic #48-Ubuntu SMP Fri Oct 16 14:05:01 UTC 2009 x86_64 "
        "GNU/Linux\n\n"
        f"{SEP}\n\n/var/log/nvidia-installer.log does not exist\n\n"
        f"{SEP}\n\n/proc/driver/nvidia/version\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  185.18.36  "
        "Fri Aug 14 17:18:04 PDT 2009\nGCC version:  gcc version 4.4.1 (Ubuntu 4.4.1-4ubuntu8)\n\n"
        f"{SEP}\n\n/proc/driver/nvidia/cards/0\nModel: \t\t GeForce 7300 SE/7200 GS\nIRQ:   \t\t 16\n"
        "Video BIOS: \t 05.72.22.81.00\nCard Type: \t PCI-E\nBus Location: \t 02.00.0\n\n"
        f"{SEP}\n\n/var/log/messages\nOct 27 14:20:01 charles-pc kernel: [  812.112233] NVRM: "
        "Xid (0000:02:00): 13, 0001 00000000 00008297 00001b0c 00000000 00000000\n"
    )
    snap = explain_text(text, "forum post").snapshot
    assert snap.driver_version == "185.18.36" and snap.hostname == "charles-pc"
    assert [(g.name, g.pci_bus_id) for g in snap.gpus] == [("GeForce 7300 SE/7200 GS", "0000:02:00.0")]
    assert [e.xid for e in snap.kernel_events if e.kind == "xid"] == [13]


@pytest.mark.parametrize(
    "skip",
    [
        "Skipping nvidia-smi output (nvidia-smi not found)",
        "Skipping: nvidia-smi output\nnvidia-smi not found",
        "Skipping: nvidia-smi, vulkaninfo etc. Commands\nSkipping due to --safe-mode-argument",
    ],
)
def test_what_the_script_could_not_collect_is_said(tmp_path: Path, skip: str) -> None:
    p = tmp_path / "nvidia-bug-report.log"
    p.write_text(_report("dmesg:\n\n[    0.000000] Linux version 6.8.0", skip))
    snap = load_evidence([str(p)])
    assert any("nvidia-smi" in s.what for s in snap.skipped)
    report = diagnose(snap)
    partial = [f for f in report.findings if f.code == "evidence.partial"]
    assert partial and "no nvidia-smi output" in " ".join(partial[0].evidence)


def test_safe_mode_line_inside_the_previous_section(tmp_path: Path) -> None:
    """440-era --safe-mode prints its skip line inside the section before it, with no separator."""
    p = tmp_path / "nvidia-bug-report.log"
    drm = "*** ls: lrwxrwxrwx 1 root root 0 /sys/class/drm/card0/device/driver\n\n"
    skip = "Skipping nvidia-smi, nvidia-debugdump, and vulkaninfo due to --safe-mode argument."
    p.write_text(_report(drm + skip))
    assert bugreport.parse_path(str(p)).not_collected[0][0] == "nvidia-smi"


def test_report_cut_before_its_epilogue_is_read_in_part(tmp_path: Path) -> None:
    p = tmp_path / "nvidia-bug-report.log"
    p.write_text(
        _report("dmesg:\n\n[    1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54", epilogue=False)
    )
    report = diagnose(load_evidence([str(p)]))
    (partial,) = [f for f in report.findings if f.code == "evidence.partial"]
    assert partial.severity == Severity.INFO and "epilogue" in " ".join(partial.evidence)


def test_nvidia_smi_section_with_nvlink_commands(tmp_path: Path) -> None:
    """2021+: --query, --query --unit and nvlink commands share one section; each is read by its reader."""
    after = REAL.read_text().split("/sbin/nvidia-smi --query\n", 1)[1]
    smi = after.split("/sbin/nvidia-smi --query --unit", 1)[0]
    p = tmp_path / "nvidia-bug-report.log"
    p.write_text(_report(
        "/usr/bin/nvidia-smi --query\n" + smi
        + "/usr/bin/nvidia-smi nvlink --status\n\nGPU 0: NVIDIA GeForce RTX 3060 Laptop GPU "
        "(UUID: GPU-fceee73c-fd00-9cc3-fead-6d6ab3715614)\n\t Link 0: <inactive>\n"
    ))
    rep = bugreport.parse_path(str(p))
    assert [d.kind for d in rep.smi] == ["smi_text", "smi_nvlink"]
    assert rep.smi[0].gpus[0].name == "NVIDIA GeForce RTX 3060 Laptop GPU"


def test_multi_megabyte_report_streams_fast(tmp_path: Path) -> None:
    """A report with a 200,000-line dmesg (~15 MB) is parsed in well under the time a user waits."""
    dmesg = "".join(
        f"[{i:>6}.000000] usb 1-1: new high-speed USB device number {i % 100}\n" for i in range(200_000)
    )
    p = tmp_path / "nvidia-bug-report.log"
    xid = "[200000.1] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (0x1)"
    p.write_text(_report("dmesg:\n\n" + dmesg + xid))
    t0 = time.process_time()
    rep = bugreport.parse_path(str(p))
    cpu = time.process_time() - t0
    assert [e.xid for e in rep.kernel_events if e.kind == "xid"] == [48]
    assert cpu < 5.0, cpu  # measured ~1 s of CPU on the 2-core CI machine


def test_no_devices_found_while_lspci_lists_the_gpu(tmp_path: Path) -> None:
    """lspci shows a V100 bound to nvidia, nvidia-smi says "No devices were found": not HEALTHY."""
    p = tmp_path / "nvidia-bug-report.log"
    p.write_text(_report(
        '/usr/bin/lspci -d "10de:*" -v -xxx\n\n'
        "3b:00.0 3D controller: NVIDIA Corporation GV100GL [Tesla V100 PCIe 32GB] (rev a1)\n"
        "\tSubsystem: NVIDIA Corporation Device 124a\n\tKernel driver in use: nvidia\n"
        "00: de 10 b6 1d 06 04 10 00 a1 00 02 03 00 00 00 00",
        "/usr/bin/lspci -nn\n\n"
        "3b:00.0 3D controller [0302]: NVIDIA Corporation GV100GL [Tesla V100 PCIe 32GB] [10de:1db6] "
        "(rev a1)",
        "/usr/bin/nvidia-smi --query\n\nNo devices were found",
    ))
    rep = bugreport.parse_path(str(p))
    assert [d.errors for d in rep.smi] == [["No devices were found"]]  # read once, by one reader
    snap = load_evidence([str(p)])
    assert [g.pci_bus_id for g in snap.gpus] == ["0000:3b:00.0"]
    assert "gpu.none_detected" in _warn_codes(p)


def test_a_message_in_several_kernel_sections_counts_once(tmp_path: Path) -> None:
    """dmesg, the kern.log grep and the journal grep hold the same two Xid 13 lines of two programs: two
    events (one copy each), so the application rule does not read them as a GPU that repeats it."""
    x1 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x504648=0x2"
    x2 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4343, name=julia, Graphics Exception: ESR 0x504648=0x2"
    p = tmp_path / "nvidia-bug-report.log"
    p.write_text(_report(
        "Scanning kernel log files for NVIDIA kernel messages:\n\n  /var/log/kern.log:\n"
        f"Jun  1 09:10:00 gpu-node-7 kernel: [  600.100000] {x1}\n"
        f"Jun  1 09:11:00 gpu-node-7 kernel: [  660.200000] {x2}\n\n  journalctl -b -0:\n"
        f"Jun 01 09:10:00 gpu-node-7 kernel: {x1}\nJun 01 09:11:00 gpu-node-7 kernel: {x2}",
        f"dmesg:\n\n[  600.100000] {x1}\n[  660.200000] {x2}",
    ))
    rep = bugreport.parse_path(str(p))
    xids = [e for e in rep.kernel_events if e.kind == "xid"]
    assert [(e.pid, "dmesg" in (e.origin or "")) for e in xids] == [(4242, True), (4343, True)]
    (f,) = [f for f in diagnose(load_evidence([str(p)])).findings if f.code == "xid.13"]
    assert not f.data.get("suspect_hardware")


def test_an_earlier_boots_copy_is_its_own_event(tmp_path: Path) -> None:
    """The same Xid 79 text now (dmesg) and before the last reboot (journalctl -b -1) is two events; the
    earlier one is marked as such."""
    x = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
    p = tmp_path / "nvidia-bug-report.log"
    p.write_text(_report(
        "Scanning kernel log files for NVIDIA kernel messages:\n\n  journalctl -b -0:\n"
        f"Jun 02 10:00:00 gpu-node-7 kernel: {x}\n\n  journalctl -b -1:\n"
        f"Jun 01 08:00:00 gpu-node-7 kernel: {x}",
        f"dmesg:\n\n[ 3600.000000] {x}",
    ))
    evs = [e for e in bugreport.parse_path(str(p)).kernel_events if e.xid == 79]
    assert sorted(bool(e.detail.get("previous_boot")) for e in evs) == [False, True]


def test_fabric_manager_sections_meet_the_evidence_signatures(tmp_path: Path) -> None:
    """HGX reports append /var/log/fabricmanager.log and `systemctl status nvidia-fabricmanager`: a Fabric
    Manager failure there is found by both paths (it was a section streamed past)."""
    fm = ("Nov 15 14:15:47 leon-NF5468M6 nv-fabricmanager[4177]: request to query NVSwitch device "
          "information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]")
    p = tmp_path / "nvidia-bug-report.log"
    text = _report("/usr/bin/systemctl status nvidia-fabricmanager.service\n"
                   "● nvidia-fabricmanager.service - NVIDIA fabric manager service\n" + fm)
    p.write_text(text)
    assert "driver.fabric_manager_missing" in {f.code for f in diagnose(load_evidence([str(p)])).findings}
    assert "driver.fabric_manager_missing" in {f.code for f in explain_text(text, "paste").findings}
