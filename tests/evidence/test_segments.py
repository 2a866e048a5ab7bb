"""The segmenting reader: nothing dropped silently, whatever the mixture; doctor --from == explain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclinic.diagnose import diagnose
from gpuclinic.errors import InputError
from gpuclinic.explain import explain_text, read_input
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.xid import all_xids
from gpuclinic.sources.evidence import load_evidence, snapshot_from_text
from gpuclinic.sources.segments import classify

FX = Path(__file__).resolve().parents[1] / "fixtures"
EV = FX / "evidence"
SIGS = load_data("evidence_signatures.json")["signatures"]

# text of other formats a line may be planted in
HOSTS = {
    "smi_text": (EV / "a100-sxm4-80gb-510-remap-pending.txt").read_text(),
    "smi_table": (EV / "table-a40-550.txt").read_text(),
    "smi_xml": (EV / "tesla-p100-510.xml").read_text(),
    "smi_csv": (EV / "query-gpu-csv-rtx2060-460.csv").read_text(),
    "lspci": (EV / "lspci-nn-a100x8-azure.txt").read_text(),
    "prose": "Hi, our training job died last night.\nHere is what we saw:\n\nThanks for any help!\n",
    "k8s": "I0109 07:18:25.572506       1 device.go:104] device NVIDIA is healthy on this node\n" * 5,
}
# how kernel lines arrive: dmesg, -T, syslog, journal short-iso, kmsg, dmesg -x, <prio>, Kubernetes CRI
# wrapper, bare
PREFIXES = [
    "[ 1234.567890] ",
    "[Mon Mar  4 10:11:12 2024] ",
    "Mar  4 10:11:12 node1 kernel: ",
    "2024-03-04T10:11:12.123456+00:00 node1 kernel: ",
    "6,1234,5678,-;",
    "kern  :warn  : ",
    "<4>",
    "2024-03-04T10:11:12.123456789Z stdout F [ 1234.5] ",
    "",
]


def _plant(host: str, line: str, at: float) -> str:
    lines = host.splitlines()
    i = int(at * len(lines))
    return "\n".join([*lines[:i], line, *lines[i:]]) + "\n"


def _codes(text: str) -> set[str]:
    return {f.code for f in diagnose(snapshot_from_text(text, "planted")).findings}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SIGS), st.sampled_from(sorted(HOSTS)), st.floats(min_value=0, max_value=1))
def test_every_signature_planted_anywhere_is_found(sig: dict[str, object], host: str, at: float) -> None:
    text = _plant(HOSTS[host], str(sig["example"]), at)
    snap = snapshot_from_text(text, "planted")
    if "example_xid" in sig:
        assert sig["example_xid"] in {e.xid for e in snap.kernel_events if e.kind == "xid"}, (sig["id"], host)
    elif "example_code" in sig:  # a hardware event line: an event of the room facts
        kinds = {f"room.sel.{e.kind}" for e in (snap.room.events if snap.room else [])}
        assert sig["example_code"] in kinds, (sig["id"], host)
    else:
        assert sig["code"] in {s.code for s in snap.signals}, (sig["id"], host)


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_every_signature_example_in_every_format(host: str) -> None:
    for sig in SIGS:
        codes = _codes(_plant(HOSTS[host], str(sig["example"]), 0.5))
        want = f"xid.{sig['example_xid']}" if "example_xid" in sig else sig.get("example_code") or sig["code"]
        assert want in codes, (sig["id"], host, sorted(codes))


def test_every_catalog_xid_planted_in_a_q_dump_is_found() -> None:
    host = HOSTS["smi_text"]
    for i, x in enumerate(all_xids()):
        prefix = PREFIXES[i % len(PREFIXES)]
        line = f"{prefix}NVRM: Xid (PCI:0000:3b:00): {x.xid}, pid=4242, name=python3, {x.name}"
        codes = _codes(_plant(host, line, (i % 10) / 10))
        assert f"xid.{x.xid}" in codes, (x.xid, prefix, sorted(codes))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([x.xid for x in all_xids()]),
    st.sampled_from(PREFIXES),
    st.sampled_from(sorted(HOSTS)),
    st.floats(min_value=0, max_value=1),
)
def test_catalog_xid_any_prefix_any_host(xid: int, prefix: str, host: str, at: float) -> None:
    text = _plant(HOSTS[host], f"{prefix}NVRM: Xid (PCI:0000:3b:00): {xid}, pid=1, name=x, planted", at)
    snap = snapshot_from_text(text, "planted")
    assert xid in {e.xid for e in snap.kernel_events if e.kind == "xid"}


def test_planted_line_does_not_cut_the_dump() -> None:
    """A kernel line inside an nvidia-smi -q dump is read, and the dump around it still is."""
    whole = snapshot_from_text(HOSTS["smi_text"], "q")
    planted = snapshot_from_text(
        _plant(HOSTS["smi_text"], "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE", 0.5), "q"
    )
    assert [g.uuid for g in planted.gpus] == [g.uuid for g in whole.gpus]
    assert [g.retired_pages_pending for g in planted.gpus] == [g.retired_pages_pending for g in whole.gpus]
    assert 48 in {e.xid for e in planted.kernel_events}


def test_input_record_segments_readers_and_unread() -> None:
    text = (
        (EV / "table-a40-550.txt").read_text()
        + "some words nobody parses\n"
        + "[ 8.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    )
    snap = snapshot_from_text(text, "paste")
    (rec,) = snap.input_records
    kinds = [s.kind for s in rec.segments]
    assert kinds[0] == "smi_table" and kinds[-1] == "kernel_log"
    assert "kernellog" in rec.readers and "smi_table" in rec.readers
    assert [line for _, line in rec.unread] == ["some words nobody parses"]
    assert rec.unclaimed == 1


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("[ 12.3] NVRM: GPU at PCI:0000:3b:00: GPU-1", "kernel_log"),
        ("               NVRM: nvidia-bug-report.sh as root to collect this data before", "kernel_log"),
        ('{"_TRANSPORT":"kernel","MESSAGE":"NVRM: Xid (PCI:0000:3b:00): 79, x"}', "kernel_log"),
        ("Failed to initialize NVML: Driver/library version mismatch", "smi_error"),
        ("user@host:~$ nvidia-smi", "prompt"),
        ('{"level":"info","msg":"x"}', "json"),
        ("    Product Name                          : NVIDIA A100-SXM4-80GB", "other"),
        ("| N/A   34C    P0    61W / 400W |      0MiB / 81920MiB |      0%      Default |", "other"),
    ],
)
def test_line_classes(line: str, kind: str) -> None:
    assert classify(line) == kind


PARITY = sorted(
    [p for p in (EV / "issue10").iterdir() if p.suffix != ".md"]
    + list((FX / "kernel_log").glob("*.log"))
    + [
        EV / n
        for n in (
            "table-handle-gpu-lost.txt",
            "table-err-gsp-timeout-a100.txt",
            "a100-sxm4-80gb-510-remap-pending.txt",
            "table-a40-550.txt",
            "tesla-p100-510.xml",
        )
    ]
)


@pytest.mark.parametrize("path", PARITY, ids=lambda p: p.name)
def test_doctor_from_and_explain_give_the_same_codes(path: Path) -> None:
    doctor = {f.code for f in diagnose(load_evidence([str(path)])).findings}
    text, origin, _ = read_input(str(path))
    explain = {f.code for f in explain_text(text, origin).findings} - {"explain.no_match"}
    assert doctor == explain


def test_show_unread_prints_segments_and_unread_lines() -> None:
    path = EV / "issue10" / "xid79-crashdump-prompt.txt"
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--from", str(path), "--show-unread", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    report = json.loads(r.stdout)
    (rec,) = report["facts"]["input_records"]
    assert rec["unclaimed"] == 2 and {s["kind"] for s in rec["segments"]} >= {
        "kernel_log",
        "smi_error",
        "prompt",
    }
    assert "unread lines: 2" in r.stderr and "user@gpu-node-07:~$ nvidia-smi" in r.stderr


def test_show_unread_needs_from() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--show-unread"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 64 and "--show-unread needs --from" in r.stderr


def test_gz_kernel_log_is_segmented_and_large_logs_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    from gpuclinic.sources import evidence

    text = (
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
        "Nov 15 14:15:47 h nv-fabricmanager[4177]: request to query NVSwitch device information from "
        "NVSwitch "
        "driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n"
    )
    p = tmp_path / "kern.log.gz"
    p.write_bytes(gzip.compress(text.encode()))
    snap = load_evidence([str(p)])
    assert 79 in {e.xid for e in snap.kernel_events}
    assert "driver.fabric_manager_missing" in {s.code for s in snap.signals}
    assert not snap.input_records[0].streamed
    monkeypatch.setattr(evidence, "SEGMENT_LIMIT", 64)
    snap = load_evidence([str(p)])
    assert snap.input_records[0].streamed and 79 in {e.xid for e in snap.kernel_events}


def test_bug_report_sections_are_its_segments() -> None:
    snap = load_evidence([str(EV / "nvidia-bug-report-excerpt.log.gz")])
    (rec,) = snap.input_records
    assert rec.kind == "bugreport" and rec.segments
    read = {s.readers[0] for s in rec.segments if s.readers}
    assert {"kernel_log", "nvidia-smi", "lspci"} <= read
    assert rec.unclaimed == sum(1 for s in rec.segments if not s.readers)


CORPUS = FX / "realworld" / "corpus"
_LABELS = (
    json.loads((CORPUS / "labels.json").read_text())["files"] if (CORPUS / "labels.json").exists() else {}
)
_PROSE_KINDS = {"traceback", "container", "smi_error", "service_log", "kernel_log", "device_plugin", "mixed"}


def _found(want: str, got: set[str]) -> bool:
    return any(alt in got or f"error.{alt}" in got for alt in want.split("|"))


def _doctor_codes(text: str) -> set[str]:
    from gpuclinic.sources import evidence
    from gpuclinic.sources.evidence import new_snapshot

    snap = new_snapshot()
    evidence.add_text(snap, text, "planted")
    evidence.finish(snap)
    return {f.code for f in diagnose(snap).findings}


# (AER findings are left out: beside another node's GPU list, an AER on a bridge above none of its GPUs is
# rightly not that node's problem.)
@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n, v in _LABELS.items()
        if "/" not in n
        and v.get("codes")
        and v.get("kind") in _PROSE_KINDS
        and not any(c.startswith("pcie.aer") for c in v["codes"])
    ),
)
def test_labelled_error_text_planted_in_a_dump_is_still_found(name: str) -> None:
    """Every labelled real error text the reader finds on its own is still found inside an nvidia-smi dump
    (the explain error signatures, the fault signatures and the kernel-log parser, through doctor --from)."""
    text = (CORPUS / name).read_text(errors="replace")
    want = _LABELS[name]["codes"]
    try:
        alone = _doctor_codes(text)
    except InputError:
        alone = set()
    if not all(_found(w, alone) for w in want):
        pytest.skip(f"not found even alone (a known miss): {want}")
    host = HOSTS["smi_text"].splitlines()
    planted = "\n".join([*host[:40], text, *host[40:]])
    got = _doctor_codes(planted)
    assert all(_found(w, got) for w in want), (want, sorted(got))
