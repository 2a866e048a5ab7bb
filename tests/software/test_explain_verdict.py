"""explain reports what it read: the cause, its kind and severity; it drains only on hardware evidence."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _explain(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuclinic", "explain", "--offline", "-"], input=text,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.parametrize(
    ("text", "head", "rc"),
    [  # rc: 0 nothing known, 1 software cause, 2 hardware
        (
            'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nFooBarError: something '
            'odd\n',
            "NO KNOWN CAUSE FOUND",
            0,
        ),
        ("ModuleNotFoundError: No module named 'foo_bar_baz'\n", "NO KNOWN CAUSE FOUND", 0),  # was HEALTHY
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
            "CAUSE FOUND: software (critical)",
            1,
        ),
        (
            "[ 8812.4] NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
            "the bus.\n",
            "CAUSE FOUND: hardware (critical) - DRAIN",
            2,
        ),
    ],
)
def test_explain_verdict_fits_what_it_read(text: str, head: str, rc: int) -> None:
    r = _explain(text)
    first = r.stdout.splitlines()[0]
    assert first.endswith(head), first
    assert r.returncode == rc, r.stderr
    assert "HEALTHY" not in r.stdout


def test_an_information_only_cause_does_not_say_no_problem_found() -> None:
    """A cause that is only information (the lid of the chassis was opened) heads the report as such; the
    body then points to the notes, never "No known problem found" under "CAUSE FOUND"."""
    sel = "   1 | 11/25/2024 | 21:47:47 | Physical Security #0x73 | General Chassis intrusion | Asserted\n"
    r = _explain(sel)
    assert r.stdout.splitlines()[0].endswith("CAUSE FOUND: hardware (info)") and r.returncode == 0
    assert "No known problem found" not in r.stdout and "see the notes below" in r.stdout
    nothing = _explain("FooBarError: something odd\n")
    assert "No known problem found." in nothing.stdout
