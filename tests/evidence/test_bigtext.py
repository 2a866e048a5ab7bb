"""A big input held as its bytes and its lines (issue 14: explain on a 19 MB log): every answer the explain
path takes from a BigText is the one it takes from the same text as a string."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic import bigtext, textscan
from gpuclinic.bigtext import BigText
from gpuclinic.explain import explain_text, read_input
from gpuclinic.knowledge import rejoin
from gpuclinic.sources import evidence_text

PARTS = ["a", "é", "\u2502", "\n", "\n", "\x0c", "\u2028", " ", "\t", "|", "| ", "  |  | t supported |"]


def _big(text: str, piece: int, monkeypatch: pytest.MonkeyPatch) -> BigText:
    monkeypatch.setattr(bigtext, "PIECE", piece)
    bt = bigtext.from_bytes(text.encode())
    assert bt is not None
    return bt


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PARTS), max_size=80), st.integers(min_value=1, max_value=12))
def test_a_bigtext_reads_as_its_string(parts: list[str], piece: int) -> None:
    text = "".join(parts)
    with pytest.MonkeyPatch.context() as mp:
        bt = _big(text, piece, mp)
    assert str(bt) == text and len(bt) == len(text)
    assert all(p.endswith("\n") for p in bt.pieces[:-1])  # pieces of whole lines
    assert bt.lines(textscan.only_newlines(bt.data)) == text.splitlines()
    for n in (1, 3, 50):
        assert bt.head(n) == text[:n] and bt.tail(n) == text[-n:]
    lines, tail = textscan.split(bt)
    assert lines + [""] * tail == text.split("\n")
    assert textscan.splitlines(bt) == text.splitlines()
    for lit in ("é\n", "| ", "a a", "\u2502"):
        assert textscan.contains(bt, lit) == (lit in text)
    assert rejoin._table_rows(bt) == rejoin._table_rows(text)


def test_invalid_utf8_is_not_a_bigtext() -> None:
    assert bigtext.from_bytes(b"ok\n\xff\xfe bad\n") is None


@pytest.mark.parametrize("limit", [1, 2, 4096])
def test_table_rows_past_the_pipe_limit(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rejoin, "_PIPES_ONE_BY_ONE", limit)
    row = "| 0  NVIDIA H100 | operation no |\n|        |        | t supported |\n| a | b |\n"
    text = "step 1 loss 0.5\n" * 50 + row * 40 + "done \u2502\n"
    bt = _big(text, 64, monkeypatch)
    assert rejoin._table_rows(bt) == rejoin._table_rows(text)
    assert len(rejoin._table_rows(bt)) == 40


def _training_log(extra: str) -> str:
    step = "[2026-01-05 12:00:01] step {} loss 0.5 lr 3.0e-04 \u2502 tokens/s 9000\n"
    body = "".join(step.format(i) for i in range(6000))
    half = len(body) // 2
    return body[:half] + extra + body[half:] + "RuntimeError: CUDA error: out of memory\n"


EXTRAS = {
    "xid": "[ 12.3] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
    "smi header": "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\n",
    "collect_env": "PyTorch version: 2.1.0+cu121\nCUDA used to build PyTorch: 12.1\n"
    "Nvidia driver version: 535.104.05\nGPU models and configuration:\nGPU 0: NVIDIA H100 80GB HBM3\n",
    "quoted": "> [ 99.1] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error\n",
    "wrapped": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a tota\n"
    "l capacity of 79.15 GiB of which 1.06 GiB is free.\n",
}


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_explain_of_a_bigtext_is_explain_of_its_string(extra: str, tmp_path: Path) -> None:
    """The same report (JSON, the generation time aside) from the file read as explain reads it (a
    BigText) as from the same text given as a string."""
    log = tmp_path / "train.log"
    log.write_text(_training_log(EXTRAS[extra]))
    text, origin, _ = read_input(str(log))
    assert isinstance(text, BigText)
    got = explain_text(text, origin).to_dict()
    want = explain_text(log.read_text(), origin).to_dict()
    for d in (got, want):
        d.pop("generated_at", None)
    assert json.dumps(got, sort_keys=True, default=str) == json.dumps(want, sort_keys=True, default=str)
    assert got["findings"]


def test_a_quoted_paste_and_a_json_start_are_judged_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    quoted = "".join(f"> [ {i}.0] {xid}\n" for i in range(3000))
    bt = _big(quoted, 256, monkeypatch)
    assert str(evidence_text._unquote_text(bt)) == evidence_text.unquote(quoted)
    plain = _big("x\n" * 3000, 256, monkeypatch)
    assert evidence_text._unquote_text(plain) is plain  # nothing to cut: still the BigText
    for text in (" " * 5000 + '{"a": 1}\n', "\n" * 5000 + "x\n", '\ufeff  {"Id": "1"}\n' + "y\n" * 3000):
        big = _big(text, 256, monkeypatch)
        assert evidence_text._starts_json(big) == text.lstrip("\ufeff \t\r\n").startswith("{")
