"""Real kernel-log excerpts from public reports (see tests/fixtures/kernel_log/SOURCES.md): exact parsed
fields and the findings a person would expect."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.checks import run_checks
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import remedy_computed
from gpuclinic.knowledge.runbooks import first_step
from gpuclinic.model import Finding, Severity
from gpuclinic.sources.kernellog import looks_like_kernel_log, scan_path

FX = Path(__file__).resolve().parents[1] / "fixtures" / "kernel_log"
KCHECKS = ["xid", "kernel.fallen_off_bus", "kernel.init_failed", "kernel.gsp", "kernel.nvlink", "kernel.aer",
           "kernel.pcie_limited", "kernel.module"]


def events(name: str) -> list[KernelEvent]:
    return scan_path(FX / name)


def xids(evs: list[KernelEvent]) -> list[tuple[int | None, str | None, int | None, str | None]]:
    return [(e.xid, e.pci_bus_id, e.pid, e.process) for e in evs if e.kind == "xid"]


def findings(name: str, gpus: list[GpuFacts] | None = None) -> dict[str, list[Finding]]:
    snap = Snapshot(origin="evidence", gpus=gpus or [], kernel_events=events(name), kernel_log_read=True)
    fs, _ = run_checks(snap, only=KCHECKS)
    out: dict[str, list[Finding]] = {}
    for f in fs:
        out.setdefault(f.code, []).append(f)
    return out


def sev(fs: dict[str, list[Finding]]) -> dict[str, str]:
    return {code: max(f.severity for f in lst).label for code, lst in fs.items()}


def test_every_fixture_is_listed_in_sources_and_sniffed() -> None:
    sources = (FX / "SOURCES.md").read_text()
    files = sorted(p.name for p in FX.glob("*.log"))
    assert len(files) >= 15
    for name in files:
        assert f"`{name}`" in sources, name
        assert looks_like_kernel_log((FX / name).read_text()), name
        assert events(name), name


def test_distinct_xids_covered() -> None:
    seen = {e.xid for p in FX.glob("*.log") for e in scan_path(p) if e.kind == "xid"}
    assert len(seen) >= 12, sorted(seen)  # type: ignore[type-var]


def test_nvsentinel_fallen_off_bus_without_xid() -> None:
    evs = events("nvsentinel-155-fallen-multiline.log")
    assert [(e.kind, e.pci_bus_id, e.uptime_s) for e in evs] == [
        ("fallen_off_bus", "0000:b3:00.0", 1843.308145),
        ("module", None, 1843.439662),
        ("module", None, 1843.439669),
    ]
    assert evs[0].detail["pci_id"] == "10de:26b5"
    assert evs[1].detail["module"] == "probe_failed" and evs[2].detail["driver_version"] == "570.158.01"
    fs = findings("nvsentinel-155-fallen-multiline.log")
    assert sev(fs) == {"gpu.fallen_off_bus": "critical", "driver.kernel_module": "critical"}
    assert "xid.79" not in fs


def test_gpud_ctime_xid13_and_109() -> None:
    evs = events("gpud-pr46-ctime-xid13-109.log")
    assert xids(evs) == [(13, "0000:cb:00.0", None, None)] * 3 + [
        (109, "0000:cb:00.0", 1797828, "pt_main_thread")
    ]
    assert [e.time for e in evs] == ["2024-08-30T11:43:09"] * 3 + ["2024-08-30T11:43:14"]
    fs = findings("gpud-pr46-ctime-xid13-109.log")
    assert sev(fs) == {"xid.13": "warning", "xid.109": "critical"}
    f13 = fs["xid.13"][0]
    assert f13.data["count"] == 3 and f13.data["first_time"] == "2024-08-30T11:43:09"
    assert f13.data["nvidia_investigatory_action"] == "WORKFLOW_XID_13"


def test_xid45_caused_by_nvlink5_on_four_gpus() -> None:
    evs = events("ogkm-1150-xid45-caused-by-nvlink5.log")
    assert [(e.pci_bus_id, e.pid, e.detail["caused_by_xid"]) for e in evs[:2]] == [
        ("0000:dc:00.0", 1818990, 149),
        ("0000:ed:00.0", 1818992, 145),
    ]
    fs = findings("ogkm-1150-xid45-caused-by-nvlink5.log")
    assert len(fs["xid.45"]) == 4
    # the 149/145 lines themselves are not in the paste: each finding carries its named cause's severity
    assert {f.severity for f in fs["xid.45"]} == {Severity.CRITICAL}
    assert sorted(tuple(f.data["cause_not_logged"]) for f in fs["xid.45"]) == [(145,), (145,), (145,), (149,)]
    assert sorted(tuple(f.data["caused_by"]) for f in fs["xid.45"]) == [(145,), (145,), (145,), (149,)]


def test_gpu_operator_syslog_dbe_and_init_failure() -> None:
    evs = events("gpu-operator-1146-syslog-rminit-xid48-64.log")
    assert xids(evs) == [(48, "0000:07:00.0", None, None), (64, "0000:07:00.0", None, None)]
    x48 = [e for e in evs if e.xid == 48][0]
    assert x48.uptime_s == 219.470994 and x48.detail["host"] == "worker4"
    assert x48.detail["time_text"] == "Dec  2 11:38:47" and x48.time and x48.time.endswith("-12-02T11:38:47")
    init = [e for e in evs if e.kind == "init_failed"]
    assert len(init) == 5 and {e.pci_bus_id for e in init} == {"0000:0a:00.0"}
    fs = findings("gpu-operator-1146-syslog-rminit-xid48-64.log")
    assert sev(fs) == {"xid.48": "critical", "xid.64": "critical", "gpu.init_failed": "critical"}
    assert fs["xid.48"][0].data["followed_by"] == [64]
    assert fs["gpu.init_failed"][0].data["rm_codes"] == ["0x24:0x72:1568"]


def test_init_failed_two_gpus_and_gpu_seen_by_nvml() -> None:
    fs = findings("gpu-operator-649-rminit-two-gpus.log")
    assert sorted(str(f.gpu.pci_bus_id) for f in fs["gpu.init_failed"] if f.gpu) == [
        "0000:04:01.0",
        "0000:04:02.0",
    ]
    assert {f.data["count"] for f in fs["gpu.init_failed"]} == {4}
    # the same log on a machine where NVML now sees GPU 04:01.0: a warning for it, still critical for the
    # other
    fs = findings(
        "gpu-operator-649-rminit-two-gpus.log", gpus=[GpuFacts(index=0, pci_bus_id="00000000:04:01.0")]
    )
    by = {f.gpu.pci_bus_id: f.severity for f in fs["gpu.init_failed"]}  # type: ignore[union-attr]
    assert by == {"0000:04:01.0": Severity.WARNING, "0000:04:02.0": Severity.CRITICAL}


def test_old_driver_formats() -> None:
    assert xids(events("bumblebee-677-xid32-31-old.log")) == [(32, "0000:01:00.0", None, None)] * 2 + [
        (31, "0000:01:00.0", None, None)
    ]
    assert xids(events("bumblebee-608-xid44-31-old.log")) == [
        (44, "0000:08:00.0", None, None),
        (31, "0000:08:00.0", None, None),
    ]
    fob = events("bumblebee-554-fallen-old-format.log")
    assert [(e.kind, e.pci_bus_id) for e in fob] == [("fallen_off_bus", "0000:01:00.0")] * 2
    assert sev(findings("bumblebee-554-fallen-old-format.log")) == {"gpu.fallen_off_bus": "critical"}
    rm = events("bumblebee-722-rminit-minor.log")
    assert [(e.kind, e.detail.get("code"), e.detail.get("minor")) for e in rm] == [
        ("init_failed", "0x26:0xffff:1375", None),
        ("init_failed", None, 0),
    ]
    f = findings("bumblebee-722-rminit-minor.log")["gpu.init_failed"]
    assert len(f) == 1 and f[0].gpu is None and f[0].severity == Severity.CRITICAL


def test_aer_on_a_bridge_in_syslog() -> None:
    evs = events("pop-3363-syslog-aer-correctable-bridge.log")
    assert [(e.kind, e.pci_bus_id, e.detail["agent"], e.detail["bits"]) for e in evs] == [
        ("aer", "0000:00:03.1", "Transmitter ID", ["Timeout"]),
        ("aer", "0000:00:03.1", "Receiver ID", ["BadTLP"]),
    ]
    assert evs[0].detail["reporter"] == "0000:00:03.1" and evs[0].detail["vendor_device"] == "1022:1453"
    # no topology known: reported for the device it names, informational at this rate
    fs = findings("pop-3363-syslog-aer-correctable-bridge.log")
    f = fs["pcie.aer_corrected"][0]
    assert f.severity == Severity.INFO and f.data["count"] == 2 and f.gpu is None
    assert f.data["types"] == {"Data Link Layer": 2}


def test_aer_old_kernel_names_and_multiple() -> None:
    evs = events("hid-asus-33-aer-old-kernel-multiple.log")
    assert len(evs) == 1
    d = evs[0].detail
    assert (d["severity"], d["type"], d["agent"], d["requester_id"], d["multiple"], d["bits"]) == (
        "corrected",
        "Physical Layer",
        "Receiver ID",
        "00e5",
        True,
        ["Receiver Error"],
    )


def test_aer_dmesg_ctime_nongpu_device_is_not_a_gpu_problem() -> None:
    evs = events("dasharo-815-ctime-aer-nongpu.log")
    assert [(e.pci_bus_id, e.detail["reporter"], e.detail["bits"], e.detail["nvidia"]) for e in evs] == [
        ("0000:00:1d.3", "0000:00:1d.3", ["Timeout"], False),
        ("0000:06:00.0", "0000:00:1d.3", ["RxErr", "BadTLP", "BadDLLP"], False),
    ]
    assert evs[1].detail["first"] == "RxErr" and evs[1].time == "2025-08-29T20:09:52"
    # with GPU facts known, corrected errors on a Wi-Fi card's path are not reported
    fs = findings("dasharo-815-ctime-aer-nongpu.log", gpus=[GpuFacts(index=0, pci_bus_id="00000000:01:00.0")])
    assert "pcie.aer_corrected" not in fs


def test_gpu_burn_fatal_aer_then_xid79() -> None:
    evs = events("gpu-burn-1-aer-fatal-xid79.log")
    aer = [e for e in evs if e.kind == "aer"]
    assert [(e.detail["severity"], e.detail["bits"]) for e in aer] == [
        ("corrected", ["Replay Timer Timeout"]),
        ("fatal", ["Surprise Down Error"]),
    ]
    fs = findings("gpu-burn-1-aer-fatal-xid79.log")
    assert sev(fs) == {
        "xid.79": "critical",
        "gpu.fallen_off_bus": "critical",
        "pcie.aer_uncorrected": "critical",
        "pcie.aer_corrected": "info",
    }
    x = fs["xid.79"][0]
    assert x.gpu.uuid == "GPU-660d987e-5b28-3bf6-2a2d-1d5ecae7f6df"  # type: ignore[union-attr]
    # "nvidia 0000:02:00.0: device has no AER-aware driver" names the GPU below the failing port
    unc = fs["pcie.aer_uncorrected"][0]
    assert unc.data["fatal"] is True and unc.data["where"] == "bridge_above_gpu"
    assert unc.gpu.pci_bus_id == "0000:02:00.0"  # type: ignore[union-attr]
    assert aer[1].detail["downstream"] == ["0000:02:00.0"]
    assert fs["gpu.fallen_off_bus"][0].data["aer_events_on_path"] == 1
    assert any("Uncorrected (Fatal)" in e for e in fs["gpu.fallen_off_bus"][0].evidence)


def test_gsp_heartbeat_and_firmware_init() -> None:
    evs = [e for e in events("ogkm-1230-gsp-heartbeat-timeout.log") if e.kind == "gsp"]
    assert [e.detail["gsp"] for e in evs] == ["heartbeat", "heartbeat", "rpc", "rpc_timeout"]
    assert {e.detail["gpu_instance"] for e in evs} == {6}
    fs = findings("ogkm-1230-gsp-heartbeat-timeout.log")
    g = fs["gsp.error"][0]
    assert g.severity == Severity.CRITICAL and g.data["driver_gpu_numbers"] == [6]
    fs = findings("ogkm-789-rminit-gsp-firmware.log")
    assert sev(fs) == {"gsp.error": "critical", "gpu.init_failed": "critical"}


def test_gsp_xid119_repeated() -> None:
    evs = events("gpud-pr500-xid119-gsp.log")
    assert [e.pid for e in evs] == [4071838, 28232, 28232, 28098, 4071838]
    assert [e.process for e in evs][3] == "gpu-feature-dis"
    fs = findings("gpud-pr500-xid119-gsp.log")
    assert sev(fs) == {"xid.119": "critical", "gsp.error": "critical"}
    assert fs["xid.119"][0].data["pids"] == [28098, 28232, 4071838]


def test_nvlink5_xids() -> None:
    evs = events("gpud-1160-1174-nvlink5-xids.log")
    # "Link -1": NETIR's error is not one link's (no link recorded, none in the title)
    got = [(e.xid, e.pci_bus_id, e.detail["unit"], e.detail["fatal"], e.detail.get("link")) for e in evs]
    assert got == [
        (144, "0000:01:00.0", "SAW_MVB", False, 0),
        (149, "0000:00:00.0", "NETIR_LINK_EVT", True, 0),
        (149, "0000:00:00.0", "NETIR_LINK_EVT", True, 0),
        (149, "0019:01:00.0", "NETIR", True, None),
        (145, "0018:01:00.0", "RLW_RXPIPE", False, 13),
    ]
    fs = findings("gpud-1160-1174-nvlink5-xids.log")
    assert fs["xid.144"][0].severity == Severity.WARNING  # Nonfatal
    assert {f.severity for f in fs["xid.149"]} == {Severity.CRITICAL}
    assert {f.gpu.pci_bus_id: f.severity for f in fs["nvlink.error"]} == {  # type: ignore[union-attr]
        "0000:01:00.0": Severity.WARNING,
        "0000:00:00.0": Severity.CRITICAL,
        "0019:01:00.0": Severity.CRITICAL,
        "0018:01:00.0": Severity.WARNING,
    }


def test_xid79_with_sxid_storm() -> None:
    evs = events("gpud-sxid-readme-xid79-sxid.log")
    assert [e.kind for e in evs] == ["uuid_map", "xid", "fallen_off_bus", "sxid", "sxid", "sxid", "sxid"]
    sx = [e for e in evs if e.kind == "sxid"]
    assert [(e.pci_bus_id, e.detail["sxid"], e.detail["link"], e.detail["nvswitch"]) for e in sx] == [
        ("0000:06:00.0", 20034, 48, 1),
        ("0000:05:00.0", 20034, 63, 0),
        ("0000:07:00.0", 20034, 37, 2),
        ("0000:05:00.0", 20034, 62, 0),
    ]
    fs = findings("gpud-sxid-readme-xid79-sxid.log")
    assert sev(fs) == {"xid.79": "critical", "gpu.fallen_off_bus": "critical", "nvlink.error": "critical"}
    assert sorted(tuple(f.data["links"]) for f in fs["nvlink.error"]) == [(37,), (48,), (62, 63)]
    assert fs["gpu.fallen_off_bus"][0].gpu.uuid == "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"  # type: ignore[union-attr]


def test_journal_xid13_with_wrapped_line() -> None:
    evs = events("nixpkgs-539036-journal-xid13-wrapped.log")
    assert xids(evs) == [(13, "0000:01:00.0", 1773, ".gala-wrapped")]
    assert evs[0].detail["host"] == "gaming" and evs[0].detail["time_text"] == "Jul 06 20:02:59"


@pytest.mark.parametrize(
    ("name", "xid", "bus", "pid", "code", "severity", "extra"),
    [
        ("ml-engineering-debug-xid63.log", 63, "0000:10:1c.0", 1896, "xid.63", Severity.WARNING, {}),
        (
            "nvidia-docs-mig-xid94.log",
            94,
            "0000:01:00.0",
            7194,
            "xid.94",
            Severity.WARNING,
            {"gpu_instance": "05"},
        ),
        (
            "nvsentinel-022-xid74-nvlink.log",
            74,
            "0003:00:00.0",
            None,
            "xid.74",
            Severity.CRITICAL,
            {"link": 14},
        ),
        ("gpud-kmsg-test-xid154.log", 154, "0009:01:00.0", None, "xid.154", Severity.CRITICAL, {}),
    ],
)
def test_single_line_xids(
    name: str, xid: int, bus: str, pid: int | None, code: str, severity: Severity, extra: dict[str, object]
) -> None:
    (ev,) = events(name)
    assert (ev.xid, ev.pci_bus_id, ev.pid) == (xid, bus, pid)
    for k, v in extra.items():
        assert ev.detail[k] == v
    f = findings(name)[code][0]
    assert f.severity == severity and f.evidence == [ev.line]


@pytest.mark.parametrize(
    "name", ["stackhpc-287-rsyslog-012-api-mismatch.log", "nvidia-all-394-api-mismatch-client-name.log"]
)
def test_api_mismatch_wordings(name: str) -> None:
    (ev,) = events(name)
    assert ev.kind == "module" and ev.detail["module"] == "api_mismatch"
    expected = {
        "stackhpc-287-rsyslog-012-api-mismatch.log": ("535.54.03", "530.30.02", None),
        "nvidia-all-394-api-mismatch-client-name.log": ("595.84", "595.80", "kwin_wayland"),
    }[name]
    assert (
        ev.detail["client_version"],
        ev.detail["kernel_version"],
        ev.detail.get("client_process"),
    ) == expected
    f = findings(name)["driver.kernel_module"][0]
    assert f.severity == Severity.CRITICAL and expected[0] in f.title and expected[1] in f.title


def test_open_module_without_gsp_support() -> None:
    (ev,) = events("ogkm-322-open-module-no-gsp.log")
    assert (ev.kind, ev.pci_bus_id, ev.detail["module"], ev.detail["pci_id"]) == (
        "module",
        "0000:af:00.0",
        "gpu_not_supported",
        "10de:1db5",
    )
    assert (
        "proprietary kernel modules"
        in findings("ogkm-322-open-module-no-gsp.log")["driver.kernel_module"][0].remedy
    )


def test_probe_not_called_nouveau() -> None:
    evs = events("mattshma-133-probe-not-called.log")
    assert [(e.detail["module"], e.detail.get("devices")) for e in evs] == [
        ("no_gpu_found", None),
        ("probe_not_called", 3),
    ]
    fs = findings("mattshma-133-probe-not-called.log")["driver.kernel_module"]
    # "no GPU found" follows from the probe not being called (driver_module.json explained_by): one finding,
    # titled by the cause, as critical as its worst line
    assert {f.data["problem"]: f.severity for f in fs} == {"probe_not_called": Severity.CRITICAL}


def test_mismatch_then_missing_gsp_firmware() -> None:
    evs = events("bazzite-2668-mismatch-gsp-firmware-rminit.log")
    assert [(e.kind, e.detail.get("module") or e.detail.get("what")) for e in evs] == [
        ("module", "api_mismatch"),
        ("module", "api_mismatch"),
        ("module", "firmware_missing"),
        ("module", "firmware_missing"),
        ("init_failed", "RmInitAdapter failed"),
        ("init_failed", "rm_init_adapter failed"),
    ]
    fs = findings("bazzite-2668-mismatch-gsp-firmware-rminit.log")
    assert sev(fs) == {"driver.kernel_module": "critical", "gpu.init_failed": "critical"}
    assert {f.data["problem"] for f in fs["driver.kernel_module"]} == {"api_mismatch", "firmware_missing"}
    assert fs["gpu.init_failed"][0].data["rm_codes"] == ["0x61:0x56:1770"]


def test_fatal_aer_old_bits_without_timestamps() -> None:
    (ev,) = events("vgpu-unlock-114-aer-fatal-old-bits.log")
    assert (ev.pci_bus_id, ev.detail["severity"], ev.detail["status"], ev.uptime_s) == (
        "0000:00:01.1",
        "fatal",
        "00000020",
        None,
    )
    assert "bits" not in ev.detail  # the "[5 ] SDES" line before the header belongs to an earlier record
    assert sev(findings("vgpu-unlock-114-aer-fatal-old-bits.log")) == {"pcie.aer_uncorrected": "critical"}


def test_printk_caller_ids() -> None:
    evs = events("qualcomm-1118-printk-caller-aer.log")
    assert [
        (
            e.pci_bus_id,
            e.uptime_s,
            e.detail["reporter"],
            e.detail["multiple"] if "multiple" in e.detail else None,
        )
        for e in evs
    ] == [("0000:00:00.0", 36.128204, "0000:00:00.0", True), ("0000:01:00.0", 36.15601, "0000:00:00.0", None)]
    assert evs[0].detail["bits"] == ["RxErr"] and evs[0].detail["first"] == "RxErr"


def test_all_fixtures_together_round_trip_and_report() -> None:
    """Every excerpt in one snapshot: JSON round-trip is exact and each finding carries evidence and steps."""
    from gpuclinic.diagnose import diagnose

    snap = Snapshot(origin="evidence", kernel_log_read=True)
    for p in sorted(FX.glob("*.log")):
        snap.kernel_events.extend(scan_path(p))
    again = Snapshot.from_dict(snap.to_dict())
    assert again.to_json() == snap.to_json()
    report = diagnose(again)
    assert report.verdict is not None and report.verdict.value == "drain"
    mine = [f for f in report.findings if f.source == "kernel log"]
    assert len({f.code for f in mine}) >= 20
    for f in mine:
        assert f.evidence and f.title, f.code
        # a root cause carries its runbook's first step; a symptom points at its cause's runbook
        root = any(i.id == f.incident and i.code == f.code for i in report.incidents)
        if not root:
            assert f.remedy.startswith("A symptom of "), f.code
        elif remedy_computed(f.code):  # its detector computes the exact fix (driver.kernel_module)
            assert f.remedy, f.code
        else:
            assert f.remedy == first_step(f.code, f.gpu), f.code
