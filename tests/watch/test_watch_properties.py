"""Property tests for the small parsers the agent relies on."""

from __future__ import annotations

import urllib.parse

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.errors import InputError
from gpuclinic.watch.config import parse_duration
from gpuclinic.watch.kernel import LineParser, condition_for
from gpuclinic.watch.notify import redact
from gpuclinic.watch.reasons import REASONS, decode, mask_of


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["", "s", "m", "h", "d", "w", "ms"]))
def test_duration_units(n: int, unit: str) -> None:
    mult = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "ms": 0.001}[unit]
    assert parse_duration(f"{n}{unit}") == n * mult


@given(st.text(max_size=20))
def test_duration_never_crashes(s: str) -> None:
    try:
        v = parse_duration(s)
    except InputError:
        return
    assert v >= 0


@settings(max_examples=300)
@given(st.lists(st.text(max_size=200), max_size=20))
def test_kernel_parser_never_raises(lines: list[str]) -> None:
    for ev in LineParser().feed(lines):
        c = condition_for(ev, {}, 60)
        assert c is None or c.code.split(".")[0] in ("xid", "gpu", "pcie", "gsp")


@given(
    st.integers(min_value=0, max_value=200),
    st.sampled_from(["0000:3b:00", "00000000:3B:00.0", "0000:db:00"]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\r"), max_size=60),
)
def test_xid_lines(xid: int, bus: str, rest: str) -> None:
    evs = [
        e
        for e in LineParser().feed([f"[ 1.0] NVRM: Xid (PCI:{bus}): {xid}, pid=1, name=x, {rest}"])
        if e.kind == "xid"
    ]
    (ev,) = evs
    assert ev.xid == xid and ev.pci_bus_id and ev.pci_bus_id.endswith(".0")
    c = condition_for(ev, {}, 60)
    assert c is not None and c.code == f"xid.{xid}"


@given(st.integers(min_value=0, max_value=0x1FF))
def test_reason_mask_round_trip(mask: int) -> None:
    assert mask_of(decode(mask)) == mask & sum(b for b, _, _ in REASONS)


@given(
    st.text(alphabet="abcdefghijklmnop0123456789+/=&?%", min_size=4, max_size=40),
    st.text(alphabet="XYZ -:", max_size=40),
)
def test_redact_removes_secret_and_its_url_encoding(secret: str, around: str) -> None:
    text = f"{around}{secret}{around} url?t={urllib.parse.quote(secret, safe='')} {around}"
    out = redact(text, [secret])
    assert secret not in out
    assert urllib.parse.quote(secret, safe="") not in out
