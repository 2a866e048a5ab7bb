"""Host faults in a kernel log: CPU lockups / RCU stalls and disk I/O errors are findings of their own
(host.cpu_lockup, host.storage_error), by doctor --from and explain alike; the boot-time I/O errors every VM
logs for its empty CD drive, floppy or loop devices are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import evidence

LOCKUP = "[Sat Apr  3 05:23:42 2021] watchdog: BUG: soft lockup - CPU#7 stuck for 23s! [pytest:25222]\n"
RCU = "Nov 30 21:48:18 powertux kernel: rcu: INFO: rcu_sched self-detected stall on CPU\n"
HARD = "[ 1200.100000] NMI watchdog: Watchdog detected hard LOCKUP on cpu 3\n"
BLK = (
    "[  531.168257] blk_update_request: I/O error, dev nvme0n1, sector 100492368 op 0x1:(WRITE)"
    " flags 0x104000 phys_seg 16 prio class 0\n"
)
NEW_IO = "[ 4730.850358] I/O error, dev nvme0n1, sector 167431176 op 0x1:(WRITE) flags 0x4000 phys_seg 128\n"
JOURNAL = "[ 4730.855458] Aborting journal on device nvme0n1p1-8.\n"
NVME_TIMEOUT = "[  519.201025] nvme nvme0: I/O 39 QID 3 timeout, aborting\n"
NVME_TIMEOUT_OP = "[53111.370408] nvme nvme0: I/O 309 (Write) QID 1 timeout, aborting  \n"
XFS = '[ 8810.000001] XFS (md0): metadata I/O error in "xfs_buf_iodone_callback_error" at daddr 0x2 len 1\n'
VM_BOOT_NOISE = (
    "[    3.101234] blk_update_request: I/O error, dev fd0, sector 0 op 0x0:(READ) flags 0x0\n"
    "[    3.201234] Buffer I/O error on dev fd0, logical block 0, async page read\n"
    "[    4.301234] blk_update_request: I/O error, dev sr0, sector 0 op 0x0:(READ) flags 0x80700\n"
    "[    5.401234] I/O error, dev loop3, sector 0 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 0\n"
)


def _codes_both_ways(tmp_path: Path, text: str) -> tuple[dict[str, str], dict[str, str]]:
    p = tmp_path / "kern.log"
    p.write_text(text)
    doctor = {f.code: f.severity.name.lower() for f in diagnose(evidence.load_evidence([str(p)])).findings}
    explain = {f.code: f.severity.name.lower() for f in explain_text(text, str(p)).findings}
    return doctor, explain


@pytest.mark.parametrize("line", [LOCKUP, RCU, HARD])
def test_lockups_and_rcu_stalls_are_cpu_lockup(tmp_path: Path, line: str) -> None:
    for codes in _codes_both_ways(tmp_path, line):
        assert codes.get("host.cpu_lockup") == "warning", codes


@pytest.mark.parametrize("line", [BLK, NEW_IO, JOURNAL, NVME_TIMEOUT, NVME_TIMEOUT_OP, XFS])
def test_disk_errors_are_storage_error(tmp_path: Path, line: str) -> None:
    for codes in _codes_both_ways(tmp_path, line):
        assert codes.get("host.storage_error") == "warning", codes


def test_one_storage_finding_for_a_burst_of_lines(tmp_path: Path) -> None:
    p = tmp_path / "kern.log"
    p.write_text(NVME_TIMEOUT + BLK * 5 + JOURNAL)
    found = [f for f in diagnose(evidence.load_evidence([str(p)])).findings if f.code == "host.storage_error"]
    assert len(found) == 1
    assert any("more line" in e for e in found[0].evidence), found[0].evidence


def test_vm_boot_noise_of_floppy_cdrom_and_loop_devices_is_not_a_fault(tmp_path: Path) -> None:
    for codes in _codes_both_ways(tmp_path, VM_BOOT_NOISE):
        assert "host.storage_error" not in codes, codes


@pytest.mark.parametrize(
    "line",
    [
        "[  721.028170] INFO: task nvc:[driver]:5403 blocked for more than 120 seconds.\n",
        "[  +0.000049] task:python3.11      state:D stack:    0 pid:15277 ppid: 15257 flags:0x00000002\n",
    ],
)
def test_hung_task_with_a_colon_in_its_name_and_a_bare_state_d_dump(tmp_path: Path, line: str) -> None:
    for codes in _codes_both_ways(tmp_path, line):
        assert codes.get("host.hung_task") == "warning", codes


def test_a_sleeping_task_in_a_dump_is_not_hung(tmp_path: Path) -> None:
    line = "[  +0.000049] task:python3.11      state:S stack:    0 pid:15277 ppid: 15257 flags:0x00000002\n"
    for codes in _codes_both_ways(tmp_path, line):
        assert "host.hung_task" not in codes, codes
