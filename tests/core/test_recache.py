"""The regex cache (issue 14: ~20 ms of explain's run was compiling the same ~250 patterns again) gives
patterns equal to ``re.compile``'s, from a fresh build and from its file, and never fails or changes an
answer when its file is damaged, foreign or cannot be written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuclinic import recache

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = [
    (r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F:.]+)\): (?P<xid>\d+)", 0),
    (r"^\s*GPU (\d+):\s*(.+?)\s*$", re.M),
    (r"(?<![\w.])cuda error: (out of memory|an illegal memory access)", re.I),
    (r"ümlaut|✘|\u2028", re.I | re.S),
    (r"(?x) a \s+ b  # verbose", 0),
    (r"[\d.]+(?=\s*W)", re.A),
    (r"(a)|(?P<n>b)(?(1)c|d)", 0),
]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("GPUCLINIC_RECACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(recache, "_state", {"entries": None, "new": {}, "off": False, "registered": True})
    yield tmp_path


def _fresh() -> None:
    recache._state.update(entries=None, new={}, off=False)


def test_patterns_equal_re_compile_built_and_from_the_file(cache_dir: Path) -> None:
    for p, f in PATTERNS:
        assert recache.compile(p, f) == re.compile(p, f)
    recache.save()
    assert (cache_dir / recache._FILE).stat().st_size > 0
    _fresh()
    for p, f in PATTERNS:
        got = recache.compile(p, f)
        assert got == re.compile(p, f) and got.groupindex == re.compile(p, f).groupindex
    assert not recache._state["new"]  # every one came from the file
    assert recache.compile(PATTERNS[0][0]).search("NVRM: Xid (PCI:0000:3b:00): 79, pid=1")["xid"] == "79"  # type: ignore[index]


def test_bad_pattern_raises_what_re_raises(cache_dir: Path) -> None:
    with pytest.raises(re.error):
        recache.compile(r"(unclosed")


@pytest.mark.parametrize("damage", [b"", b"\x00garbage", b"not marshal at all" * 100])
def test_damaged_file_is_ignored(cache_dir: Path, damage: bytes) -> None:
    (cache_dir / recache._FILE).write_bytes(damage)
    assert recache.compile(*PATTERNS[1]) == re.compile(*PATTERNS[1])
    recache.save()  # replaced by a good file
    _fresh()
    recache.compile(*PATTERNS[1])
    assert not recache._state["new"]


def test_file_of_another_python_or_with_wrong_code_is_not_used(cache_dir: Path) -> None:
    import marshal

    p, f = PATTERNS[0]
    entry = recache._build(p, f)
    (cache_dir / recache._FILE).write_bytes(marshal.dumps((("other python", 1, 4), {(p, f): entry})))
    assert recache.compile(p, f) == re.compile(p, f) and recache._state["new"]
    _fresh()  # the right key, but code that is not this pattern's: _sre refuses it, re.compile answers
    bad = (entry[0], [999999, 1, 2], entry[2], entry[3], entry[4])
    (cache_dir / recache._FILE).write_bytes(marshal.dumps((recache._key(), {(p, f): bad})))
    assert recache.compile(p, f) == re.compile(p, f)
    assert recache._state["off"]


def test_nothing_written_without_bytecode_writing(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    recache.compile(*PATTERNS[2])
    recache.save()
    assert not list(cache_dir.iterdir())


def test_unwritable_directory_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "file-not-dir"
    target.write_text("x")
    monkeypatch.setenv("GPUCLINIC_RECACHE_DIR", str(target))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(recache, "_state", {"entries": None, "new": {}, "off": False, "registered": True})
    recache.compile(*PATTERNS[3])
    recache.save()  # no exception, nothing left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file-not-dir"]


def test_explain_process_writes_the_cache_and_reads_it(tmp_path: Path) -> None:
    log = ROOT / "tests/fixtures/kernel_log/bumblebee-554-fallen-old-format.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["GPUCLINIC_RECACHE_DIR"] = str(tmp_path)
    cmd = [sys.executable, "-m", "gpuclinic", "explain", "--offline", "--json", str(log)]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    f = tmp_path / recache._FILE
    assert f.stat().st_size > 1000, first.stderr
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    env["GPUCLINIC_RECACHE"] = "0"
    plain = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    strip = re.compile(r'"generated_at": "[^"]*"')
    assert first.returncode == second.returncode == plain.returncode
    assert strip.sub("", first.stdout) == strip.sub("", second.stdout) == strip.sub("", plain.stdout)
