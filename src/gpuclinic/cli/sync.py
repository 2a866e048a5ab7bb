"""``gpuclinic sync SRC DST``: laptop <-> server copies over several ssh connections (real rsync and ssh).

The logic is in transfer/sync.py (endpoints, file lists), sync_probe.py (path probes, ssh diagnosis),
sync_plan.py (the plan) and sync_run.py (streams, block ranges, verification, --delete).
"""

from __future__ import annotations

import json

import click


@click.command("sync")
@click.argument("src")
@click.argument("dst")
@click.option(
    "-e",
    "--rsh",
    metavar="COMMAND",
    help="Remote shell, as for rsync (e.g. 'ssh -p 2222 -i key'); ~/.ssh/config aliases work.",
)
@click.option(
    "--streams", type=int, metavar="N", help="Parallel ssh streams (default: measured, up to --max-streams)."
)
@click.option("--max-streams", type=click.IntRange(1, 64), default=16, show_default=True, metavar="N")
@click.option(
    "--compress",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    help="auto: only when the data shrinks and the link is slower than the CPUs.",
)
@click.option(
    "-n",
    "--dry-run",
    is_flag=True,
    help="Measure the link and print the plan (and what --delete would remove).",
)
@click.option(
    "--delete",
    is_flag=True,
    help="Remove destination files and directories the source does not have (as rsync --delete-after: "
    "only once everything else arrived and checked out). A single-file SRC deletes nothing.",
)
@click.option(
    "--no-verify",
    is_flag=True,
    help="Skip the final sha256 comparison of small files (big files are always verified).",
)
@click.option("--no-probe", is_flag=True, help="Do not measure the link (use --streams or the default of 8).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and result as one JSON line.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or plan output.")
def sync(
    src: str,
    dst: str,
    rsh: str | None,
    streams: int | None,
    max_streams: int,
    compress: str,
    dry_run: bool,
    delete: bool,
    no_verify: bool,
    no_probe: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Copy SRC to DST (one of them HOST:PATH) like `rsync -a`, but over parallel ssh streams.

    \b
    DST is a directory. SRC `dir/` copies the contents of dir, SRC `dir` the directory itself.
    Interrupted? Run the same command again: finished files are skipped, big files resume
    block by block. Every file is checked with sha256 on both sides at the end.
    """
    from gpuclinic.transfer.sync_plan import SyncOptions
    from gpuclinic.transfer.sync_run import sync as run_sync

    opts = SyncOptions(
        rsh=rsh,
        streams=streams,
        max_streams=max_streams,
        compress=compress,
        dry_run=dry_run,
        delete=delete,
        verify=not no_verify,
        probe=not no_probe,
        quiet=quiet or as_json,
    )
    plan, res = run_sync(src, dst, opts)
    if as_json:
        click.echo(json.dumps(res.to_dict() if res else plan.to_dict(), sort_keys=True))
        return
    if quiet:
        return
    for line in plan.lines():
        click.echo(line)
    if res is not None:
        rate = res.sent / res.seconds if res.seconds else 0.0
        click.echo(
            f"done: {res.sent / 2**20:.1f} MiB sent in {res.seconds:.1f} s ({rate / 2**20:.1f} MiB/s), "
            f"{res.verified} files verified (sha256)"
            + (f", {len(res.repaired)} repaired" if res.repaired else "")
            + (f", {res.deleted} deleted" if res.deleted else "")
        )
