"""Classification of how an attempt ended, from evidence (no processes)."""

from __future__ import annotations

import signal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.model import GpuRef
from gpuclinic.supervise.classify import AttemptEvidence, GpuFault, classify, match_output
from gpuclinic.supervise.kernel import find_oom_kills, parse_gpu_events

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "supervise"
GPU0 = GpuRef(index=0, pci_bus_id="0000:3b:00.0", uuid="GPU-aaaa")
GPU1 = GpuRef(index=1, pci_bus_id="0000:86:00.0", uuid="GPU-bbbb")


def xid(bus: str, n: int, pid: int | None = None) -> KernelEvent:
    return KernelEvent(
        kind="xid", line=f"NVRM: Xid (PCI:{bus}): {n}, pid={pid}, ...", pci_bus_id=bus, xid=n, pid=pid
    )


def test_completed_even_with_scary_text() -> None:
    c = classify(AttemptEvidence(returncode=0, output_tail="CUDA out of memory (recovered, batch halved)"))
    assert c.cls == "completed" and not c.interrupted


def test_user_stop_is_planned_whatever_else_happened() -> None:
    c = classify(
        AttemptEvidence(
            returncode=-15,
            user_stop_signal=signal.SIGINT,
            kernel_events=[xid("0000:3b:00.0", 79)],
            job_gpus=[GPU0],
        )
    )
    assert c.cls == "planned" and c.planned and "SIGINT" in c.summary


def test_xid_on_job_gpu_beats_the_nccl_text_it_caused() -> None:
    text = (FIX / "nccl_watchdog_timeout.txt").read_text()
    c = classify(
        AttemptEvidence(
            returncode=-6, output_tail=text, kernel_events=[xid("0000:3b:00.0", 79)], job_gpus=[GPU0, GPU1]
        )
    )
    assert c.cls == "gpu_hardware" and c.gpu == GPU0


def test_xid_on_another_gpu_is_not_blamed() -> None:
    text = (FIX / "nccl_watchdog_timeout.txt").read_text()
    c = classify(
        AttemptEvidence(
            returncode=-6, output_tail=text, kernel_events=[xid("0000:af:00.0", 79)], job_gpus=[GPU0, GPU1]
        )
    )
    assert c.cls == "nccl_network"


def test_xid_from_job_pid_counts_even_if_bus_unknown() -> None:
    c = classify(
        AttemptEvidence(
            returncode=1, kernel_events=[xid("0000:af:00.0", 48, pid=4242)], job_gpus=[GPU0], job_pids={4242}
        )
    )
    assert c.cls == "gpu_hardware"


def test_application_xid_is_not_hardware() -> None:
    c = classify(
        AttemptEvidence(
            returncode=1,
            output_tail="Traceback (most recent call last):\n  x\nRuntimeError: "
            "CUDA error: an illegal memory access was encountered\n",
            kernel_events=[xid("0000:3b:00.0", 31)],
            job_gpus=[GPU0],
        )
    )
    assert c.cls == "application_error"
    assert any("Xid 31" in e for e in c.evidence)


def test_sampled_gpu_fault() -> None:
    c = classify(
        AttemptEvidence(returncode=1, gpu_faults=[GpuFault(GPU1, "GPU is lost")], job_gpus=[GPU0, GPU1])
    )
    assert c.cls == "gpu_hardware" and c.gpu == GPU1


def test_hang() -> None:
    c = classify(AttemptEvidence(returncode=-9, hang_reason="no output for 1800s"))
    assert c.cls == "hang" and not c.planned


def test_oom_killer_victim_in_job() -> None:
    lines = (FIX / "oom_killer.log").read_text().splitlines()
    c = classify(AttemptEvidence(returncode=-9, oom_kills=find_oom_kills(lines), job_pids={15784}))
    assert c.cls == "killed" and "15784" in c.summary
    other = classify(AttemptEvidence(returncode=-9, oom_kills=find_oom_kills(lines), job_pids={1}))
    assert other.cls == "killed" and "OOM" not in other.summary


def test_cgroup_oom_kill() -> None:
    c = classify(AttemptEvidence(returncode=-9, cgroup_oom_kills=1))
    assert c.cls == "killed" and "container" in c.summary


def test_sigkill_with_memory_pressure() -> None:
    c = classify(AttemptEvidence(returncode=-9, mem_peak_pct=97.5))
    assert c.cls == "killed" and "memory pressure" in c.summary


def test_torchrun_worker_sigkill_summary() -> None:
    c = classify(AttemptEvidence(returncode=1, output_tail=(FIX / "torchrun_sigkill.txt").read_text()))
    assert c.cls == "killed" and c.signal == signal.SIGKILL
    assert "14750" in c.summary  # the root-cause worker, not the first logged failure


def test_torchrun_worker_oom_killed() -> None:
    ev = AttemptEvidence(
        returncode=1,
        output_tail=(FIX / "torchrun_sigkill.txt").read_text(),
        oom_kills=find_oom_kills(["Out of memory: Killed process 14750 (python) total-vm:1kB"]),
    )
    assert classify(ev).cls == "killed" and "OOM killer" in classify(ev).summary


def test_external_sigterm_is_planned() -> None:
    assert classify(AttemptEvidence(returncode=-15)).cls == "planned"
    assert classify(AttemptEvidence(returncode=143)).cls == "planned"  # bash wrapper: 128+15


def test_segfault_is_application_error() -> None:
    assert classify(AttemptEvidence(returncode=-11)).cls == "application_error"


def test_first_specific_error_wins() -> None:
    oom = (FIX / "cuda_oom.txt").read_text()
    nccl = (FIX / "nccl_watchdog_timeout.txt").read_text()
    assert classify(AttemptEvidence(returncode=1, output_tail=oom + nccl)).cls == "cuda_oom"
    assert classify(AttemptEvidence(returncode=1, output_tail=nccl + oom)).cls == "nccl_network"


def test_stdout_lines_inside_a_traceback_do_not_hide_the_exception() -> None:
    # stdout and stderr are separate pipes: a busy box interleaves them (seen in CI under load)
    tail = (
        'step 2\nTraceback (most recent call last):\n  File "train.py", line 68, in <module>\n'
        'step 3\nloss: nan\n    raise ValueError(f"loss is NaN at step {step}")\n'
        "ValueError: loss is NaN at step 3\n"
    )
    c = classify(AttemptEvidence(returncode=1, output_tail=tail))
    assert (
        c.cls == "application_error" and c.summary == "application error: ValueError: loss is NaN at step 3"
    )
    plain = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nstep 9\nKeyboardInterrupt\n'
    )
    assert (
        classify(AttemptEvidence(returncode=1, output_tail=plain)).summary
        == "application error: KeyboardInterrupt"
    )
    custom = 'Traceback (most recent call last):\n  File "x.py", line 1\nstep 9\nmylib.Boom: bad shard\n'
    assert (
        classify(AttemptEvidence(returncode=1, output_tail=custom)).summary
        == "application error: mylib.Boom: bad shard"
    )


def test_unknown_without_evidence() -> None:
    c = classify(AttemptEvidence(returncode=3, output_tail="bye\n"))
    assert c.cls == "unknown" and "exit status 3" in c.summary


def test_kernel_parser_real_lines() -> None:
    lines = [
        "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
        "the bus.",
        "Mar 02 10:01:02 host kernel: NVRM: Xid (PCI:0000:86:00): 48, pid=1234, name=python, An "
        "uncorrectable "
        "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
        "[ 8123.5] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "unrelated line",
    ]
    ev = parse_gpu_events(lines, "t")
    assert [(e.kind, e.xid, e.pci_bus_id, e.pid) for e in ev] == [
        ("xid", 79, "0000:3b:00.0", None),
        ("xid", 48, "0000:86:00.0", 1234),
        ("fallen_off_bus", None, "0000:3b:00.0", None),
    ]
    got = {(e.xid, e.pci_bus_id) for e in parse_gpu_events(lines) if e.kind == "xid"}
    assert {(79, "0000:3b:00.0"), (48, "0000:86:00.0")} <= got


def test_oom_killer_formats() -> None:
    kills = find_oom_kills((FIX / "oom_killer.log").read_text().splitlines())
    # the old two-line form names the chosen parent (89746) first and the killed child (89879) second
    assert {(k.pid, k.process) for k in kills} == {(1440763, "perl"), (89879, "python"), (15784, "python3")}


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=400))
def test_classifier_never_crashes_on_arbitrary_output(text: str) -> None:
    for rc in (0, 1, -9, 137, None):
        c = classify(AttemptEvidence(returncode=rc, output_tail=text))
        assert c.cls in {
            "completed",
            "application_error",
            "killed",
            "planned",
            "unknown",
            "cuda_oom",
            "nccl_network",
            "gpu_hardware",
        }
    match_output(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=20))
def test_kernel_parsers_never_crash(lines: list[str]) -> None:
    parse_gpu_events(lines, None)
    find_oom_kills(lines)


def test_remedy_from_signature_else_class_advice() -> None:
    oom = classify(AttemptEvidence(returncode=1, output_tail=(FIX / "cuda_oom.txt").read_text()))
    assert oom.cls == "cuda_oom" and "expandable_segments" in oom.remedy
    killed = classify(AttemptEvidence(returncode=-9))
    assert "OOM killer" in killed.remedy
    assert classify(AttemptEvidence(returncode=0)).remedy == ""
