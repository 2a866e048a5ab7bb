"""multifind answers exactly what one ``in`` test per literal would (issue 14: it replaced those tests in
the big-log readers), and LineHits.only keeps exactly the lines holding a needle."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic import multifind
from gpuclinic.textscan import LineHits

ALPHABET = "ab \n|É✘"


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=ALPHABET, max_size=60),
    st.lists(st.text(alphabet=ALPHABET, max_size=4), max_size=8),
)
def test_present_is_the_set_of_needles_in_the_text(text: str, needles: list[str]) -> None:
    assert multifind.present(text, tuple(needles)) == {n for n in needles if n in text}


def test_matches_include_overlapping_and_nested_needles() -> None:
    got = sorted(multifind.matches("xerrors", ("error", "errors", "rr", "x")))
    assert got == [(0, "x"), (3, "rr"), (5, "error"), (6, "errors")]
    assert list(multifind.matches("", ("a",))) == [] and list(multifind.matches("abc", ())) == []


def _only_reference(hits: LineHits, needles: list[str]) -> LineHits:
    keep = [h for h in hits.lines if any(n.encode() in h[2].lower() for n in needles)]
    return LineHits(hits.data, tuple(keep))


def test_only_keeps_the_lines_holding_a_needle() -> None:
    rng = random.Random(14)
    words = ["Xid", "NCCL error", "loss", "nvrm:", "İ", "gpu has fallen", "ok", "É"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 4))) for _ in range(400)]
    data = "\n".join(lines).encode()
    offs = [0]
    for ln in lines:
        offs.append(offs[-1] + len(ln.encode()) + 1)
    hits = LineHits(data, tuple((k, offs[k], ln.encode()) for k, ln in enumerate(lines)))
    for needles in (["xid"], ["nccl error", "nvrm:"], ["İ", "gpu"], ["é", "ok"], ["zzz"], [""], []):
        assert hits.only(needles) == _only_reference(hits, needles), needles


def test_only_from_the_shared_needle_index_equals_its_own_pass() -> None:
    """Hits that know the needles grep searched for answer ``only`` from one pass for all of them
    (``needle_lines``); a needle outside that set takes a pass of its own: both keep the reference lines."""
    rng = random.Random(15)
    words = ["Xid", "NCCL error", "loss", "nvrm:", "İ", "gpu has fallen", "ok", "É", "GPU "]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 4))) for _ in range(400)]
    data = "\n".join(lines).encode()
    offs = [0]
    for ln in lines:
        offs.append(offs[-1] + len(ln.encode()) + 1)
    searched = frozenset({"xid", "nccl error", "nvrm:", "İ", "gpu ", "ok"})
    hits = LineHits(data, tuple((k, offs[k], ln.encode()) for k, ln in enumerate(lines)), searched)
    for needles in (["xid"], ["nccl error", "nvrm:"], ["İ", "gpu "], ["ok", "xid"], ["loss"], [""], []):
        got = hits.only(needles)
        assert got.lines == _only_reference(hits, needles).lines, needles
        assert got is hits if "" in needles else got.needles == frozenset()  # (a subset asks for itself)
