"""rejoin._table_rows tries its pattern at each "|" only: the same rows as the pattern's scan of the
whole text, also past the one-by-one limit (then the scan itself runs on from there)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuclinic.knowledge import rejoin as S


def _reference(text: str) -> list[int]:
    return [text.count("\n", 0, m.start()) for m in S._TABLE_PAIR.finditer(text)]


_PIECES = ["|", "| ", "|\t", "\n", "\r\n", "  |  | t supported |", "|    |    | x", " ", "a", "||", "| |"]


@given(st.lists(st.sampled_from(_PIECES), max_size=60))
def test_same_rows_as_the_scan(parts: list[str]) -> None:
    text = "".join(parts)
    assert S._table_rows(text) == _reference(text)


@pytest.mark.parametrize("limit", [1, 3, 4096])
def test_same_rows_past_the_limit(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(S, "_PIPES_ONE_BY_ONE", limit)
    row = "| 0  NVIDIA H100 | operation no |\n|        |        | t supported |\n| a | b |\n"
    text = "step 1 loss 0.5\n" * 50 + row * 40 + "done\n"
    assert S._table_rows(text) == _reference(text)
    assert len(_reference(text)) == 40
