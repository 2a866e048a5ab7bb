"""``dcgmi diag -j`` saved as evidence is read (was "not recognised" / NO KNOWN CAUSE): a test result
with status Fail is ``dcgm.diag_fail``, an all-PASS run is read and healthy, a cut JSON stays unread."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.errors import InputError
from gpuclinic.explain import explain_text
from gpuclinic.sources.evidence import snapshot_from_text

ACCEPT = Path(__file__).resolve().parents[1] / "fixtures" / "accept"


def test_per_gpu_fail_json_is_a_failed_test() -> None:
    text = (ACCEPT / "dcgm-diag-per-gpu-fail.json").read_text()
    rep = diagnose(snapshot_from_text(text, "t"))
    (f,) = [f for f in rep.findings if f.code == "dcgm.diag_fail"]
    assert len(f.evidence) == 3 and all("sm_stress: FAIL" in e for e in f.evidence)
    (rec,) = rep.snapshot.input_records
    assert rec.unclaimed == 0
    assert [x.code for x in explain_text(text, "t").findings] == ["dcgm.diag_fail"]


def test_all_pass_json_is_read_and_healthy() -> None:
    text = (ACCEPT / "dcgmi-diag-3.1.0-8gpu.json").read_text()
    rep = diagnose(snapshot_from_text(text, "t"))
    assert not [f for f in rep.findings if f.severity.name in ("WARNING", "CRITICAL")]
    (rec,) = rep.snapshot.input_records
    assert "dcgm" in rec.readers and rec.unclaimed == 0


def test_cut_json_is_not_read() -> None:
    text = (ACCEPT / "dcgm-diag-per-gpu-fail.json").read_text()[:2000]
    with pytest.raises(InputError):
        snapshot_from_text(text, "t")
