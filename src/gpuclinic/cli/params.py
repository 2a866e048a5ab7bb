"""Click parameter types shared by the commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # click >= 8.2 types ParamType by its value; older click (>= 8.1 is allowed) is not generic
    _FloatParam = click.ParamType[float, Any]
else:
    _FloatParam = click.ParamType


_F = TypeVar("_F", bound=Callable[..., Any])


def file_option(*decls: str, **kw: Any) -> Callable[[_F], _F]:
    """An option that names one file (a directory is refused): one spelling of its type and metavar
    for every command."""
    return click.option(*decls, type=click.Path(dir_okay=False), metavar="FILE", **kw)


def duration_option(*decls: str, default: str | None = None, **kw: Any) -> Callable[[_F], _F]:
    """An option that takes a duration its command parses (``90s``, ``30m``; a bare number is seconds,
    README "Durations"); a default is shown in --help."""
    if default is not None:
        kw.update(default=default, show_default=True)
    return click.option(*decls, metavar="DURATION", **kw)


class Seconds(_FloatParam):
    """A duration in seconds within [min, max]: ``90s``, ``5m``, ``2h`` or a bare number (seconds).

    README "Exit codes": durations take a unit in every command; a plain FloatRange refused ``30s``.
    """

    name = "duration"

    def __init__(self, min: float | None = None, max: float | None = None) -> None:
        self.min, self.max = min, max

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from gpuclinic.errors import InputError
        from gpuclinic.watch.config import parse_duration  # lazily: tomllib costs doctor's start-up

        try:
            s = parse_duration(value)
        except InputError:
            self.fail(f"{value!r} is not a duration (e.g. 30s, 5m, 2h; a bare number is seconds)", param, ctx)
        if (self.min is not None and s < self.min) or (self.max is not None and s > self.max):
            lo = "" if self.min is None else f"{self.min:g} s"
            hi = "" if self.max is None else f"{self.max:g} s"
            self.fail(f"{value!r} is not between {lo or '0 s'} and {hi or 'any length'}", param, ctx)
        return s


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``https://user:pw@host/x`` -> (``https://host/x``, user, pw).

    The URL is printed; the password never is.
    """
    from urllib.parse import unquote, urlsplit, urlunsplit

    try:
        u = urlsplit(url)
        user, pw = u.username, u.password
    except ValueError:  # e.g. an unclosed IPv6 bracket: the caller's own check says so
        return url, None, None
    if user is None and pw is None:
        return url, None, None
    netloc = u.netloc.rpartition("@")[2]
    return urlunsplit(u._replace(netloc=netloc)), unquote(user) if user else None, unquote(pw) if pw else None
