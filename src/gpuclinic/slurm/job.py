"""``gpuclinic run`` inside a Slurm job: know the job, and requeue it when this node cannot help.

A restart on the same node cannot help after a GPU hardware fault (a GPU that fell off the bus
stays gone until the node reboots).  Unless ``--exclude-bad-gpu`` can go on without that GPU, the
supervisor's decision becomes ``requeue``: gpuclinic drains this node with a ``gpuclinic:`` reason
(so the scheduler will not put the job back here, and ``slurm healthcheck`` resumes the node once
the doctor finds it healthy again) and then asks Slurm to requeue the job, which ends this attempt.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from gpuclinic.slurm.health import job_gpu_tokens
from gpuclinic.supervise.classify import Classification
from gpuclinic.supervise.gpus import GpuSource, JobGpu
from gpuclinic.supervise.jobspec import Notifier, RunOptions
from gpuclinic.supervise.runner import Supervisor

REQUEUE = "requeue"


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    node: str | None
    gpu_var: str | None
    gpus: list[str] | None

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        gpus = f", GPUs {','.join(self.gpus)} ({self.gpu_var})" if self.gpus else ""
        return f"Slurm job {self.job_id}{where}{gpus}"


def slurm_job_from_env(env: dict[str, str] | None = None) -> SlurmJob | None:
    """The Slurm job this process runs in (SLURM_JOB_ID), or None outside Slurm."""
    env = dict(os.environ) if env is None else env
    jid = (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip()
    if not jid:
        return None
    var, toks = job_gpu_tokens(env)
    return SlurmJob(job_id=jid, node=env.get("SLURMD_NODENAME") or env.get("SLURM_NODELIST"),
                    gpu_var=var, gpus=toks)


class SlurmSupervisor(Supervisor):
    """The supervisor, with ``requeue`` as the way out of a GPU fault that a local restart cannot fix."""

    def __init__(self, opts: RunOptions, *, job: SlurmJob, source: GpuSource | None = None,
                 notifier: Notifier | None = None, say: Callable[[str], None] | None = None) -> None:
        super().__init__(opts, source=source, notifier=notifier, say=say)
        self.job = job

    def _decide(
        self, cls: Classification, restarts: int, job_gpus: list[JobGpu]
    ) -> tuple[str, str, list[JobGpu]]:
        action, why, gpus = super()._decide(cls, restarts, job_gpus)
        if cls.cls == "gpu_hardware" and action != "stop" and not action.startswith("restart without"):
            where = cls.gpu.label() if cls.gpu else "a GPU"
            return (
                REQUEUE,
                f"{where} failed on this node; a restart here cannot help ({self.job.describe()})",
                gpus,
            )
        return action, why, gpus


def requeue_reason(cls: Classification, job: SlurmJob) -> str:
    gpu = f" {cls.gpu.label()}" if cls.gpu else ""
    return f"gpuclinic: run: {cls.cls}{gpu} (job {job.job_id})"


def finish_requeue(sup: SlurmSupervisor, *, say: Callable[[str], None], scontrol: str | None = None) -> bool:
    """After the supervisor stopped with ``requeue``: drain this node (gpuclinic reason) and requeue the
    job.  Returns False (and says why) when Slurm refused; the job then just ends."""
    from gpuclinic.errors import GpuclinicError
    from gpuclinic.slurm.scontrol import Scontrol, this_node

    if not sup.interruptions or sup.interruptions[-1][1] != REQUEUE:
        return False
    cls = sup.interruptions[-1][0]
    try:
        sc = Scontrol(scontrol)
        node = this_node(None)
        st = sc.node(node)
        if st.drained and not st.ours:
            say(f"{node} is already {st.state} ({st.reason}); not touching its drain")
        else:
            sc.drain(node, requeue_reason(cls, sup.job))
            say(f"drained {node}: {requeue_reason(cls, sup.job)}")
        say(f"requeueing Slurm job {sup.job.job_id}")
        sc.requeue(sup.job.job_id)  # ends this batch script; nothing runs after this in practice
    except GpuclinicError as e:
        say(f"could not requeue Slurm job {sup.job.job_id}: {e}")
        return False
    return True
