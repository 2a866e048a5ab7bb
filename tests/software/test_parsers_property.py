"""Parsers of versions, arch lists, names and /proc text never raise on arbitrary input."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuclinic.knowledge import compat
from gpuclinic.sources import host as hsrc
from gpuclinic.sources import software as ssrc

TEXT = st.text(max_size=300)


@settings(max_examples=200, deadline=None)
@given(TEXT, TEXT)
@example("", "0²")  # str.isdigit() accepts a superscript two that int() refuses
def test_compat_parsers_total(a: str, b: str) -> None:
    compat.parse_version(a)
    compat.parse_cc(a)
    compat.cuda_version_of(a)
    compat.variant_of(a)
    compat.compute_capability_for(a)
    tb = compat.parse_torch_version(a, b or None)
    if tb is not None:
        assert tb.minor.count(".") == 1
    al = compat.ArchList.parse(a)
    for cc in al.sass + al.ptx:
        assert cc[0] >= 0 and 0 <= cc[1] <= 9
    compat.driver_supports_cuda(a, b)
    if compat.parse_cc(b):
        compat.can_run(al, b)


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_proc_parsers_total(s: str) -> None:
    ssrc.parse_proc_driver_version(s)
    out = hsrc.parse_cpulist(s)
    assert all(isinstance(x, int) for x in out)


@given(st.integers(min_value=0, max_value=64), st.integers(min_value=0, max_value=9))
def test_can_run_matches_the_rule(major: int, minor: int) -> None:
    al = compat.ArchList.parse(["sm_80", "sm_90", "compute_90"])
    v = compat.can_run(al, (major, minor))
    if major == 8:
        assert v.via == "sass"
    elif (major, minor) >= (9, 0):
        assert v.via == ("sass" if major == 9 else "ptx")
    else:
        assert not v.ok
