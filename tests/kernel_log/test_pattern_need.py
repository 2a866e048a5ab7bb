"""A pattern's ``need`` literal only skips regex calls that could not match: same results on every fixture
line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuclinic import lazyre
from gpuclinic.sources.kernellog import formats, nvrm, patterns

FX = Path(__file__).resolve().parents[1] / "fixtures"


def _needing() -> list[tuple[str, lazyre.LazyPattern]]:
    out = []
    for mod in (patterns, formats, nvrm):
        for name, v in vars(mod).items():
            if isinstance(v, lazyre.LazyPattern) and v.need is not None:
                out.append((f"{mod.__name__}.{name}", v))
    return out


def _fixture_lines() -> list[str]:
    lines: list[str] = []
    for p in sorted(FX.rglob("*")):
        if p.is_file() and p.suffix in (".txt", ".log", "") and p.stat().st_size < 4 << 20:
            lines += p.read_text(errors="replace").splitlines()
    return lines


def test_the_aer_and_link_patterns_have_a_need() -> None:
    names = {n.rsplit(".", 1)[1] for n, _ in _needing()}
    assert {"_RE_AER_STATUS", "_RE_AER_BIT", "_RE_AER_RECV", "_RE_AER_BUS", "_RE_LINK"} <= names


def test_need_never_changes_a_search_or_match_on_fixture_lines() -> None:
    lines = _fixture_lines()
    assert len(lines) > 5000
    for name, lazy in _needing():
        plain = re.compile(lazy.pattern, lazy.flags)
        lazy.compiled  # noqa: B018  (installs the need-guarded methods)
        matched = 0
        for ln in lines:
            want, got = plain.search(ln), lazy.search(ln)
            assert (want and want.span()) == (got and got.span()), (name, ln)
            assert (plain.match(ln) and True) == (lazy.match(ln) and True), (name, ln)
            matched += want is not None
        assert matched or name.endswith(("_FW_STATUS", "_FW_LAYER", "_RECOVERY")), name


def test_need_skips_strings_without_the_literal() -> None:
    p = lazyre.compile(r"\w+ error status/mask=(\d+)", need="status/mask=")
    m = p.search("dev error status/mask=12")
    assert m is not None and m.group(1) == "12"
    assert p.search("dev error status=12") is None and p.match("x") is None
    m = p.search("a dev error status/mask=7", 2)
    assert m is not None and m.group(0) == "dev error status/mask=7"
    with pytest.raises(ValueError):
        lazyre.compile("abc", re.IGNORECASE, need="abc")
