"""``dcgmi diag -j`` output (a real DCGM 3.1.0 document) becomes one scorecard item per test."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.accept.checks import dcgm_items, parse_dcgmi

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "accept" / "dcgmi-diag-3.1.0-8gpu.json"


def test_real_dcgmi_output_parses_to_items() -> None:
    items = {i.id: i for i in parse_dcgmi(FIXTURE.read_text())}  # a warning line precedes the JSON
    assert len(items) == 10  # 9 deployment tests + the software test (one result per GPU, folded)
    assert items["dcgm.denylist"].status == "pass"
    assert items["dcgm.page_retirement/row_remap"].title == "dcgmi diag: Page Retirement/Row Remap"
    assert items["dcgm.software"].status == "pass" and items["dcgm.software"].gpu == "all"


def test_a_failing_and_a_skipped_test() -> None:
    # derived from the real document: GPU 5's software result fails, Inforom is skipped
    text = FIXTURE.read_text()
    text = text.replace(
        '"gpu_ids" : 5,\n\t\t\t\t\t\t\t"status" : "PASS"',
        '"gpu_ids" : 5,\n\t\t\t\t\t\t\t"status" : "FAIL",'
        '\n\t\t\t\t\t\t\t"warnings" : [{"warning": "Found 1 uncorrectable memory error"}]',
    )
    text = text.replace(
        '"name" : "Inforom",\n\t\t\t\t\t"results" :\n\t\t\t\t\t[\n\t\t\t\t\t\t{\n'
        '\t\t\t\t\t\t\t"gpu_ids" : "0,1,2,3,4,5,6,7",\n\t\t\t\t\t\t\t"status" : "PASS"',
        '"name" : "Inforom",\n\t\t\t\t\t"results" :\n\t\t\t\t\t[\n\t\t\t\t\t\t{\n'
        '\t\t\t\t\t\t\t"gpu_ids" : "0,1,2,3,4,5,6,7",\n\t\t\t\t\t\t\t"status" : "SKIP"',
    )
    items = {i.id: i for i in parse_dcgmi(text)}
    sw = items["dcgm.software"]
    assert sw.status == "fail" and "uncorrectable memory error" in sw.why and sw.measured == "fail/pass"
    assert items["dcgm.inforom"].status == "skipped"


def test_without_dcgmi_the_item_says_why(monkeypatch: object) -> None:
    import gpuclinic.accept.checks as checks

    monkeypatch.setattr(checks.shutil, "which", lambda name: None)  # type: ignore[attr-defined]
    (it,) = dcgm_items(1)
    assert it.status == "skipped" and "dcgmi not installed" in it.why
