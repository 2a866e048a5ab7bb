"""``gpuclinic get``: fast, resumable, verified downloads.

Forms: ``gpuclinic get URL``, ``gpuclinic get hf ORG/NAME`` (or ``get hf://ORG/NAME``) and
``gpuclinic get git URL`` (network area).  ``get`` is a click group whose resolver routes a first
argument that looks like a URL to the ``url`` subcommand, so the short form needs no keyword.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import click

from gpuclinic.cli.params import Seconds
from gpuclinic.errors import InputError, require_writable_dir

if TYPE_CHECKING:
    from gpuclinic.transfer.engine import EngineOptions

_URL_RE = re.compile(r"^(https?|hf)://", re.I)


class GetGroup(click.Group):
    """A group whose first argument may be a URL (``get URL``) or ``hf://org/name``, not a subcommand."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and _URL_RE.match(args[0]):
            name = "hf" if args[0].lower().startswith("hf://") else "url"
            cmd = self.commands[name]
            return name, cmd, args
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "URL [OPTIONS] | hf ORG/NAME [OPTIONS] | git URL [DIR]")


@click.group("get", cls=GetGroup, invoke_without_command=False)
def get() -> None:
    """Fast, resumable, verified downloads: a URL, a Hugging Face repo, or a git repo.

    \b
    gpuclinic get https://host/file.bin [-o PATH] [--sha256 HEX] [--mirror URL]
    gpuclinic get hf ORG/NAME [--revision R] [--include GLOB] [--exclude GLOB]
    gpuclinic get git URL [DIR]
    """


def _engine_options(connections: int | None, stall_timeout: float) -> EngineOptions:
    from gpuclinic.transfer.engine import EngineOptions

    if connections is not None and not 1 <= connections <= 256:
        raise InputError("--connections must be between 1 and 256")
    if not 0.1 <= stall_timeout <= 86400:  # 0 or negative would reconnect forever; nan fails too
        raise InputError("--stall-timeout must be between 0.1 and 86400 seconds")
    return EngineOptions(connections=connections, stall_timeout=stall_timeout)


# how long a connection may sit without a byte before it is reopened: the same for get url and get hf
_stall_timeout = click.option(
    "--stall-timeout",
    type=Seconds(min=0.1, max=86400),
    default=20.0,
    show_default=True,
    metavar="S",
    help="Reconnect after S seconds without a byte.",
)


def _dest_for(url: str, output: str | None) -> Path:
    name = Path(unquote(urlsplit(url).path)).name
    if not name or name in (".", "..") or "\\" in name or "\x00" in name:
        name = "download"
    if output is None:
        return Path.cwd() / name
    out = Path(output)
    if out.is_dir() or output.endswith(("/", "\\")):
        return out / name
    return out


def _file_sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _say_restart(what: str, job: object) -> None:
    """The engine threw a partial download away: say why, once, on stderr (even with -q)."""
    if what == "restart":
        label = getattr(job, "label", "file")
        click.echo(
            f"gpuclinic get: {label}: the server ignored the Range header, so the partial download "
            "cannot be resumed; starting over from the beginning",
            err=True,
        )


@get.command("url")
@click.argument("url")
@click.option(
    "-o",
    "--output",
    metavar="PATH",
    help="File (or existing directory) to write; default: the URL's file name.",
)
@click.option(
    "--sha256",
    "sha256",
    metavar="HEX",
    help="Expected sha256; the file is verified before it is renamed into place.",
)
@click.option(
    "--connections",
    type=int,
    metavar="N",
    help="Fixed number of connections (default: adaptive, 16 growing to 64).",
)
@click.option(
    "--mirror",
    "mirrors",
    multiple=True,
    metavar="URL",
    help="Another URL with the same bytes (failover). Repeatable.",
)
@_stall_timeout
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON result line per file.")
@click.option(
    "-f",
    "--force",
    is_flag=True,
    help="Replace an existing file at the output path (default: refuse, "
    "unless --sha256 matches it, then skip).",
)
def url_cmd(
    url: str,
    output: str | None,
    sha256: str | None,
    connections: int | None,
    mirrors: tuple[str, ...],
    stall_timeout: float,
    quiet: bool,
    as_json: bool,
    force: bool,
) -> None:
    """Download one HTTP(S) file with parallel ranged connections, resume and verification."""
    from gpuclinic.transfer.engine import Engine, FileSpec
    from gpuclinic.transfer.progress import ProgressDisplay
    from gpuclinic.transfer.redact import safe_url

    for u in (url, *mirrors):
        try:
            p = urlsplit(u)
            ok = p.scheme in ("http", "https") and bool(p.hostname) and (p.port is None or p.port > 0)
        except ValueError:  # "http://[::1", "http://h:99999/"
            ok = False
        if not ok:
            raise InputError(f"not an http(s) URL: {safe_url(u)}")
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise InputError("--sha256 must be 64 hex digits")
    dest = _dest_for(url, output).absolute()
    if not dest.parent.is_dir():
        raise InputError(f"directory does not exist: {dest.parent}")
    require_writable_dir(dest.parent, f"-o {output or dest}")
    if sha256 and dest.is_file() and _file_sha256(dest) == sha256.lower():
        # already there and verified: nothing to fetch (like aria2c's "download completed")
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "path": str(dest),
                        "size": dest.stat().st_size,
                        "sha256": sha256.lower(),
                        "status": "skipped",
                        "downloaded": 0,
                    },
                    sort_keys=True,
                )
            )
        elif not quiet:
            click.echo(str(dest))
        return
    if (dest.exists() or dest.is_symlink()) and not force:
        why = "does not match --sha256" if sha256 else "would be replaced"
        raise InputError(
            f"{dest} already exists and {why}; pass --force to replace it"
            + ("" if sha256 else ", or --sha256 HEX to verify it and skip the download")
        )
    spec = FileSpec(
        dest=dest, sources=[url, *mirrors], sha256=sha256.lower() if sha256 else None, label=dest.name
    )
    engine = Engine(_engine_options(connections, stall_timeout), on_event=_say_restart)
    with ProgressDisplay(engine, quiet=quiet or as_json):
        results = engine.run([spec])
    r = results[0]
    if as_json:
        click.echo(json.dumps(r.to_dict(), sort_keys=True))
    if r.status == "failed":
        from gpuclinic.transfer.engine import DownloadError

        kept = dest.with_name(dest.name + ".gpuclinic-part").exists()
        raise DownloadError(
            f"{r.error}" + ("; partial download kept, rerun the same command to resume" if kept else "")
        )
    if not as_json and not quiet:
        click.echo(str(dest))


@get.command("hf")
@click.argument("repo")
@click.option("--revision", default=None, metavar="R", help="Branch, tag or commit (default: main).")
@click.option(
    "--include", "include", multiple=True, metavar="GLOB", help="Only files matching GLOB (repeatable)."
)
@click.option(
    "--exclude", "exclude", multiple=True, metavar="GLOB", help="Skip files matching GLOB (repeatable)."
)
@click.option("--repo-type", type=click.Choice(["model", "dataset"]), default="model", show_default=True)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    help="Hub cache directory (default: HF_HUB_CACHE or HF_HOME/hub).",
)
@click.option("--connections", type=int, metavar="N", help="Fixed number of connections (default: adaptive).")
@_stall_timeout
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON result line per file and a summary line."
)
def hf_cmd(
    repo: str,
    revision: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    repo_type: str,
    cache_dir: str | None,
    connections: int | None,
    stall_timeout: float,
    quiet: bool,
    as_json: bool,
) -> None:
    """Download a Hugging Face repo into the standard Hub cache (offline-loadable by transformers)."""
    from gpuclinic.transfer.hf import download_repo

    opts = _engine_options(connections, stall_timeout)
    summary = download_repo(
        repo,
        revision=revision,
        include=list(include),
        exclude=list(exclude),
        repo_type=repo_type,
        cache_dir=cache_dir,
        options=opts,
        quiet=quiet or as_json,
    )
    if as_json:
        for line in summary.json_lines():
            click.echo(line)
    elif not quiet:
        click.echo(str(summary.snapshot_dir))


from gpuclinic.cli.get_git import git_cmd  # noqa: E402  (get git: network area, cli/get_git.py)

get.add_command(git_cmd)

from gpuclinic.cli.get_image import image_cmd  # noqa: E402  (get image: transfer/oci*.py)

get.add_command(image_cmd)
