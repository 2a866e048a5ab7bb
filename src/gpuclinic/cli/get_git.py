"""``gpuclinic get git URL [DIR]``: a clone that picks the cheap strategy, uses mirrors and survives breaks.

Registered into the ``get`` group (cli/get.py) with ``get.add_command(git_cmd)``.
"""

from __future__ import annotations

import time

import click

from gpuclinic.errors import InputError


@click.command("git")
@click.argument("url")
@click.argument("directory", required=False, metavar="[DIR]")
@click.option(
    "--shallow",
    is_flag=True,
    help="Latest commit only (--depth 1 --single-branch): fastest, for throwaway use.",
)
@click.option(
    "--treeless",
    is_flag=True,
    help="Commits only, trees and files on demand (--filter=tree:0): for CI builds.",
)
@click.option("--full", is_flag=True, help="A full clone (no filter).")
@click.option(
    "--mirror",
    "mirrors",
    multiple=True,
    metavar="URL|ID",
    help="Mirror to fall back to (repeatable), applied as git -c url.MIRROR.insteadOf=ORIGIN; a URL "
    "such as https://gh-proxy.com/https://github.com/ or a mirror id from `gpuclinic net` (gh-proxy).",
)
@click.option("--mirror-first", is_flag=True, help="Try the mirror(s) before the origin.")
@click.option("-b", "--branch", metavar="NAME", help="Check out this branch or tag.")
@click.option(
    "--retries",
    type=click.IntRange(1, 20),
    default=3,
    show_default=True,
    help="Attempts per source for transfers that break.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def git_cmd(
    url: str,
    directory: str | None,
    shallow: bool,
    treeless: bool,
    full: bool,
    mirrors: tuple[str, ...],
    mirror_first: bool,
    branch: str | None,
    retries: int,
    quiet: bool,
) -> int:
    """Clone URL into DIR: blobless by default (all history, file contents fetched on demand), retrying
    broken transfers and falling back to mirrors, without touching your git config.
    """
    from gpuclinic.transfer.git import clone, scrub

    if sum((shallow, treeless, full)) > 1:
        raise InputError("choose one of --shallow, --treeless and --full")
    if mirror_first and not mirrors:
        raise InputError("--mirror-first needs --mirror")
    strategy = "shallow" if shallow else "treeless" if treeless else "full" if full else "blobless"
    t0 = time.monotonic()
    res = clone(
        url,
        directory,
        strategy=strategy,
        mirrors=mirrors,
        mirror_first=mirror_first,
        retries=retries,
        branch=branch,
        quiet=quiet,
    )
    url = scrub(url)
    if not quiet:
        via = "" if res.source == "origin" else f" via mirror {res.source}"
        extra = ", checkout resumed" if res.resumed else ""
        click.echo(
            f"gpuclinic: cloned {url} into {res.dest} ({res.strategy}{via}) in {time.monotonic() - t0:.1f}s, "
            f"{len(res.attempts)} attempt(s){extra}",
            err=True,
        )
        if res.ignored:
            click.echo(f'gpuclinic: a full clone, not {strategy}: git said "{res.ignored}"', err=True)
        if res.config:
            key, _, prefix = res.config[0].partition("=")
            base = scrub(key[len("url.") : -len(".insteadOf")])
            click.echo(
                f"gpuclinic: remote 'origin' is still {url}: later fetches"
                + (" (and files fetched on demand in this partial clone)" if res.strategy != "full" else "")
                + f" go there. To keep using the mirror in this clone only: "
                f'git -C {res.dest} config url."{base}".insteadOf {prefix}',
                err=True,
            )
    return 0
