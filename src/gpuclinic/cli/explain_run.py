"""What ``gpuclinic explain`` does, and a plain-argv parser so the common invocations skip click.

``gpuclinic explain --offline LOG`` is the path that must feel instant on a big log: importing click
(and the ``inspect`` it pulls in) is a large part of the start-up.  :func:`parse_plain` takes only argv
it can read exactly as the click command in :mod:`gpuclinic.cli.explain` would (its three flags, one
``FILE`` or ``-``) and returns None for anything else (``--help``, ``--json=x``, ``--``, a second file, a
path click's ``Path(dir_okay=False)`` would refuse), which then goes through click.  tests/cli check the
two agree on every option.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

from gpuclinic.cli.doctor_run import echo, emit, output_format

# the flags of the click command: flag -> keyword of run_explain
PLAIN_FLAGS: dict[str, str] = {"--json": "as_json", "--markdown": "as_markdown", "--offline": "offline"}


def _plain_file(tok: str) -> bool:
    """True when click's ``Path(dir_okay=False, allow_dash=True)`` passes ``tok`` through unchanged."""
    if tok == "-":
        return True
    if not tok:
        return False  # click's call: an empty name is rare enough to leave to it
    try:
        st = os.stat(tok)
    except OSError:
        return True  # a missing file: read_input says so, as after click
    import stat

    return not stat.S_ISDIR(st.st_mode) and os.access(tok, os.R_OK)


def parse_plain(argv: list[str]) -> dict[str, Any] | None:
    """``run_explain`` keywords for ``argv`` (after ``explain``), or None to let click parse it."""
    kw: dict[str, Any] = {}
    for tok in argv:
        dest = PLAIN_FLAGS.get(tok)
        if dest is not None:
            kw[dest] = True  # a repeated flag is still just on, as in click
        elif tok.startswith("-") and tok != "-":
            return None  # --help, -h, --json=x, --, an unknown option: click's job
        elif "file" in kw or not _plain_file(tok):
            return None  # a second FILE (click's "unexpected extra argument") or a path click refuses
        else:
            kw["file"] = tok
    return kw


def run_explain(
    file: str | None = None, as_json: bool = False, as_markdown: bool = False, offline: bool = False
) -> int:
    """The explain command: read the text, explain it, print the report, return its exit code."""
    # no cycle collection during the run (imports included): a big log's lists of 250 000 lines were
    # walked by each full collection, and one run makes few cycles
    paused = gc.isenabled()
    gc.disable()
    try:
        # the input first: a big log's greps start from its bytes while the readers load (scanplan)
        from gpuclinic.textinput import read_input

        fmt = output_format(as_json, as_markdown)
        if file is None and sys.stdin.isatty():
            echo("Paste the error (end with Ctrl-D):", err=True)
        text, origin, truncated = read_input(file)
        from gpuclinic.explain import explain_text, live_facts

        live = None if offline else live_facts()
        report = explain_text(text, origin, live, truncated=truncated)
        try:  # (still without collections: the renderer's imports made a full one walk the big log's lines)
            emit(report, fmt)
        except BrokenPipeError:
            sys.stderr.close()
    finally:
        if paused:
            gc.enable()
    return report.exit_code
