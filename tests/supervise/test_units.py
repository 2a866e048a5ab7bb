"""Pieces of the supervisor: argument placeholders, GPU selection, kernel windows, GPU watching,
pre-flight."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclinic.cli import cli
from gpuclinic.cli.run import parse_duration
from gpuclinic.errors import InputError
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Family, Finding, GpuRef, Severity
from gpuclinic.supervise.gpus import JobGpu, exclude, parse_visible, resolve, visible_value
from gpuclinic.supervise.gpuwatch import GpuWatcher
from gpuclinic.supervise.jobspec import substitute
from gpuclinic.supervise.kernel import KernelWindow

GPUS = [
    GpuFacts(index=0, uuid="GPU-0c5a4f3e-1111", pci_bus_id="00000000:3B:00.0"),
    GpuFacts(index=1, uuid="GPU-9d7e2b10-2222", pci_bus_id="00000000:86:00.0"),
    GpuFacts(index=2, uuid="GPU-9d7e2b10-3333", pci_bus_id="00000000:AF:00.0"),
]


def test_substitute_placeholders() -> None:
    cmd = ["torchrun", "--nproc-per-node", "{ngpus}", "train.py", "--resume", "{resume}", "--tag=a{attempt}"]
    assert substitute(cmd, resume="/c/s-3", ngpus=2, attempt=2) == [
        "torchrun",
        "--nproc-per-node",
        "2",
        "train.py",
        "--resume",
        "/c/s-3",
        "--tag=a2",
    ]
    # no checkpoint yet: the option and its placeholder disappear
    assert substitute(cmd, resume=None, ngpus=8, attempt=1) == [
        "torchrun",
        "--nproc-per-node",
        "8",
        "train.py",
        "--tag=a1",
    ]
    assert substitute(["x", "--resume-from={resume}"], resume=None, ngpus=1, attempt=1) == ["x"]
    assert substitute(["x", "{resume}"], resume=None, ngpus=1, attempt=1) == ["x"]


def test_parse_visible_like_cuda() -> None:
    assert parse_visible(None) is None
    assert parse_visible("0, 2") == ["0", "2"]
    assert parse_visible("0,,1") == ["0"]  # CUDA ignores everything after an invalid entry
    assert parse_visible("") == []


def test_resolve_indices_uuid_prefixes_and_unknowns() -> None:
    r = resolve(["2", "GPU-0c5a", "GPU-9d7e", "7", "MIG-abc"], GPUS)
    assert [(g.index, g.uuid, g.pci_bus_id) for g in r] == [
        (2, "GPU-9d7e2b10-3333", "0000:af:00.0"),
        (0, "GPU-0c5a4f3e-1111", "0000:3b:00.0"),
        (None, "GPU-9d7e", None),  # ambiguous prefix: kept as the user wrote it
        (7, None, None),
        (None, "MIG-abc", None),
    ]
    assert [g.index for g in resolve(None, GPUS)] == [0, 1, 2]


def test_exclude_by_uuid_bus_or_index() -> None:
    job = resolve(["0", "1", "2"], GPUS)
    rest, gone = exclude(job, GpuRef(pci_bus_id="0000:86:00.0"))
    assert gone is not None and gone.index == 1
    assert visible_value(rest) == "GPU-0c5a4f3e-1111,GPU-9d7e2b10-3333"
    rest2, gone2 = exclude(rest, GpuRef(uuid="GPU-nope"))
    assert gone2 is None and rest2 == rest
    _, by_index = exclude([JobGpu(token="3", index=3)], GpuRef(index=3))
    assert by_index is not None


def test_parse_duration() -> None:
    assert parse_duration("30") == 30  # a bare number is seconds in every command (issue 14)
    assert parse_duration("90s") == 90
    assert parse_duration("1.5h") == 5400
    assert parse_duration("2") == 2
    assert parse_duration("2m") == 120
    with pytest.raises(InputError):
        parse_duration("-1m")


def test_kernel_window_reads_only_new_lines_and_survives_rotation(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("old line\n")
    w = KernelWindow([str(log)])
    w.mark()
    with open(log, "a") as f:
        f.write("new 1\nnew 2\n")
    assert w.read() == ["new 1", "new 2"]
    w.mark()
    log.rename(tmp_path / "kern.log.1")  # logrotate
    log.write_text("after rotation\n")
    assert w.read() == ["after rotation"]
    missing = KernelWindow([str(tmp_path / "nope")])
    missing.mark()
    assert missing.read() == [] and missing.why_not


class _Src:
    name = "test"

    def __init__(self) -> None:
        self.gpus = [
            GpuFacts(
                index=g.index,
                uuid=g.uuid,
                pci_bus_id=g.pci_bus_id,
                utilization_gpu_pct=0.0,
                ecc_volatile_uncorrected=0,
            )
            for g in GPUS
        ]

    def identities(self) -> list[GpuFacts]:
        return self.gpus

    def sample(self) -> list[GpuFacts]:
        return [GpuFacts(**{**g.__dict__}) for g in self.gpus]

    def close(self) -> None:
        pass


def test_gpu_watcher_faults_activity_and_scope() -> None:
    src = _Src()
    seen: list[str] = []
    w = GpuWatcher(src, 60, lambda f: seen.append(f.what))
    w.job = resolve(["0", "1"], GPUS)
    w.sample_once()
    assert w.faults == [] and w.last_activity == 0.0
    src.gpus[1].utilization_gpu_pct = 88.0
    src.gpus[1].ecc_volatile_uncorrected = 2
    src.gpus[2].lost = True  # not the job's GPU
    w.sample_once()
    assert w.last_activity > 0
    (ecc,) = w.faults
    assert (ecc.gpu.uuid, ecc.code, ecc.severity, ecc.fatal) == (
        "GPU-9d7e2b10-2222", "memory.ecc_uncorrectable", Severity.CRITICAL, False)
    assert "ecc uncorr 0 -> 2 during the run" in ecc.what and "gpuclinic runbook" in ecc.remedy
    src.gpus[1].ecc_volatile_uncorrected = 5  # the same fault again: reported once per attempt
    w.sample_once()
    assert len(w.faults) == 1
    src.gpus = [g for g in src.gpus if g.index != 0]  # GPU 0 vanishes from NVML
    w.sample_once()
    (gone,) = w.faults[1:]
    assert (gone.gpu.uuid, gone.code, gone.severity, gone.fatal) == (
        "GPU-0c5a4f3e-1111", "gpu.missing", Severity.CRITICAL, True)
    assert "no longer listed by NVML" in gone.what
    w.sample_once()
    assert len(seen) == len(w.faults) == 2


def _drain_report(monkeypatch: pytest.MonkeyPatch, gpu: GpuRef | None) -> None:
    import gpuclinic.collect
    import gpuclinic.diagnose

    snap = Snapshot(gpus=[GpuFacts(index=g.index, uuid=g.uuid, pci_bus_id=g.pci_bus_id) for g in GPUS])
    finding = Finding(
        "xid.79",
        Severity.CRITICAL,
        Family.GPU_FAULT,
        "GPU has fallen off the bus",
        gpu=gpu,
        remedy="reboot the node",
    )
    import gpuclinic.supervise.runner

    # in-process run: keep pytest itself from becoming a subreaper
    monkeypatch.setattr(gpuclinic.supervise.runner, "become_subreaper", lambda: False)
    monkeypatch.setattr(gpuclinic.collect, "collect_live", lambda opts=None: snap)
    monkeypatch.setattr(
        gpuclinic.diagnose, "diagnose", lambda s: gpuclinic.diagnose.build_report(s, [finding], [])
    )


def test_preflight_refuses_on_drain_unless_forced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _drain_report(monkeypatch, GpuRef(index=0, pci_bus_id="0000:3b:00.0", uuid="GPU-0c5a4f3e-1111"))
    monkeypatch.setenv("GPUCLINIC_NO_NVML", "1")
    marker = tmp_path / "ran"
    job = ["--db", str(tmp_path / "l.db"), "--", "touch", str(marker)]
    r = CliRunner().invoke(cli, ["run", *job], standalone_mode=False)
    assert r.exception is not None and "drain" in str(r.exception) and not marker.exists()
    r = CliRunner().invoke(cli, ["run", "--force", *job])
    assert r.exit_code == 0, r.output
    assert marker.exists()


def test_preflight_drain_on_a_gpu_the_job_does_not_use_only_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _drain_report(monkeypatch, GpuRef(index=2, pci_bus_id="0000:af:00.0", uuid="GPU-9d7e2b10-3333"))
    monkeypatch.setenv("GPUCLINIC_NO_NVML", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    marker = tmp_path / "ran"
    r = CliRunner().invoke(cli, ["run", "--db", str(tmp_path / "l.db"), "--", "touch", str(marker)])
    assert r.exit_code == 0 and marker.exists()
    assert "pre-flight warning: GPU 2: GPU has fallen off the bus" in r.output


def test_follower_follows_appends_and_rotation(tmp_path: Path) -> None:
    import threading

    from gpuclinic.sources.kernellog.follow import follow

    log = tmp_path / "kern.log"
    log.write_text("[1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, old line before following\n")
    stop = threading.Event()
    got: list[tuple[int | None, str | None]] = []

    def run() -> None:
        for ev in follow([str(log)], stop, poll_s=0.02):
            got.append((ev.xid, ev.pci_bus_id))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.1)
    with open(log, "a") as f:
        f.write("[2.0] NVRM: Xid (PCI:0000:86:00): 48, pid=2, name=y, half a ")
        f.flush()
        time.sleep(0.1)
        f.write("line, completed later\n")
    time.sleep(0.1)
    log.rename(tmp_path / "kern.log.1")
    log.write_text("[3.0] NVRM: Xid (PCI:0000:af:00): 95, pid=3, name=z, after rotation\n")
    deadline = time.monotonic() + 3
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    t.join(2)
    assert got == [(48, "0000:86:00.0"), (95, "0000:af:00.0")]


def test_redact_argv_hides_tokens() -> None:
    from gpuclinic.supervise.jobspec import redact_argv

    argv = [
        "python",
        "train.py",
        "--hf-token",
        "hf_abcdefghijklmnopqrstuvwxyz012345",
        "--api_key=sk-live123",
        "--wandb-key",
        "x" * 40,
        "--lr",
        "3e-4",
        "--push",
        "https://user:ghp_abcdefghijklmnopqrstuvwx1234@github.com/r",
    ]
    out = redact_argv(argv)
    assert out == [
        "python",
        "train.py",
        "--hf-token",
        "***",
        "--api_key=***",
        "--wandb-key",
        "***",
        "--lr",
        "3e-4",
        "--push",
        "https://user:***@github.com/r",
    ]
    assert redact_argv(["--tokenizer", "gpt2", "--keep", "3", "--hftoken=abc"]) == [
        "--tokenizer",
        "gpt2",
        "--keep",
        "3",
        "--hftoken=***",
    ]


def test_tracker_ignores_helpers_started_before_the_job() -> None:
    import subprocess
    import sys

    from gpuclinic.supervise.procs import Tracker

    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # like journalctl -f
    try:
        t = Tracker()
        t.reset()
        job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            t.scan()
            assert job.pid in t.pids and helper.pid not in t.pids
        finally:
            job.kill()
            job.wait()
    finally:
        helper.kill()
        helper.wait()


def test_default_preflight_is_quick_and_the_long_one_is_behind_a_flag(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 14: the pre-flight added 2-3 s to every job start (the doctor's timed measurements)."""
    from click.testing import CliRunner

    import gpuclinic.collect as collect
    from gpuclinic.cli.run import run
    from gpuclinic.sources.scenarios import load_scenario

    seen: list[bool] = []

    def fake_collect(opts: collect.CollectOptions) -> object:
        seen.append(opts.quick)
        return load_scenario("healthy-8xh100-load")

    monkeypatch.setattr(collect, "collect_live", fake_collect)
    monkeypatch.setenv("GPUCLINIC_NO_NVML", "1")
    for extra, want in (([], True), (["--full-preflight"], False)):
        r = CliRunner().invoke(
            run,
            [*extra, "--force", "--db", str(tmp_path / "l.db"), "--max-restarts", "0", "--", "true"],
            standalone_mode=False,
        )
        assert r.exception is None, r.output
        assert seen[-1] is want
    assert seen == [True, False]


def test_preflight_prints_one_line_per_incident_not_per_symptom(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """A GPU off the bus is one incident (Xid 79, gpu.missing, AER folded under it) with one runbook."""
    monkeypatch.setenv("GPUCLINIC_NO_NVML", "1")
    r = CliRunner().invoke(
        cli, ["run", "--scenario", "fallen-off-bus", "--db", str(tmp_path / "l.db"), "--", "true"])
    lines = [ln for ln in r.output.splitlines() if ln.startswith("gpuclinic: pre-flight: GPU")]
    assert len(lines) == 1, r.output
    assert "[gpu.fallen_off_bus; explains xid.79, gpu.missing, pcie.aer_uncorrected]" in lines[0]
    assert "gpuclinic runbook gpu.fallen_off_bus --gpu 4" in lines[0]
