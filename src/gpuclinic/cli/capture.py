"""``gpuclinic capture``: save this server's snapshot and raw outputs as one tar.gz for ``doctor --from``."""

from __future__ import annotations

import click

from gpuclinic.collect import CollectOptions
from gpuclinic.sources import capture as cap


@click.command("capture")
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="FILE",
              help="Bundle path (default: ./gpuclinic-capture-HOST-TIME.tar.gz).")
@click.option("--redact", is_flag=True,
              help="Mask serials, UUIDs, hostnames, IP and MAC addresses (consistently across files).")
@click.option("--quick", is_flag=True, help="Skip timed measurements (host sampling window).")
def capture(output: str | None, redact: bool, quick: bool) -> int:
    """Save a snapshot and the raw outputs it came from as one tar.gz.

    Another machine reads it with `gpuclinic doctor --from FILE`. Tokens and secrets from the
    environment never enter the bundle; --redact also masks identifiers.
    """
    if output:
        cap.check_output(output)  # before collecting, not after
    bundle = cap.gather(CollectOptions(quick=quick))
    files = cap.render_files(bundle, redact)
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
