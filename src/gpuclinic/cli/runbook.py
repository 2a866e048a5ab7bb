"""``gpuclinic runbook``: the step-by-step procedure for a failure code, filled in for one GPU."""

from __future__ import annotations

import re

import click

from gpuclinic.errors import EXIT_USAGE, InputError
from gpuclinic.model import GpuRef

_BUS = re.compile(r"^(?:PCI:)?(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?$")


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
    if bus_id is not None and not _BUS.match(bus_id):
        raise InputError(f"--bus {bus_id!r} is not a PCI bus id (e.g. 0000:3b:00.0)", exit_code=EXIT_USAGE)
    rb = get(code)
    if rb is None:
        raise InputError(f"no runbook for {code!r}: see `gpuclinic runbook --list`", exit_code=EXIT_USAGE)
    gpu, where = _gpu(gpu_index, bus_id)
    text = render_text(rb, gpu, code=code, markdown=markdown)
    if where and gpu is not None:
        head, _, rest = text.partition("\n")
        said = (
            f"GPU {gpu.index}: bus {gpu.pci_bus_id or '?'}, UUID {gpu.uuid or '?'} ({where} on this machine)"
        )
        text = f"{head}\n\n{said}{chr(10) if markdown else ''}\n{rest}"
    click.echo(text)
    return 0


def _gpu(index: int | None, bus: str | None) -> tuple[GpuRef | None, str | None]:
    """The GPU to fill commands with: what was given, completed from this machine (NVML, else
    nvidia-smi) when it has that GPU; and which of them said so."""
    if index is None and bus is None:
        return None, None
    from gpuclinic.facts.snapshot import normalize_bus_id
    from gpuclinic.sources.identify import identify

    given = GpuRef(index=index, pci_bus_id=normalize_bus_id(bus) if bus else None)
    found = identify(index, given.pci_bus_id)
    if found is None:
        return given, None
    live, where = found
    return (
        GpuRef(
            index=index if index is not None else live.index,
            pci_bus_id=given.pci_bus_id or live.pci_bus_id,
            uuid=live.uuid,
        ),
        where,
    )
