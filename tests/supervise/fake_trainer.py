"""A fake training script for `gpuclinic run` tests.

It checkpoints through gpuclinic.train (atomic saves, heartbeat, SIGTERM -> checkpoint-and-exit),
then fails the way it is told on its first ``--fail-attempts`` attempts and completes afterwards.
Error texts are real ones from public reports (see tests/fixtures/supervise/SOURCES.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuclinic import train

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "supervise"


def out(msg: str) -> None:
    print(msg, flush=True)


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--step-time", type=float, default=0.02)
    p.add_argument("--fail", default="none")
    p.add_argument("--fail-attempts", type=int, default=1)
    p.add_argument("--kernel-log")
    p.add_argument("--bus", default="0000:3b:00")
    p.add_argument("--gpu-facts")
    p.add_argument("--lose-index", type=int, default=1)
    p.add_argument("--pidfile")
    p.add_argument("--resume", dest="resume_arg")
    p.add_argument("--no-beat", action="store_true")
    p.add_argument("--then-hang", action="store_true", help="after the fault, hang like a rank stuck in NCCL")
    return p.parse_args()


def _crash(mode: str, a: argparse.Namespace, step: int) -> int | None:
    """The failure modes that end the attempt: an exit status, or None when ``mode`` is not one."""
    if mode == "exception":
        raise ValueError(f"loss is NaN at step {step}")
    if mode == "cuda_oom":
        sys.stderr.write((FIXTURES / "cuda_oom.txt").read_text())
        return 1
    if mode == "nccl":
        sys.stderr.write((FIXTURES / "nccl_watchdog_timeout.txt").read_text())
        sys.stderr.flush()
        os.abort()  # ProcessGroupNCCL's watchdog terminates the process after the timeout
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "oom_killer":
        with open(a.kernel_log, "a") as f:
            f.write(
                f"[ 2059991.491542] Out of memory: Killed process {os.getpid()} (python3) "
                "total-vm:53312244kB, "
                "anon-rss:31451456kB, file-rss:74816kB, shmem-rss:12296kB, UID:0 pgtables:69068kB "
                "oom_score_adj:0\n"
            )
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "xid":
        with open(a.kernel_log, "a") as f:
            f.write(
                f"[ 8123.456789] NVRM: Xid (PCI:{a.bus}): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n"
            )
        if a.then_hang:
            out("waiting in a collective for the lost GPU")
            time.sleep(600)
        sys.stderr.write("RuntimeError: CUDA error: unspecified launch failure\n")
        return 1
    if mode == "gpu_lost":
        facts = json.loads(Path(a.gpu_facts).read_text())
        for g in facts:
            if g["index"] == a.lose_index:
                g["lost"] = True
                g["lost_reason"] = "GPU is lost"
        tmp = a.gpu_facts + ".tmp"
        Path(tmp).write_text(json.dumps(facts))
        os.replace(tmp, a.gpu_facts)
        if a.then_hang:
            out("waiting in a collective for the lost GPU")
            time.sleep(600)
        time.sleep(1.0)  # let the supervisor sample it
        sys.stderr.write("RuntimeError: CUDA error: unspecified launch failure\n")
        return 1
    return None


def _misbehave(mode: str, a: argparse.Namespace, step: int, ckpt: Path) -> int | None:
    """Hangs, graceful stops and other non-crash behaviour: an exit status, or None to finish normally."""
    if mode == "hang":
        out("entering a collective that never returns")
        time.sleep(600)
    if mode == "wait_for_stop":
        out("training until stopped")
        while not train.stop_requested():
            time.sleep(0.02)
        step += 1
        train.atomic_save(ckpt / f"step-{step:04d}.ckpt", str(step).encode())
        out(f"got SIGTERM: saved step {step}, exiting gracefully")
        return 0
    if mode == "checkpoint_on_usr1":
        out("training until asked for a checkpoint")
        while not train.checkpoint_requested():
            time.sleep(0.02)
        step += 1
        train.atomic_save(ckpt / f"step-{step:04d}.ckpt", str(step).encode())
        train.clear_checkpoint_request()
        out(f"checkpoint on request: step {step}")
    if mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        out("ignoring SIGTERM")
        time.sleep(600)
    if mode == "quiet":
        time.sleep(2.5)  # long silent step (e.g. an evaluation) while the GPUs are busy
    if mode == "exit3":
        return 3
    return None


def main() -> int:
    a = _args()

    resume = a.resume_arg or train.resume_from()
    start = int(Path(resume).read_text()) if resume else 0
    out(f"attempt={train.attempt()} resume={resume} start={start} "
        f"cvd={os.environ.get('CUDA_VISIBLE_DEVICES', '-')} ngpus={os.environ.get('GPUCLINIC_NGPUS', '-')}")
    train.install_checkpoint_signals()
    ckpt = Path(a.ckpt)
    step = start
    for step in range(start + 1, start + a.steps + 1):
        time.sleep(a.step_time)
        if not a.no_beat:
            train.beat()
        train.atomic_save(ckpt / f"step-{step:04d}.ckpt", str(step).encode())
        out(f"step {step}")
    failing = train.attempt() <= a.fail_attempts
    mode = a.fail if failing else "none"

    if a.pidfile:
        # a worker-like grandchild, and one that escapes the process group with setsid
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        esc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        Path(a.pidfile).write_text(
            json.dumps({"self": os.getpid(), "pgid": os.getpgid(0), "kids": [kid.pid, esc.pid]})
        )

    rc = _crash(mode, a, step)
    if rc is None:
        rc = _misbehave(mode, a, step, ckpt)
    if rc is not None:
        return rc
    out("training complete")
    return 0

if __name__ == "__main__":
    sys.exit(main())
