"""regex_literal.leading_literal: the literal every match starts with (the signature scan skips a pattern
whose start is not in the text), or None where no single start is required."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuclinic.knowledge import signatures as S
from gpuclinic.regex_literal import leading_literal

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    "pattern,literal",
    [
        ("CUDA error: out of memory", "CUDA error: out of memory"),
        (r"CUDA error \(2\)", "CUDA error (2)"),
        (r"Signal 9 \(SIGKILL\) received by PID \d+", "Signal 9 (SIGKILL) received by PID "),
        ("ab*cdef", None),  # "a" alone: too short
        ("abcd*e", "abc"),  # the d may be absent
        ("abcd?e", "abc"),
        ("abcd{0,2}e", "abc"),
        ("abcd+e", "abcd"),  # d once at least, then the repeat
        ("abc|abd", None),  # top-level branches
        ("abc(?:d|e)f", "abc"),  # a branch inside a group only
        ("abc[|]d", "abc"),  # a | in a class
        (r"abc\|d", "abc|d"),
        ("(?i)abc", None),
        ("[Tt]oo many open files", None),
        (r"abc\d", "abc"),
        (r"abc\bdef", "abc"),
        ("abc.def", "abc"),
        ("ImagePullBackOff(?<!\\wImagePullBackOff)\\b", "ImagePullBackOff"),
    ],
)
def test_leading_literal(pattern: str, literal: str | None) -> None:
    assert leading_literal(pattern) == literal


def _texts() -> list[str]:
    return [
        p.read_text(errors="replace")
        for p in sorted(FIXTURES.rglob("*.txt")) + sorted(FIXTURES.rglob("*.log"))
    ]


def test_every_signature_match_starts_with_its_literal() -> None:
    texts = _texts()
    checked = 0
    for sig in S.signatures():
        for src, lit in zip(sig.regexes, S._starts(sig.regexes), strict=True):
            if lit is None:
                continue
            body = src[len(S._LINE_PREFIX) :] if src.startswith(S._LINE_PREFIX) else src
            rx = re.compile(body)
            for t in texts:
                for m in rx.finditer(t):
                    assert m.group(0).startswith(lit), (sig.id, src)
                    checked += 1
    assert checked > 100  # the fixtures exercise the gated patterns
