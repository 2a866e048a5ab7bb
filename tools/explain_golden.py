"""Record and compare the output of ``gpuclinic explain --offline`` over every fixture text.

A performance change to explain's path must leave every report byte-identical.  ``record DIR`` writes,
for each file under tests/fixtures (every file but the Markdown notes) and each extra path given, the
``--json``, ``--markdown`` and plain terminal (NO_COLOR=1, COLUMNS=100) output and exit code, with the
report's generation time blanked; ``compare DIR`` produces the same with the current code and lists
every file whose output differs (exit 1 then).  The fixtures run in one process (``run_explain``, the
function both CLI parsers call); the extra paths (e.g. the 19 MB bench log) run through the real CLI in
a subprocess, as a user runs them.

    .venv/bin/python tools/explain_golden.py record /tmp/golden [--extra /tmp/train.log]
    .venv/bin/python tools/explain_golden.py compare /tmp/golden [--extra /tmp/train.log]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORMATS = {"json": ["--json"], "md": ["--markdown"], "txt": []}
_STAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)?")
_GENERATED = re.compile(r'"generated_at": "[^"]*"')


def fixtures() -> list[Path]:
    """Every fixture file explain may be given (the SOURCES.md notes aside), in a stable order."""
    base = ROOT / "tests/fixtures"
    return sorted(p for p in base.rglob("*") if p.is_file() and p.suffix != ".md")


def _normal(kind: str, out: str) -> str:
    """The output with the report's own generation time blanked (it is the only varying part)."""
    out = _GENERATED.sub('"generated_at": ""', out)
    return out if kind == "json" else _STAMP.sub("TS", out)


def _in_process(path: Path) -> Iterator[tuple[str, str]]:
    from gpuclinic.cli import main

    for kind, flags in FORMATS.items():
        buf = io.StringIO()
        rc: object = None
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                main(["explain", "--offline", *flags, str(path)])
            except SystemExit as e:  # main always exits, with the command's code
                rc = e.code
        yield kind, _normal(kind, buf.getvalue()) + f"\nrc {rc}\n"


def _subprocess(path: Path) -> Iterator[tuple[str, str]]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    for kind, flags in FORMATS.items():
        cmd = [sys.executable, "-m", "gpuclinic", "explain", "--offline", *flags, str(path)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        yield kind, _normal(kind, p.stdout + p.stderr) + f"\nrc {p.returncode}\n"


def outputs(extra: list[Path]) -> Iterator[tuple[str, str]]:
    """(name, output) for every fixture and extra path in every format."""
    os.environ["NO_COLOR"] = "1"
    os.environ["COLUMNS"] = "100"
    for path in fixtures():
        name = str(path.relative_to(ROOT)).replace("/", "__")
        for kind, out in _in_process(path):
            yield f"{name}.{kind}", out
    for path in extra:
        for kind, out in _subprocess(path):
            yield f"extra__{path.name}.{kind}", out


def _raw(out: str) -> bytes:
    return out.encode("utf-8", "surrogateescape")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["record", "compare"])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--extra", type=Path, action="append", default=[], help="a big log run through the CLI")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    if args.action == "record":
        args.dir.mkdir(parents=True, exist_ok=True)
        n = 0
        for name, out in outputs(args.extra):
            (args.dir / name).write_bytes(_raw(out))
            n += 1
        print(f"recorded {n} outputs in {args.dir}")
        return 0
    differ, missing, n = [], [], 0
    for name, out in outputs(args.extra):
        n += 1
        f = args.dir / name
        if not f.exists():
            missing.append(name)
        elif f.read_bytes() != _raw(out):
            differ.append(name)
    for name in missing:
        print(f"not recorded: {name}")
    for name in differ:
        print(f"DIFFERS: {name}")
    print(f"compared {n} outputs: {len(differ)} differ, {len(missing)} not recorded")
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
