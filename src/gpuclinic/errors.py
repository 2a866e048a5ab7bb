"""Errors that reach the user as one line and a non-zero exit code (never a traceback)."""

from __future__ import annotations


class GpuclinicError(Exception):
    """A problem the user can act on: bad input, unreadable file, refused request.

    ``exit_code`` is what the CLI exits with; 3 means "could not run" for doctor.
    """

    exit_code: int = 3

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(GpuclinicError):
    """Input that gpuclinic cannot read or does not recognise."""


class SourceUnavailable(Exception):
    """Raised inside a source when it cannot read; turned into a 'could not check X: why' line."""
