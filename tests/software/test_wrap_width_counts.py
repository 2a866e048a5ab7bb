"""``wrapwidth.length_counts`` (runs of the sorted line lengths, issue 14) against the ``Counter`` it
replaced, on every error fixture's line lengths and random ones."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from gpuclinic.knowledge import wrapwidth as W

ERRORS = Path(__file__).resolve().parents[1] / "fixtures" / "software" / "errors"


def _counter(lens: list[int], lo: int) -> dict[int, int]:
    return {n: c for n, c in Counter(lens).items() if n >= lo}


def test_length_counts_are_the_counter_s() -> None:
    rng = random.Random(3)
    cases = [list(map(len, p.read_text(errors="replace").splitlines())) for p in sorted(ERRORS.glob("*.txt"))]
    pick = (0, 59, 60, 61, 80, 80, 80, 300)
    cases += [[rng.choice(pick) for _ in range(rng.randint(0, 500))] for _ in range(50)]
    cases += [[], [60], [59], [61, 61, 60]]
    for lens in cases:
        got = W.length_counts(lens, W.WRAP_MIN)
        assert got == _counter(lens, W.WRAP_MIN)
        # the same ranking the width is chosen by
        rank = sorted(got.items(), key=lambda kv: (-kv[1], -kv[0]))
        assert rank == sorted(_counter(lens, W.WRAP_MIN).items(), key=lambda kv: (-kv[1], -kv[0]))
    assert any(W.length_counts(lens, W.WRAP_MIN) for lens in cases)
