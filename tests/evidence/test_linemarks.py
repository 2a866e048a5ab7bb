"""The segmenting reader's line bookkeeping (issue 14: the rest's head and its end are found without
building all of a big log's rest): against the plain definitions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.sources.linemarks import (
    blank_lines,
    head_end,
    quoted_lines,
    quoted_lines_of,
    rest_head,
    rest_line_at,
    rest_lines,
)

QUERY = "$ nvidia-smi --query-gpu=name --format=csv"
LINES = ["a", "", "  ", "bbbbbbbb", QUERY, "$ ls", "k", "ccc", "\u3000"]


def _classes(lines: list[str]) -> list[str]:
    def one(ln: str) -> str:
        if not ln.strip():
            return "blank"
        if ln.startswith("$"):
            return "prompt"
        return "kernel_log" if ln == "k" else "other"

    return [one(ln) for ln in lines]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=40), st.integers(min_value=0, max_value=200))
def test_rest_head_and_its_end(lines: list[str], size: int) -> None:
    classes = _classes(lines)
    special = [k for k, c in enumerate(classes) if c != "other"]
    rest = rest_lines(lines, classes, special)
    n = head_end(rest, size)
    assert rest_head(lines, classes, special, size) == rest[:n]
    end = rest_line_at(lines, classes, special, n)
    # the first n kept lines all lie before `end`, and `end` is right after the n-th of them (or 0)
    kept = [k for k, ln in enumerate(lines) if k not in special or classes[k] == "blank" or ln == QUERY]
    assert end == (kept[n - 1] + 1 if n else 0)


def test_blank_lines_are_the_lines_strip_empties() -> None:
    lines = ["x", "", " \t", "\u3000", "\x1c", "y ", " z", "\xa0 \x1f"]
    assert blank_lines(lines) == [1, 2, 3, 4, 7]
    assert blank_lines(lines) == [k for k, ln in enumerate(lines) if not ln.strip()]


QUOTE_PARTS = ["> ", ">", " ", "\t", "\xa0", "\u3000", "\x1f", "a", "é>", ">>> ", "\n", "\n", "x > y"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(QUOTE_PARTS), max_size=60), st.data())
def test_quoted_lines_from_the_bytes_are_those_of_the_text(parts: list[str], data: st.DataObject) -> None:
    """Issue 14: a big log's quoted lines come from its bytes, lines counted from grep's hit lines (any
    of them, as anchors), and are exactly the text's (non-ASCII and \\x1f spaces before the ``>``)."""
    text = "".join(parts)
    raw = text.encode()
    starts = [0] + [i + 1 for i, b in enumerate(raw) if b == 10]
    lines = raw.split(b"\n")
    anchors = [
        (k, starts[k], lines[k])
        for k in sorted(data.draw(st.sets(st.integers(min_value=0, max_value=len(starts) - 1))))
    ]
    assert quoted_lines_of(raw, anchors) == quoted_lines(text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=40), max_size=700),
    st.integers(min_value=0, max_value=9000),
    st.data(),
)
def test_head_end_is_where_lines_reach_the_size(lengths: list[int], size: int, data: st.DataObject) -> None:
    lines = ["x" * n for n in lengths]
    lo = data.draw(st.integers(min_value=0, max_value=len(lines)))
    hi = data.draw(st.none() | st.integers(min_value=lo, max_value=len(lines)))
    n, end, total = lo, len(lines) if hi is None else hi, 0
    while n < end and total < size:  # the definition: lines (and their newlines) until size is reached
        total += len(lines[n]) + 1
        n += 1
    assert head_end(lines, size, lo, hi) == n


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab\n ", max_size=30), st.booleans())
def test_textscan_split_is_text_split_without_copying_the_known_lines(text: str, known: bool) -> None:
    """``textscan.split`` (issue 14: the rejoining pass no longer copies a big log's 230,000 lines to add
    the empty line after a final newline) gives ``text.split("\\n")`` as (lines, 1 if an empty one
    follows)."""
    from gpuclinic import textscan

    if known:
        lines = text.split("\n")
        if text.endswith("\n"):  # what a reader remembers (remember_lines): no empty line after the last
            lines.pop()
        textscan.remember_lines(text, lines)
    got, tail = textscan.split(text)
    assert got + [""] * tail == text.split("\n")
    if known:
        assert got is lines
