"""The format sniffers' shortcuts (issue 14: 171 prose runs of a 19 MB log are each sniffed) answer exactly
as the plain forms they replace."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuclinic.sources import smi_common, smi_text

_LINES = ["", " ", "\t", "a", "step 1 loss 0.5", "\r", "\r\n", "\n", "\x0c", "\u2028", "x" * 300]


@given(st.lists(st.sampled_from(_LINES), max_size=80), st.integers(min_value=0, max_value=8))
def test_first_lines_equal_splitlines_head(parts: list[str], n: int) -> None:
    text = "".join(parts)
    assert smi_common.first_lines(text, n) == text.splitlines()[:n]


_Q = [
    "    GPU Current Temp            : 34 C\n",
    "\tPower Draw : 60 W\n",
    "Product Name : H100\n",  # not indented: no match
    "    Product Name                : NVIDIA H100\n",
    "    Bus Id                      : 00000000:3B:00.0\n",
    "   not a key : x\n",
    "step 1 loss 0.5\n",
    "\n",
    " ",
    "    VBIOS Version",
]


@given(st.lists(st.sampled_from(_Q), max_size=30))
def test_signatures_equal_the_scan(parts: list[str]) -> None:
    head = "".join(parts)
    every = {m.group(1) for m in smi_text._SIGNATURE_RE.finditer(head)}
    got = smi_text._signatures(head)
    assert got <= every and len(got) == min(2, len(every))
