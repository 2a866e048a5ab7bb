"""``--bmc``/``--redfish`` options shared by ``doctor`` and ``watch``: where the BMC is and how to log in.

The password comes from ``IPMI_PASSWORD`` / ``REDFISH_PASSWORD`` or a file; ``--bmc-password`` is
accepted for completeness but warned about (other users see argv in ``ps``). It is handed to ipmitool
through its environment and to Redfish through HTTP Basic auth, never printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuclinic.cli.params import Seconds, split_credentials
from gpuclinic.errors import EXIT_USAGE, InputError

# the BMC client (ssl, httpx) loads only when --bmc/--redfish is given: ~30 ms of doctor's start
if TYPE_CHECKING:
    from gpuclinic.sources.bmc.live import BmcOptions

F = TypeVar("F", bound=Callable[..., Any])


def bmc_options(fn: F) -> F:
    opts = [
        click.option(
            "--bmc",
            "bmc_host",
            metavar="HOST[:PORT]",
            help="Read this BMC over IPMI LAN (ipmitool lanplus). "
            "Password: IPMI_PASSWORD or --bmc-password-file.",
        ),
        click.option("--bmc-user", metavar="USER", help="BMC user name (IPMI and Redfish)."),
        click.option(
            "--bmc-password-file",
            type=click.Path(),
            metavar="FILE",
            help="File whose first line is the BMC password.",
        ),
        click.option(
            "--bmc-password",
            metavar="PASSWORD",
            help="BMC password (visible to other users in ps; prefer IPMI_PASSWORD or --bmc-password-file).",
        ),
        click.option(
            "--bmc-cipher",
            type=click.IntRange(0, 17),
            metavar="N",
            help="IPMI cipher suite (default: ipmitool's, then 3 if the BMC refuses it).",
        ),
        click.option(
            "--redfish",
            "redfish_url",
            metavar="URL",
            help="Read this BMC over Redfish (https://HOST[:PORT]). "
            "Password: REDFISH_PASSWORD, IPMI_PASSWORD or --bmc-password-file.",
        ),
        click.option(
            "--redfish-ca", type=click.Path(), metavar="FILE", help="CA bundle for the BMC's certificate."
        ),
        click.option(
            "--redfish-insecure", is_flag=True, help="Do not verify the BMC's TLS certificate (self-signed)."
        ),
        click.option(
            "--bmc-timeout",
            type=Seconds(1, 300),
            default=15.0,
            show_default=True,
            metavar="S",
            help="Seconds per BMC call.",
        ),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _read_password_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().rstrip("\r\n")
    except OSError as e:
        raise InputError(
            f"--bmc-password-file {path}: {e.strerror or 'unreadable'}", exit_code=EXIT_USAGE
        ) from None


def bmc_target(
    bmc_host: str | None = None,
    bmc_user: str | None = None,
    bmc_password_file: str | None = None,
    bmc_password: str | None = None,
    bmc_cipher: int | None = None,
    redfish_url: str | None = None,
    redfish_ca: str | None = None,
    redfish_insecure: bool = False,
    bmc_timeout: float = 15.0,
) -> BmcOptions:
    """BmcOptions from the CLI flags and the environment (usage errors are one line, exit 64)."""
    from gpuclinic.sources.bmc.live import BmcOptions

    o = BmcOptions(timeout_s=bmc_timeout, cipher=bmc_cipher)
    if bmc_host:
        host, _, port = bmc_host.rpartition(":") if bmc_host.count(":") == 1 else (bmc_host, "", "")
        if port and not port.isdigit():
            raise InputError(f"--bmc {bmc_host}: port must be a number", exit_code=EXIT_USAGE)
        o.host, o.port = host or bmc_host, int(port) if port else 623
    if redfish_url:
        redfish_url, url_user, url_pw = split_credentials(redfish_url)
        if not redfish_url.startswith(("https://", "http://")) and "://" in redfish_url:
            raise InputError(f"--redfish {redfish_url}: use https://HOST[:PORT]", exit_code=EXIT_USAGE)
        bmc_user = bmc_user or url_user
        if url_pw is not None and not bmc_password_file:
            o.redfish_password = url_pw
        o.redfish = redfish_url
    o.user = bmc_user or os.environ.get("IPMI_USER") or None
    if bmc_password_file:
        if not os.path.isfile(bmc_password_file):
            raise InputError(f"--bmc-password-file {bmc_password_file}: no such file", exit_code=EXIT_USAGE)
        o.password_file = bmc_password_file
        o.redfish_password = _read_password_file(bmc_password_file)
    if bmc_password is not None:
        click.echo(
            "gpuclinic: note: --bmc-password is visible to other users in ps; prefer IPMI_PASSWORD", err=True
        )
        o.password = bmc_password
        o.password_file = None
    elif not bmc_password_file and os.environ.get("IPMI_PASSWORD") is not None:
        o.password = os.environ["IPMI_PASSWORD"]
    if os.environ.get("REDFISH_PASSWORD") is not None and o.redfish_password is None:
        o.redfish_password = os.environ["REDFISH_PASSWORD"]
    if redfish_ca:
        if not os.path.isfile(redfish_ca):
            raise InputError(f"--redfish-ca {redfish_ca}: no such file", exit_code=EXIT_USAGE)
        o.redfish_verify = redfish_ca
    elif redfish_insecure:
        o.redfish_verify = False
    return o
