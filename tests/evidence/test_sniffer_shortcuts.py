"""The format sniffers' shortcuts on a prose run's 16 KiB head give the answers of the paths they replace:
the XML-fragment line finder, and the racadm status-cell pre-test (which must not lose a row padded with
tabs or non-breaking spaces)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.sources import smi_xml
from gpuclinic.sources.bmc import racadm

PIECES = [
    "<gpu_temp>32 C</gpu_temp>",
    "  <temperature>",
    "</temperature>",
    "step 1 loss 2 <x>",
    "\t<fb_memory_usage>",
    "text",
    "",
    "   ",
    "<<",
    "a<b",
    "  </double_bit_retirement>",
    "\x0c<form feed>",
    "\u00a0<nbsp>",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=400), st.sampled_from(["", "\n", "\r\n"]))
def test_tag_lines_are_those_of_splitlines(lines: list[str], end: str) -> None:
    head = "\n".join(lines) + end
    want = [ln for ln in head.splitlines()[:200] if ln.lstrip().startswith("<")]
    assert list(smi_xml._lines_starting_with_tag(head, 200)) == want


ROWS = (
    "PS1 Status       Present     AC\n"
    "PS2 Status       Absent      Unknown\n"
    "System Board Inlet Temp   Ok   21C   3C   42C\n"
)


def test_racadm_pretest_keeps_rows_padded_any_way() -> None:
    assert racadm.claims(ROWS)
    assert racadm.claims(ROWS.replace("       ", "\t\t"))  # tabs
    assert racadm.claims(ROWS.replace("       ", "\u00a0\u00a0\u00a0"))  # pasted from a web page
    assert not racadm.claims("[12:00] step 10 loss 0.3 lr 1e-4\n" * 400)
