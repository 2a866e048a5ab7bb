"""Error signatures against real error texts from public issues (tests/fixtures/software/errors)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.signature_extract import parse_size
from gpuclinic.knowledge.signatures import CATEGORIES, match, primary, signatures

ERRORS = Path(__file__).resolve().parents[1] / "fixtures" / "software" / "errors"
EXPECTED: dict[str, list[str]] = json.loads((ERRORS / "expected.json").read_text())


def test_table_is_complete_and_sourced() -> None:
    raw = load_data("error_signatures.json")["signatures"]
    assert len(raw) >= 40
    ids = [e["id"] for e in raw]
    assert len(ids) == len(set(ids))
    for e in raw:
        assert e["source"].startswith("http"), e["id"]
        assert e["category"] in CATEGORIES, e["id"]
        assert e["severity"] in ("info", "warning", "critical")
        assert e["needles"] and all(n == n.lower() for n in e["needles"]), e["id"]
        for sup in e.get("supersedes", []):
            assert sup in ids, (e["id"], sup)
    assert {e["category"] for e in raw} == set(CATEGORIES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_error_texts(name: str) -> None:
    expected_id, source = EXPECTED[name]
    assert source.startswith("https://github.com/")
    text = (ERRORS / name).read_text(encoding="utf-8")
    ms = match(text)
    assert ms, f"{name}: nothing matched"
    assert ms[0].id == expected_id, [m.id for m in ms]
    top = ms[0]
    assert top.matched_line and top.matched_line in text
    assert top.line_no >= 1 and text.splitlines()[top.line_no - 1].strip().startswith(top.matched_line)


def test_at_least_25_real_texts() -> None:
    assert len(EXPECTED) >= 25
    assert (ERRORS / "SOURCES.md").exists()
    sources = (ERRORS / "SOURCES.md").read_text()
    for name in EXPECTED:
        assert name in sources


def test_oom_fragmentation_hint_from_numbers() -> None:
    m = primary((ERRORS / "oom_fragmented_mgfn_35.txt").read_text())
    assert m is not None and m.category == "cuda_oom"
    assert m.data["diagnosis"] == "fragmentation"
    assert any("expandable_segments:True" in h for h in m.hints)
    assert m.data["reserved_unallocated_bytes"] == parse_size("2.30", "GiB")


def test_oom_that_cannot_fit_is_not_called_fragmentation() -> None:
    m = primary((ERRORS / "oom_too_big_neurolens_2.txt").read_text())
    assert m is not None and m.data["diagnosis"] == "allocation_exceeds_gpu"
    m2 = primary((ERRORS / "oom_new_cads_4.txt").read_text())
    assert (
        m2 is not None and m2.data["diagnosis"] == "model_too_large"
    )  # 12.73 free + 9.35 cached < 22.78 asked


def test_oom_old_format_derives_reserved_minus_allocated() -> None:
    m = primary(
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity; "
        "12.00 GiB already allocated; 1.00 GiB free; 20.00 GiB reserved in total by PyTorch)"
    )
    assert m is not None
    assert m.data["reserved_unallocated_bytes"] == parse_size("8", "GiB")
    assert m.data["diagnosis"] == "fragmentation"


def test_oom_other_processes() -> None:
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity "
        "of "
        "79.15 GiB of which 300.00 MiB is free. Process 4242 has 60.00 GiB memory in use. Including "
        "non-PyTorch "
        "memory, this process has 18.80 GiB memory in use. Of the allocated memory 18.00 GiB is allocated by "
        "PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated."
    )
    m = primary(text)
    assert m is not None and m.data["diagnosis"] == "other_processes"
    assert m.data["other_processes"] == [{"pid": 4242, "bytes": parse_size("60", "GiB")}]


def test_watchdog_details() -> None:
    m = primary((ERRORS / "watchdog_llamafactory_7396.txt").read_text())
    assert m is not None and m.category == "nccl_timeout"
    assert m.data["optype"] == "ALLREDUCE" and m.data["timeout_ms"] == "600000"
    assert m.data["ranks_reporting"] == [0, 4] and m.count == 2
    assert m.data["ranks_silent"] == [1, 2, 3]


def test_specific_hides_generic() -> None:
    ids = [m.id for m in match((ERRORS / "nccl_system_error_h100_1016.txt").read_text())]
    assert "nccl.system_error" in ids and "nccl.generic" not in ids
    ids = [m.id for m in match("RuntimeError: CUDA error: an illegal memory access was encountered")]
    assert ids == ["cuda.illegal_address"]


def test_critical_ranks_before_warning_and_order_of_appearance() -> None:
    text = (
        "RuntimeError: CUDA error: device-side assert triggered\nlater: uncorrectable ECC error encountered\n"
    )
    assert [m.id for m in match(text)] == ["cuda.ecc_uncorrectable", "cuda.device_assert"]


def test_torch_driver_version_decoded() -> None:
    m = primary((ERRORS / "torch_driver_too_old_fooocus_1313.txt").read_text())
    assert m is not None and m.data["driver_cuda"] == "11.4"


def test_nothing_in_unrelated_text() -> None:
    assert match("") == []
    assert match("Epoch 3: loss=0.123 acc=0.98\nSaved checkpoint to /tmp/x.pt\n") == []


def test_every_pattern_compiles_and_has_a_needle_it_can_reach() -> None:
    for sig in signatures():
        for rx in sig.patterns:
            lit = re.sub(r"\\.|\[[^\]]*\]|[()?*+{}^$|]", "", rx.pattern).lower()
            assert any(n in lit or n in rx.pattern.lower() for n in sig.needles) or sig.needles, sig.id


def test_fast_on_a_big_log() -> None:
    line = "2024-01-01 12:00:00 INFO step=1234 loss=1.2345 lr=3e-4 throughput=1234.5 tokens/s\n"
    text = line * 100_000 + (ERRORS / "watchdog_llamafactory_7396.txt").read_text()
    t0 = time.perf_counter()
    ms = match(text)
    assert time.perf_counter() - t0 < 3.0
    assert ms[0].id == "nccl.watchdog_timeout" and ms[0].line_no == 100_001


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=3000))
def test_any_text_never_raises(text: str) -> None:
    for m in match(text):
        assert m.category in CATEGORIES
        m.to_dict()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(sorted(EXPECTED)), min_size=1, max_size=4), st.text(max_size=200))
def test_mixed_real_texts_keep_their_matches(names: list[str], noise: str) -> None:
    text = noise + "\n" + "\n".join((ERRORS / n).read_text() for n in names)
    got = {m.id for m in match(text)}
    for n in names:
        assert EXPECTED[n][0] in got or any(
            EXPECTED[n][0] in s.supersedes for s in signatures() if s.id in got
        )


def test_sm_not_compatible_names_the_wheel_to_install() -> None:
    m = primary((ERRORS / "sm120_not_compatible_xorbits_3603.txt").read_text())
    assert m is not None and m.data["compute_capability"] == "12.0"
    assert m.data["gpu_name"] == "NVIDIA GeForce RTX 5090"
    assert any("--index-url https://download.pytorch.org/whl/cu128" in h and "570.26" in h for h in m.hints)


def test_oom_killer_names_the_victim() -> None:
    m = primary((ERRORS / "oom_killer_tranx_41.txt").read_text())
    assert m is not None and m.category == "host_oom"
    assert m.data["pid"] == 25315 and m.data["process"] == "python3"


def test_802_through_torch_warning_is_fabric_manager() -> None:
    m = primary((ERRORS / "system_not_ready_dstack_2348.txt").read_text())
    assert m is not None and m.id == "cuda.system_not_ready" and "fabricmanager" in m.fix
