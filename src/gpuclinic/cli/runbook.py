"""``gpuclinic runbook``: the step-by-step procedure for a failure code, filled in for one GPU."""

from __future__ import annotations

import click

from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.model import GpuRef


@click.command("runbook")
@click.argument("code", required=False)
@click.option("--gpu", "gpu_index", type=click.IntRange(min=0), metavar="N",
              help="Fill the commands in for GPU N.")
@click.option("--bus", "bus_id", metavar="BUS", help="Fill the commands in for this PCI bus id.")
@click.option("--markdown", is_flag=True, help="Print Markdown (for a ticket).")
@click.option("--list", "list_all", is_flag=True, help="List every runbook and the codes that lead to it.")
def runbook(
    code: str | None, gpu_index: int | None, bus_id: str | None, markdown: bool, list_all: bool
) -> int:
    """Print the runbook for CODE (a finding code such as gpu.fallen_off_bus or xid.79).

    Exit codes: 0 printed, 64 unknown code or bad usage.
    """
    from gpuclinic.knowledge import codes as K
    from gpuclinic.knowledge.runbooks import WHO, all_runbooks, get, render_text

    if list_all:
        by: dict[str, list[str]] = {}
        for c in K.all_codes():
            by.setdefault(c.runbook, []).append(c.code)
        for one in all_runbooks():
            codes = ", ".join(x for x in by.get(one.id, []) if x != one.id)
            click.echo(
                f"{one.id:40} {one.title}"
                + (f"  (also for: {codes})" if codes else "")
                + f"  [{WHO.get(one.who, one.who).split(' (')[0]}]"
            )
        return 0
    if not code:
        raise InputError(
            "give a code (e.g. gpuclinic runbook gpu.fallen_off_bus) or --list", exit_code=EXIT_USAGE
        )
    rb = get(code)
    if rb is None:
        raise InputError(f"no runbook for {code!r}: see `gpuclinic runbook --list`", exit_code=EXIT_USAGE)
    click.echo(render_text(rb, _gpu(gpu_index, bus_id), code=code, markdown=markdown))
    return 0


def _gpu(index: int | None, bus: str | None) -> GpuRef | None:
    """The GPU to fill commands with (index and/or bus id as given; the UUID stays a placeholder)."""
    if index is None and bus is None:
        return None
    return GpuRef(index=index, pci_bus_id=bus)
