"""load_evidence / snapshot_from_text: detection by content, merging, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclinic.errors import InputError
from gpuclinic.sources.evidence import load_evidence, snapshot_from_text

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuclinic", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))


def test_detected_by_content_not_name(tmp_path: Path) -> None:
    # misleading names: content decides
    a = tmp_path / "notes.log"
    shutil.copy(FX / "tesla-p100-510.xml", a)
    b = tmp_path / "dump.xml"
    shutil.copy(FX / "table-a40-550.txt", b)
    snap = load_evidence([str(a), str(b)])
    assert snap.origin == "evidence" and snap.nvml_available is True
    assert {g.name for g in snap.gpus} == {"Tesla P100-PCIE-16GB", "NVIDIA A40"}
    assert snap.inputs == [str(a), str(b)]
    assert snap.driver_version == "510.47.03"


def test_merge_by_bus_id_keeps_table_index_and_adds_q_details(tmp_path: Path) -> None:
    table = tmp_path / "t.txt"
    table.write_text((FX / "table-a40-550.txt").read_text())
    q = tmp_path / "q.txt"
    q.write_text(
        "==============NVSMI LOG==============\n\nDriver Version : 550.127.05\n\n"
        "GPU 00000000:53:00.0\n    Product Name : NVIDIA A40\n    GPU UUID : GPU-aaaa\n"
        "    Remapped Rows\n        Correctable Error : 0\n        Uncorrectable Error : 2\n"
        "        Pending : Yes\n        Remapping Failure Occurred : No\n"
    )
    snap = load_evidence([str(table), str(q)])
    assert len(snap.gpus) == 4
    g = snap.gpu_by_bus_id("0000:53:00.0")
    assert g is not None and g.index == 2 and g.uuid == "GPU-aaaa" and g.remapped_rows_uncorrectable == 2
    assert g.temperature_c == 27


def test_directory_expands_and_unusable_file_is_skipped(tmp_path: Path) -> None:
    shutil.copy(FX / "tesla-p100-510.xml", tmp_path / "a.xml")
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 10)
    snap = load_evidence([str(tmp_path)])
    assert len(snap.gpus) == 1
    assert any("junk.bin" in s.what and "binary" in s.why for s in snap.skipped)


def test_only_unusable_input_is_one_line_input_error(tmp_path: Path) -> None:
    p = tmp_path / "readme.txt"
    p.write_text("hello world\nthis is not a GPU dump\n")
    with pytest.raises(InputError) as e:
        load_evidence([str(p)])
    msg = str(e.value)
    assert str(p) in msg and "expected" in msg and "\n" not in msg


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_evidence([str(tmp_path / "nope.txt")])


def test_snapshot_from_text_handle_error_records_smi_errors() -> None:
    snap = snapshot_from_text(
        "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot"
    )
    assert snap.software is not None
    assert snap.software.nvidia_smi_errors[0].startswith("Unable to determine the device handle")
    assert snap.gpus[0].lost and snap.gpus[0].pci_bus_id == "0000:02:00.0"


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        "latest "
        "NVIDIA driver is installed and running.",
        "Failed to initialize NVML: Driver/library version mismatch",
        "No devices were found",
    ],
)
def test_nvml_failure_statements(text: str) -> None:
    snap = snapshot_from_text(text)
    assert snap.nvml_available is False
    assert snap.software is not None and snap.software.nvidia_smi_errors == [text]
    assert any("NVML" in s.what for s in snap.skipped)


def test_unrecognised_text_raises() -> None:
    with pytest.raises(InputError, match="not recognised"):
        snapshot_from_text("just some words", "<paste>")


def test_snapshot_json_round_trip(tmp_path: Path) -> None:
    snap = load_evidence([str(FX / "a100-sxm4-80gb-510-remap-pending.txt")])
    p = tmp_path / "snap.json"
    p.write_text(snap.to_json())
    again = load_evidence([str(p)])
    assert again.gpus[0].remapped_rows_pending is True and again.gpus[0].ecc_volatile_corrected == 177


def test_cli_doctor_from_unrecognised_is_one_line_exit_64(tmp_path: Path) -> None:
    p = tmp_path / "x.txt"
    p.write_bytes(b"\x00\x01\x02garbage" * 100)
    r = run_cli("doctor", "--from", str(p))
    assert r.returncode == 64  # EXIT_USAGE
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert str(p) in r.stderr


def test_cli_doctor_from_fixture_json() -> None:
    r = run_cli("doctor", "--json", "--from", str(FX / "tesla-p100-510.xml"))
    assert r.returncode in (0, 1, 2), r.stderr
    d = json.loads(r.stdout)
    assert d["facts"]["origin"] == "evidence"
    assert d["facts"]["gpus"][0]["name"] == "Tesla P100-PCIE-16GB"


def _fake_kernel_log(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types
    from collections.abc import Iterable, Iterator

    from gpuclinic.facts.kernel import KernelEvent

    def parse_lines(lines: Iterable[str], origin: str | None = None) -> Iterator[KernelEvent]:
        for ln in lines:
            if "NVRM: Xid" in ln:
                yield KernelEvent(kind="xid", line=ln, xid=79, origin=origin)

    fake = types.ModuleType("gpuclinic.sources.kernellog")
    fake.parse_lines = parse_lines  # type: ignore[attr-defined]
    fake.looks_like_kernel_log = lambda s: "kernel:" in s  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gpuclinic.sources.kernellog", fake)


def test_mixed_paste_table_and_dmesg(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_kernel_log(monkeypatch)
    text = (FX / "table-err-gsp-timeout-a100.txt").read_text() + (
        "Sep 19 16:18:04 node kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
    )
    snap = snapshot_from_text(text, "<paste>")
    assert [g.index for g in snap.gpus] == [4, 5] and snap.gpus[1].lost
    assert snap.kernel_log_read and [e.xid for e in snap.kernel_events] == [79]


def test_syslog_quoting_smi_error_stays_a_kernel_log(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_kernel_log(monkeypatch)
    text = (
        "Mar  1 10:00:00 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
        "Mar  1 10:00:05 node collector[99]: No devices were found\n"
    )
    snap = snapshot_from_text(text)
    assert snap.kernel_log_read and snap.kernel_events[0].xid == 79
    assert snap.software is not None and snap.software.nvidia_smi_errors == ["No devices were found"]


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("Wed Jun  7 19:32:16 2023", "2023-06-07T19:32:16"),
        ("Thu Oct 27 08:50:11 PM -03 2022", "2022-10-27T20:50:11-03:00"),
        ("mar 13 set 2011, 23.11.55, CEST", None),
    ],
)
def test_time_stamps_become_iso(text: str, iso: str | None) -> None:
    from gpuclinic.sources.smi_common import iso_time

    assert iso_time(text) == iso


def test_taken_at_from_dump_timestamp() -> None:
    snap = load_evidence([str(FX / "a100-sxm4-80gb-510-remap-pending.txt")])
    assert snap.taken_at == "2023-06-07T19:32:16"


def _kern_lines() -> str:
    text = (FX / "nvidia-bug-report-excerpt.log").read_text()
    start = text.index("*** /var/log/kern.log\n") + len("*** /var/log/kern.log\n")
    return text[start : text.index("\n\n____", start)] + "\n"


def test_same_log_given_twice_counts_once(tmp_path: Path) -> None:
    a, b = tmp_path / "dmesg.txt", tmp_path / "copy-of-dmesg.txt"
    a.write_text(_kern_lines())
    b.write_text(_kern_lines())
    once = load_evidence([str(a)])
    twice = load_evidence([str(a), str(b)])
    assert [e.xid for e in once.kernel_events if e.kind == "xid"] == [79]
    assert [(e.kind, e.line) for e in twice.kernel_events] == [(e.kind, e.line) for e in once.kernel_events]


def test_extracted_capture_directory_is_one_input(tmp_path: Path) -> None:
    import tarfile

    from gpuclinic.sources import capture as cap

    snap = load_evidence([str(FX / "tesla-p100-510.xml")])
    bundle = cap.Bundle(snapshot=snap, raw=[cap.RawOutput("raw/dmesg.txt", ["dmesg"], _kern_lines())])
    tgz = tmp_path / "c.tar.gz"
    cap.write_bundle(cap.render_files(bundle, redact=False), str(tgz))
    out = tmp_path / "extracted"
    with tarfile.open(tgz) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(out, filter="data")
        else:  # pragma: no cover - Python without extraction filters; our own bundle is trusted here
            tf.extractall(out)
    from_tar = load_evidence([str(tgz)])
    from_dir = load_evidence([str(tmp_path / "extracted")])
    assert from_dir.inputs == [str(out)]
    assert [g.name for g in from_dir.gpus] == [g.name for g in from_tar.gpus] == ["Tesla P100-PCIE-16GB"]
    assert [e.xid for e in from_dir.kernel_events if e.kind == "xid"] == [79]
    assert not [s for s in from_dir.skipped if "manifest" in s.what]


def test_windows_utf16_dump_is_read(tmp_path: Path) -> None:
    p = tmp_path / "out.txt"  # what PowerShell's `nvidia-smi -q > out.txt` writes
    p.write_bytes(
        b"\xff\xfe"
        + (FX / "a10-535-remap-pending-full.txt").read_text().replace("\n", "\r\n").encode("utf-16-le")
    )
    q = tmp_path / "nobom.txt"
    q.write_bytes((FX / "table-a40-550.txt").read_text().encode("utf-16-le"))
    snap = load_evidence([str(p), str(q)])
    assert [g.name for g in snap.gpus][:1] == ["NVIDIA A10"] and len(snap.gpus) == 5
    assert snap.gpus[0].remapped_rows_uncorrectable == 4


def test_cli_from_stdin() -> None:
    text = (FX / "a10-535-remap-pending-full.txt").read_text()
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--json", "--from", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    assert d["facts"]["inputs"] == ["<stdin>"] and [f["code"] for f in d["findings"]] == [
        "memory.row_remap_pending"
    ]
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--from", "-"],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 64 and r.stderr.startswith("gpuclinic: error: <stdin>: not recognised")
