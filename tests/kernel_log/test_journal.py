"""journalctl record forms a line reader cannot use (json-pretty, export, verbose, byte-array MESSAGE):
unfolded into one-line JSON at the MESSAGE line, read with their time, line numbers kept."""

from __future__ import annotations

import json
from pathlib import Path

from gpuclinic.sources import evidence
from gpuclinic.sources.kernellog.journal import unfold

XID48 = (
    "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, An uncorrectable double bit error (DBE) has been "
    "detected on GPU in the framebuffer at partition 1, subpartition 0."
)
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def _events(tmp_path: Path, text: str) -> list[tuple[str, str | None, int | None, str | None]]:
    p = tmp_path / "j.txt"
    p.write_text(text)
    snap = evidence.load_evidence([str(p)])
    return [(e.kind, e.time, e.lineno, e.message) for e in snap.kernel_events]


def test_json_pretty_record_is_read_with_its_time_at_the_message_line(tmp_path: Path) -> None:
    rec = {"__REALTIME_TIMESTAMP": "1601471260802301", "_TRANSPORT": "kernel", "PRIORITY": "4",
           "MESSAGE": XID79, "_HOSTNAME": "gpu1"}
    text = json.dumps(rec, indent=8) + "\n"
    evs = _events(tmp_path, text)
    assert [(k, t, n) for k, t, n, _ in evs] == [("xid", "2020-09-30T13:07:40.802301+00:00", 5)]
    assert evs[0][3] == XID79


def test_byte_array_message_is_decoded_one_line_and_pretty(tmp_path: Path) -> None:
    raw = list(XID48.encode()) + [0xFF]  # journald stores a message with an invalid byte as a byte list
    one = json.dumps({"__REALTIME_TIMESTAMP": "1601471260802301", "_TRANSPORT": "kernel", "MESSAGE": raw})
    pretty = json.dumps({"_TRANSPORT": "kernel", "MESSAGE": raw}, indent=8)
    evs = _events(tmp_path, one + "\n" + pretty + "\n")
    assert [(k, n) for k, _, n, _ in evs] == [("xid", 1), ("xid", 4)]
    assert all((m or "").startswith("NVRM: Xid (PCI:0000:3b:00): 48") for *_, m in evs)


def test_export_and_verbose_records(tmp_path: Path) -> None:
    text = (
        "__CURSOR=s=abc;i=1\n__REALTIME_TIMESTAMP=1601471260802301\n_TRANSPORT=kernel\n"
        f"MESSAGE={XID79}\n_HOSTNAME=gpu1\n\n"
        "Mon 2024-03-04 10:11:12.123456 UTC [s=abc;i=2]\n    _TRANSPORT=kernel\n    PRIORITY=3\n"
        "    MESSAGE=pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0\n"
    )
    evs = _events(tmp_path, text)
    assert [(k, n) for k, _, n, _ in evs] == [("xid", 4), ("aer", 10)]
    assert evs[0][1] == "2020-09-30T13:07:40.802301+00:00"
    assert evs[1][1] == "2024-03-04T10:11:12.123456+00:00"  # from the verbose record's head line


def test_verbose_head_with_a_named_local_zone_gives_no_time(tmp_path: Path) -> None:
    text = (
        "Mon 2024-03-04 10:11:12.123456 CET [s=abc;i=2]\n    _TRANSPORT=kernel\n"
        f"    MESSAGE={XID79}\n"
    )
    assert [(k, t, n) for k, t, n, _ in _events(tmp_path, text)] == [("xid", None, 3)]


def test_unfold_keeps_line_count_and_leaves_other_records_alone() -> None:
    user = json.dumps({"_TRANSPORT": "journal", "MESSAGE": "Started Session 1 of user root."}, indent=2)
    kern = json.dumps({"_TRANSPORT": "kernel", "MESSAGE": XID79}, indent=2)
    lines = (user + "\n" + kern + "\nPATH=/usr/bin\nplain line").splitlines()
    out = unfold(lines)
    assert len(out) == len(lines)
    assert out[:4] == lines[:4]  # not a kernel record: untouched
    assert out[-2:] == ["PATH=/usr/bin", "plain line"]
    rewritten = [ln for ln in out[4:-2] if ln]
    assert len(rewritten) == 1 and json.loads(rewritten[0]) == {"_TRANSPORT": "kernel", "MESSAGE": XID79}


def test_unfold_ignores_broken_and_unclosed_records() -> None:
    lines = ["{", '  "MESSAGE" : "NVRM: Xid (PCI:0000:3b:00): 79",', "{", '"a": 1', "}",
             '{"MESSAGE": [300, "x"]}']
    assert unfold(lines) == lines
    assert unfold(["no journal here"]) == ["no journal here"]


def test_short_unix_lines_keep_their_time(tmp_path: Path) -> None:
    text = (
        "1709547072.123456 gpu1 kernel: pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: "
        "0000:3b:00.0\n"
        f"1709547072.223456 gpu1 kernel: {XID79}\n"
    )
    evs = _events(tmp_path, text)
    assert [(k, t, n) for k, t, n, _ in evs] == [
        ("aer", "2024-03-04T10:11:12.123456+00:00", 1),
        ("xid", "2024-03-04T10:11:12.223456+00:00", 2),
    ]


def test_a_number_that_is_not_a_short_unix_stamp_is_left_alone() -> None:
    from gpuclinic.sources.kernellog.formats import split_prefix

    msg, p = split_prefix("1709547072.123456 not a kernel line")
    assert msg == "1709547072.123456 not a kernel line" and p.time is None


def test_verbose_head_with_a_numeric_offset_is_placed_in_utc(tmp_path: Path) -> None:
    text = f"Mon 2024-03-04 10:11:12 +0100 [s=abc;i=2]\n    _TRANSPORT=kernel\n    MESSAGE={XID79}\n"
    assert [(k, t, n) for k, t, n, _ in _events(tmp_path, text)] == [("xid", "2024-03-04T09:11:12+00:00", 3)]


def test_big_journal_export_with_byte_array_messages_keeps_every_xid(tmp_path: Path) -> None:
    """Past the whole-text search's size (segments.BIG lines) a byte-array MESSAGE holds no literal the
    search could find: the unfolded lines must still be read."""
    from gpuclinic.sources.segments import BIG

    raw = list(XID48.encode()) + [0xFF]
    filler = json.dumps({"_TRANSPORT": "kernel", "MESSAGE": "usb 1-1: new high-speed USB device"})
    rec = json.dumps({"__REALTIME_TIMESTAMP": "1601471260802301", "_TRANSPORT": "kernel", "MESSAGE": raw})
    lines = [filler] * BIG + [rec] + [filler] * 10
    evs = _events(tmp_path, "\n".join(lines) + "\n")
    assert [(k, n) for k, _, n, _ in evs] == [("xid", BIG + 1)]
