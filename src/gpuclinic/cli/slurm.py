"""``gpuclinic slurm healthcheck|prolog|epilog``: keep jobs off GPUs the doctor says to drain."""

from __future__ import annotations

import sys

import click

from gpuclinic.errors import EXIT_COULD_NOT_RUN, GpuclinicError


def _say(msg: str) -> None:
    click.echo(f"gpuclinic: {msg}", err=True)


_SCENARIO = click.option(
    "--scenario", metavar="NAME", help="Judge a simulated node (see `doctor --list-scenarios`)."
)
_NODE = click.option(
    "--node", metavar="NAME", help="Slurm node name (default SLURMD_NODENAME, else hostname -s)."
)
_SCONTROL = click.option(
    "--scontrol", "scontrol_path", metavar="PATH", help="scontrol binary (default: from PATH)."
)
_KLOG = click.option(
    "--kernel-log",
    "kernel_logs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="Also scan this kernel log file (repeatable).",
)


@click.group("slurm")
def slurm() -> None:
    """Slurm integration: HealthCheckProgram, NHC, Prolog and Epilog (see docs/slurm.md)."""


@slurm.command("healthcheck")
@_SCENARIO
@_NODE
@_SCONTROL
@_KLOG
@click.option(
    "--report-only",
    is_flag=True,
    help="Print the verdict and drain reason, change nothing (for NHC, which drains itself).",
)
def healthcheck(
    scenario: str | None,
    node: str | None,
    scontrol_path: str | None,
    kernel_logs: tuple[str, ...],
    report_only: bool,
) -> int:
    """Run the quick doctor; drain this node on a drain verdict, resume it when gpuclinic drained it and
    the cause has cleared. Nodes drained by anyone else are never touched.

    Exit codes: 0 healthy, 1 warning, 2 drain, 3 could not judge or could not reach Slurm.
    """
    from gpuclinic.slurm.health import judge, reconcile, run_doctor
    from gpuclinic.slurm.scontrol import Scontrol, this_node

    name = this_node(node)
    j = judge(run_doctor(scenario, kernel_logs=kernel_logs))
    if report_only:
        if j.verdict is None:
            click.echo(f"could not judge: {j.why_unjudged}")
            return EXIT_COULD_NOT_RUN
        click.echo(j.reason() if j.problems else j.verdict.value)
        return j.verdict.exit_code
    sc = Scontrol(scontrol_path)
    state = sc.node(name)
    act = reconcile(j, state, sc)
    _say(act.message)
    if j.verdict is None:
        return EXIT_COULD_NOT_RUN
    return j.verdict.exit_code


def _job_check(
    kind: str,
    scenario: str | None,
    node: str | None,
    scontrol_path: str | None,
    kernel_logs: tuple[str, ...],
    drain: bool,
) -> tuple[bool, str, bool]:
    """(blocked, message, node_drained) for the job's GPUs; drains this node with a gpuclinic reason when
    blocked.  ``node_drained`` says the node is out of service now (drained here, before, or by others)."""
    from gpuclinic.slurm.health import Judgement, blocking_for_job, job_gpu_tokens, run_doctor
    from gpuclinic.slurm.scontrol import Scontrol, SlurmError, this_node

    report = run_doctor(scenario, kernel_logs=kernel_logs)
    var, tokens = job_gpu_tokens()
    blocking = blocking_for_job(report, tokens)
    where = f"{var}={','.join(tokens or [])}" if var else "all GPUs (no SLURM_JOB_GPUS/CUDA_VISIBLE_DEVICES)"
    if not blocking:
        return False, f"{kind}: job GPUs ok ({where}; node verdict {report.verdict.value})", False
    j = Judgement(verdict=report.verdict, problems=blocking)
    msg = f"{kind}: {j.reason()} on the job's GPUs ({where})"
    drained = False
    if drain:
        name = this_node(node)
        sc = Scontrol(scontrol_path)
        try:
            st = sc.node(name)
        except SlurmError as e:
            raise SlurmError(f"{j.reason()}: {e}") from None
        if st.drained and not st.ours:
            msg += f"; node already {st.state} by someone else, not touched"
        elif st.drained and st.reason == j.reason():
            msg += f"; {name} already drained for it"
        else:
            sc.drain(name, j.reason())
            msg += f"; drained {name}"
        drained = True
    return True, msg, drained


@slurm.command("prolog")
@_SCENARIO
@_NODE
@_SCONTROL
@_KLOG
@click.option(
    "--no-drain", is_flag=True, help="Only refuse the job; let Slurm drain the node ('Prolog error')."
)
def prolog(
    scenario: str | None,
    node: str | None,
    scontrol_path: str | None,
    kernel_logs: tuple[str, ...],
    no_drain: bool,
) -> int:
    """Refuse a job that would land on a GPU with an open critical problem.

    Exit 1 refuses (Slurm drains the node and requeues the job, held); before that the node is drained
    with a `gpuclinic:` reason so `slurm healthcheck` can resume it once the cause clears. Exit 0 lets
    the job start. If the check itself cannot run, the job starts (exit 0) and the reason is logged;
    a problem found but not drainable here still refuses the job (exit 1: Slurm drains, 'Prolog error').
    A typo in the Prolog line is logged the same way: any non-zero prolog exit would drain every node.
    """
    from gpuclinic.slurm.scontrol import SlurmError

    try:
        blocked, msg, _ = _job_check("prolog", scenario, node, scontrol_path, kernel_logs, drain=not no_drain)
    except (
        SlurmError
    ) as e:  # Slurm is reached only after a GPU was judged bad: refuse, Slurm drains ("Prolog error")
        _say(f"prolog: found a problem on the job's GPUs but could not drain ({e}); refusing the job")
        return 1
    except GpuclinicError as e:  # any non-zero exit drains the node: a check that cannot run must not
        _say(f"prolog: could not check ({e}); letting the job start")
        return 0
    _say(msg)
    return 1 if blocked else 0


@slurm.command("epilog")
@_SCENARIO
@_NODE
@_SCONTROL
@_KLOG
@click.option("--no-drain", is_flag=True, help="Only exit 1 on a problem; let Slurm drain ('Epilog error').")
def epilog(
    scenario: str | None,
    node: str | None,
    scontrol_path: str | None,
    kernel_logs: tuple[str, ...],
    no_drain: bool,
) -> int:
    """Check the job's GPUs after it ended; drain this node (gpuclinic reason) if one needs it.

    Exit 0 when fine or when gpuclinic drained the node itself; 1 when a problem was found and not
    drained here (Slurm then drains with 'Epilog error').
    """
    from gpuclinic.slurm.scontrol import SlurmError

    try:
        blocked, msg, drained = _job_check(
            "epilog", scenario, node, scontrol_path, kernel_logs, drain=not no_drain
        )
    except SlurmError as e:  # a problem was found but the drain failed: let Slurm drain ("Epilog error")
        _say(f"epilog: found a problem but could not drain ({e})")
        return 1
    except GpuclinicError as e:
        if e.exit_code == 64:
            raise
        _say(f"epilog: could not check ({e})")
        return 0
    _say(msg)
    return 1 if blocked and not drained else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(slurm())
