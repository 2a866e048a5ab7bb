"""``gpuclinic get image REF``: a container image pulled over many ranged connections, resumable and verified.

Registered into the ``get`` group (cli/get.py) with ``get.add_command(image_cmd)``; the logic is in
transfer/oci.py (protocol) and transfer/oci_pull.py (blobs, layout, archive, load).
"""

from __future__ import annotations

import json

import click

from gpuclinic.errors import EXIT_USAGE, InputError


@click.command("image")
@click.argument("ref", metavar="REF")
@click.option(
    "-o",
    "--output",
    metavar="DIR|FILE",
    help="OCI layout directory (or .tar for docker-archive); default: ./NAME_TAG.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["oci", "docker-archive"]),
    default="oci",
    show_default=True,
    help="oci: an OCI image layout (skopeo, podman); docker-archive: a tar for `docker load`.",
)
@click.option(
    "--platform",
    metavar="OS/ARCH[/VARIANT]",
    help="Image to pick from a multi-arch list (default: this host, e.g. linux/amd64).",
)
@click.option(
    "--mirror",
    "mirrors",
    multiple=True,
    metavar="URL",
    help="Registry mirror tried before the origin (repeatable), e.g. https://mirror.gcr.io. Its login "
    "comes from REGISTRY_AUTH_FILE, ~/.docker/config.json or podman's auth.json (or user:password@ in "
    "the URL) and is never printed.",
)
@click.option(
    "--load",
    is_flag=True,
    help="Hand the image to a container runtime with `load` when done (see --runtime); the command is "
    "printed before it runs.",
)
@click.option(
    "--runtime",
    type=click.Choice(["auto", "docker", "podman"]),
    help="Runtime for --load. auto (default, or GPUCLINIC_RUNTIME): docker if its daemon answers, "
    "else podman.",
)
@click.option(
    "--insecure", is_flag=True, help="Allow plain HTTP and unverified TLS for non-loopback registries."
)
@click.option(
    "--connections",
    type=int,
    metavar="N",
    help="Fixed number of connections (default: adaptive, 16 growing to 64).",
)
@click.option(
    "--stall-timeout",
    type=float,
    default=20.0,
    show_default=True,
    metavar="S",
    help="Reconnect after S seconds without a byte.",
)
@click.option(
    "--cache-max",
    metavar="SIZE",
    help="Cap of the blob cache shared by all pulls (e.g. 20G; 0 keeps only this image): least recently "
    "used blobs are removed after the pull. Default: GPUCLINIC_BLOB_CACHE_MAX or 50G.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON result line.")
def image_cmd(
    ref: str,
    output: str | None,
    fmt: str,
    platform: str | None,
    mirrors: tuple[str, ...],
    load: bool,
    runtime: str | None,
    insecure: bool,
    connections: int | None,
    stall_timeout: float,
    cache_max: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Pull image REF ([REGISTRY/]NAME[:TAG][@DIGEST]) from Docker Hub, nvcr.io (NGC_API_KEY), ghcr.io, ...

    \b
    Every blob is fetched with parallel ranged connections, verified against its digest, and resumed
    by a rerun after an interruption; blobs already in the output or in the blob cache
    (GPUCLINIC_BLOB_CACHE, default ~/.cache/gpuclinic/oci; empty turns it off) are reused.
    """
    from gpuclinic.transfer.engine import EngineOptions
    from gpuclinic.transfer.oci_pull import pull, summary_line

    if runtime and not load:
        raise InputError("--runtime chooses the runtime for --load; add --load", exit_code=EXIT_USAGE)
    if connections is not None and not 1 <= connections <= 256:
        raise InputError("--connections must be between 1 and 256", exit_code=EXIT_USAGE)
    if not 0.1 <= stall_timeout <= 86400:
        raise InputError("--stall-timeout must be between 0.1 and 86400 seconds", exit_code=EXIT_USAGE)
    opts = EngineOptions(connections=connections, stall_timeout=stall_timeout)
    res = pull(
        ref,
        output=output,
        fmt=fmt,
        platform=platform,
        mirrors=mirrors,
        insecure=insecure,
        load=load,
        runtime=runtime,
        options=opts,
        quiet=quiet or as_json,
        cache_max_size=cache_max,
    )
    if as_json:
        click.echo(json.dumps(res.to_dict(), sort_keys=True))
    elif not quiet:
        click.echo(summary_line(res))
        if res.ratelimit:
            click.echo("rate limit: " + ", ".join(f"{k}={v}" for k, v in sorted(res.ratelimit.items())))
        if res.loaded_into:
            click.echo(f"loaded into {res.loaded_into}")
