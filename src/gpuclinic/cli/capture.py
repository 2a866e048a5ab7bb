"""``gpuclinic capture``: save this server's snapshot and raw outputs as one tar.gz for ``doctor --from``."""

from __future__ import annotations

from typing import Any

import click

from gpuclinic.cli.bmc_opts import bmc_options, bmc_target
from gpuclinic.cli.params import file_option
from gpuclinic.collect import CollectOptions
from gpuclinic.sources import capture as cap


@click.command("capture")
@file_option("-o", "--output", help="Bundle path (default: ./gpuclinic-capture-HOST-TIME.tar.gz).")
@click.option("--redact", is_flag=True,
              help="Mask serials, UUIDs, hostnames, IP and MAC addresses (consistently across files).")
@click.option("--quick", is_flag=True, help="Skip timed measurements (host sampling window).")
@bmc_options
def capture(output: str | None, redact: bool, quick: bool, **bmc: Any) -> int:
    """Save a snapshot and the raw outputs it came from as one tar.gz.

    Another machine reads it with `gpuclinic doctor --from FILE`. Tokens and secrets from the
    environment never enter the bundle; --redact also masks identifiers. --bmc/--redfish add the
    server room as doctor reads it; the BMC password never enters the bundle either.
    """
    target = bmc_target(**bmc)  # usage errors (exit 64) before anything is collected
    if output:
        cap.check_output(output)  # before collecting, not after
    bundle = cap.gather(CollectOptions(quick=quick, bmc=target))
    given = {"bmc-password": target.password or "", "redfish-password": target.redfish_password or ""}
    files = cap.render_files(bundle, redact, secrets_given=given)
    path = output or cap.default_name(bundle.snapshot, redact)
    cap.write_bundle(files, path)
    n_gpu = len(bundle.snapshot.gpus)
    click.echo(f"wrote {path}: {len(files)} files, {n_gpu} GPU(s){', redacted' if redact else ''}")
    if bundle.failed:
        what = "; ".join(f"{f['what']} ({f['why']})" for f in bundle.failed[:6])
        more = f" and {len(bundle.failed) - 6} more" if len(bundle.failed) > 6 else ""
        click.echo(f"could not collect: {what}{more}", err=True)
    click.echo(f"read it anywhere with: gpuclinic doctor --from {path}", err=True)
    return 0
