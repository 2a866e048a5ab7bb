"""textscan.contains answers ``literal in text`` from the last literal scan's lines: same answer as ``in``."""

from __future__ import annotations

import pytest

from gpuclinic import textscan


@pytest.mark.parametrize("where", [None, 0, 1500, 2999])
def test_contains_agrees_with_in(where: int | None) -> None:
    lines = [f"step {i} loss 0.5 driver ok" if i % 7 == 0 else f"step {i} loss 0.5" for i in range(3000)]
    if where is not None:
        lines[where] = "|  NVIDIA-SMI 550.54   Driver Version: 550.54.15   CUDA Version: 12.4  |"
    text = "\n".join(lines) + "\n"
    assert textscan.line_hits(text, ["driver"]) is not None  # the scan contains() reads
    for lit in ("Driver Version:", "driver version:", "Driver Version: 550", "CUDA Version:", "step 2999 "):
        assert textscan.contains(text, lit) == (lit in text), lit
    assert textscan.contains(text, "Driver Version:") == (where is not None)
