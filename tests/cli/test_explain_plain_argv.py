"""``gpuclinic explain`` parses plain argv without click (issue 14: a 19 MB log in <= 0.3 s); the click
command stays the definition: every argv the plain parser takes must mean exactly what click makes of
it, everything else must go to click, and both paths print the same report."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from gpuclinic.cli import _group, main
from gpuclinic.cli.explain import explain
from gpuclinic.cli.explain_run import PLAIN_FLAGS, parse_plain, run_explain

ROOT = Path(__file__).resolve().parents[2]
ERRORS = ROOT / "tests" / "fixtures" / "software" / "errors"
KERNEL = ROOT / "tests" / "fixtures" / "kernel_log"
_DEFAULTS = {name: p.default for name, p in inspect.signature(run_explain).parameters.items()}


def _click_params(argv: list[str]) -> dict[str, Any]:
    return dict(explain.make_context("explain", list(argv)).params)


def test_plain_flags_are_the_click_flags() -> None:
    opts = {o: p for p in explain.params if isinstance(p, click.Option) for o in p.opts}
    assert set(opts) == set(PLAIN_FLAGS)  # a new option must be taught to the plain parser
    for flag, dest in PLAIN_FLAGS.items():
        assert opts[flag].name == dest and opts[flag].is_flag, flag
    (arg,) = [p for p in explain.params if isinstance(p, click.Argument)]
    assert arg.name == "file" and isinstance(arg.type, click.Path) and not arg.type.dir_okay


def test_defaults_are_clicks() -> None:
    assert _click_params([]) == _DEFAULTS


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-"],
        ["--offline", "x.log"],
        ["x.log", "--json", "--offline"],
        ["--markdown", "-", "--offline", "--offline"],
        ["--json", "--markdown", "no/such/file.log"],  # parsed alike; run_explain refuses the pair
        [str(ERRORS / "cublas_cntk_379.txt")],
    ],
)
def test_plain_parse_equals_click(argv: list[str]) -> None:
    plain = parse_plain(argv)
    assert plain is not None
    assert {**_DEFAULTS, **plain} == _click_params(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["-h"],
        ["--json=yes"],
        ["--jsn"],
        ["--", "x.log"],
        ["a.log", "b.log"],
        ["-x.log"],
        [""],
        [str(ERRORS)],  # a directory: click.Path(dir_okay=False) says so
    ],
)
def test_anything_doubtful_goes_to_click(argv: list[str]) -> None:
    assert parse_plain(argv) is None


def test_unreadable_file_goes_to_click(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "secret.log"
    f.write_text("x")
    assert parse_plain([str(f)]) is not None
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # as for a non-root user on a 0600 file
    assert parse_plain([str(f)]) is None


def _run(fn: Any, argv: list[str]) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rv = fn(argv)
        except SystemExit as e:
            rv = e.code
    return rv, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("fmt", [["--json"], ["--markdown"], []])
@pytest.mark.parametrize("name", ["nccl_system_error_h100_1016.txt", "gpu-burn-1-aer-fatal-xid79.log"])
def test_both_paths_print_the_same_report(fmt: list[str], name: str) -> None:
    path = ERRORS / name if (ERRORS / name).exists() else KERNEL / name
    argv = ["explain", "--offline", *fmt, str(path)]
    assert parse_plain(argv[1:]) is not None
    plain = _run(main, argv)
    clicked = _run(_group.run, argv)
    assert plain[0] == clicked[0] and plain[0] in (1, 2)

    def same(s: str) -> str:  # the report's own time stamp may tick between the two runs
        return "\n".join(ln for ln in s.splitlines() if "generated" not in ln)

    assert same(plain[1]) == same(clicked[1]) and plain[1] and plain[2] == clicked[2]


def test_explain_start_up_has_no_click() -> None:
    code = (
        "import atexit, sys\n"
        "heavy = ('click', 'rich')\n"
        "atexit.register(lambda: print([m for m in heavy if m in sys.modules], file=sys.stderr))\n"
        "from gpuclinic.cli import main\n"
        f"main(['explain', '--offline', '--json', {str(KERNEL / 'gpu-burn-1-aer-fatal-xid79.log')!r}])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]"
    assert '"verdict": "drain"' in r.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--json", "--markdown", "x.log"], "choose one of --json and --markdown"),  # plain path
        (["--offline", "no/such/file.log"], "no/such/file.log: no such file"),  # plain path
        (["--offline", str(ERRORS)], "is a directory"),  # click's own check
        (["--jsn"], "No such option"),  # click
    ],
)
def test_errors_are_one_line_and_exit_64(argv: list[str], message: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "explain", *argv], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 64, r.stderr
    assert r.stderr.startswith("gpuclinic: error: ") and r.stderr.count("\n") == 1 and message in r.stderr
