"""Errors that reach the user as one line and a non-zero exit code (never a traceback)."""

from __future__ import annotations

import os

# Exit codes shared by every command.  Verdicts use 0 (healthy / nothing found), 1 (warning) and
# 2 (drain / critical); 3 means the command ran but could not judge (e.g. no GPU data at all).
# Usage and input errors (a bad flag or value, a missing or unreadable file, unrecognised input)
# use EXIT_USAGE, which no verdict uses, so a typo in a health-check script never drains a node.
EXIT_COULD_NOT_RUN = 3
EXIT_USAGE = 64


class GpuclinicError(Exception):
    """A problem the user can act on: bad input, unreadable file, refused request.

    ``exit_code`` is what the CLI exits with: EXIT_COULD_NOT_RUN unless a subclass says otherwise.
    """

    exit_code: int = EXIT_COULD_NOT_RUN

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(GpuclinicError):
    """Input that gpuclinic cannot read or does not recognise: exits EXIT_USAGE (64), never a verdict code."""

    exit_code: int = EXIT_USAGE


class SourceUnavailable(Exception):
    """Raised inside a source when it cannot read; turned into a 'could not check X: why' line."""


def require_writable_dir(directory: str | os.PathLike[str], label: str) -> None:
    """Refuse an output path whose directory cannot take a new file, before any work is done.

    A trial file, not ``os.access``: root passes ``access()`` on read-only mounts such as /sys.
    """
    import tempfile  # not at module level: errors is on every command's start-up path

    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise InputError(f"{label}: cannot write in {directory} ({e.strerror or e})") from None
