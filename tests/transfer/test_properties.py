"""Property tests for the parsers that guard the file system and the byte ranges."""

from __future__ import annotations

import os
import posixpath

from hypothesis import given
from hypothesis import strategies as st

from gpuclinic.errors import GpuclinicError
from gpuclinic.transfer.hf import safe_repo_path
from gpuclinic.transfer.redact import add_secret, redact, safe_url
from gpuclinic.transfer.wansim_link import _parse_range

_parts = st.sampled_from(["a", "b.bin", "..", ".", "", "x y", "\\", "C:", "/", "ü", "..."])


@given(st.lists(_parts, min_size=1, max_size=6).map("/".join) | st.text(max_size=30))
def test_accepted_repo_paths_stay_inside_the_snapshot(name: str) -> None:
    try:
        p = safe_repo_path(name)
    except GpuclinicError:
        return
    root = "/snap/commit"
    joined = posixpath.normpath(posixpath.join(root, str(p)))
    assert joined.startswith(root + "/")
    assert "\\" not in name and not os.path.isabs(name)


@given(st.integers(0, 10_000), st.integers(-5, 12_000), st.integers(1, 10_000))
def test_range_parse_bounds(a: int, b: int, size: int) -> None:
    spec = f"bytes={a}-{b}" if b >= 0 else f"bytes={a}-"
    start, end = _parse_range(spec, size)
    if start is None:
        assert a >= size or (b >= 0 and b < a)
    else:
        assert end is not None and 0 <= start <= end < size


@given(
    st.text(
        alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=20, max_size=40
    )
)
def test_registered_tokens_never_survive_redaction(tok: str) -> None:
    secret = "hf_" + tok
    add_secret(secret)
    text = f"GET https://h/x?token={secret} Authorization: Bearer {secret} failed: {secret}"
    assert secret not in redact(text)
    assert secret not in safe_url(f"https://u:{secret}@h/p?sig={secret}")
