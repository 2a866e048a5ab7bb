"""Xid signature forms from real pastes: a JSON key ("xid":79, gpud/agent events) is an Xid; "xid":0 and
"Xid 0" are none (NVML's 'event without an Xid', gpud PR 164, read as a warning-level xid.0); the device
plugin's "...; marking device as unhealthy." keeps its GPU UUID without the ';' (akash support 244)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.errors import InputError
from gpuclinic.sources.evidence import load_evidence, snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _xids(text: str) -> list[int | None]:
    try:
        snap = snapshot_from_text(text, "t")
    except InputError:  # nothing in it was read: no Xid either
        return []
    return [e.xid for e in snap.kernel_events if e.kind == "xid"]


def test_json_xid_keys_are_xids_and_zero_is_none() -> None:
    assert _xids('{"time":"2024-11-20T04:10:23Z","data_source":"dmesg","xid":79}\n') == [79]
    assert _xids('{"data":"{\\"xid\\":119,\\"data_source\\":\\"dmesg\\"}"}\n') == [119]
    assert _xids('{"device_uuid":"GPU-e3038df4","xid":0,"x":1}\nXid 0 seen\n') == []


def test_gpud_logs() -> None:
    healthy = load_evidence([str(CORPUS / "gpud_events_json_xid119_dmesg_gpud_192.txt")])
    assert {f.code for f in diagnose(healthy).findings} >= {"xid.119"}
    text = (CORPUS / "gpud_nvml_event_xid0_clock_json_gpud_164.txt").read_text()
    assert _xids(text) == []


def test_device_plugin_semicolon_form_keeps_the_uuid() -> None:
    snap = load_evidence([str(CORPUS / "device_plugin_xid94_semicolon_cri_akash_244.txt")])
    got = {(e.xid, e.detail.get("uuid")) for e in snap.kernel_events if e.kind == "xid"}
    assert got == {(94, "GPU-3b6ec030-5adc-1847-e155-79f635584b4e")}
