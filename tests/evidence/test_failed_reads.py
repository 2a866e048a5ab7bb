"""A GPU field nvidia-smi printed as an error ("ERR!", "Unknown Error") is said in the report's "could not
check" list, never silently left out (Azure azhpc-diagnostics 77: power "ERR! / 250W"; nvidia-docker 464:
"Product Name : Unknown Error", which was taken as the GPU's name)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources.evidence import load_evidence, snapshot_from_text

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "corpus"


def _skipped(name: str) -> list[tuple[str, str]]:
    report = diagnose(load_evidence([str(CORPUS / name)]))
    return [(s.what, s.why) for s in report.skipped if s.why.startswith("the GPU answered")]


def test_err_power_in_a_table_is_a_could_not_check() -> None:
    got = _skipped("table_power_err_v100_azhpcdiag_77.txt")
    assert got == [("GPU 1: power_draw_w", "the GPU answered ERR!")]


def test_unknown_error_product_name_is_no_name() -> None:
    report = diagnose(load_evidence([str(CORPUS / "q_product_name_unknown_error_375_nvdocker_464.txt")]))
    (g,) = report.snapshot.gpus
    assert g.name is None
    assert ("GPU 0: name", "the GPU answered Unknown Error") in [(s.what, s.why) for s in report.skipped]


def test_explain_says_it_too() -> None:
    text = (CORPUS / "table_power_err_v100_azhpcdiag_77.txt").read_text()
    assert any(s.what == "GPU 1: power_draw_w" for s in explain_text(text, "t").skipped)


def test_not_supported_is_not_a_failed_read() -> None:
    """'[Not Supported]' is a feature the GPU lacks, not a failed answer: no could-not-check line for it."""
    text = (CORPUS / "q_product_name_unknown_error_375_nvdocker_464.txt").read_text()
    text = text.replace("Product Name                    : Unknown Error", "Product Name : GeForce GTX 1080")
    text += "    Fan Speed                       : [Not Supported]\n"
    report = diagnose(snapshot_from_text(text, "t"))
    assert report.snapshot.gpus[0].unreadable == {"fan_percent": "Not Supported"}
    assert not [s for s in report.skipped if s.why.startswith("the GPU answered")]


def test_access_blocked_ecc_mode_stays_in_the_dump_and_is_a_failed_read() -> None:
    """gVisor PR 10676: `ECC Mode / Current : GPU access blocked by the operating system` was cut out of the
    -q dump as a separate nvidia-smi error (leaving its GPU header unread) and the field was not reported."""
    snap = load_evidence([str(CORPUS / "q_d_ecc_access_blocked_gvisor_10676.txt")])
    (rec,) = snap.input_records
    assert [s.kind for s in rec.segments] == ["smi_text"] and rec.unclaimed == 0
    (g,) = snap.gpus
    assert g.ecc_mode_current is None and "access blocked" in g.unreadable["ecc_mode_current"]
    got = _skipped("q_d_ecc_access_blocked_gvisor_10676.txt")
    assert got == [("GPU 0: ecc_mode_current, ecc_mode_pending",
                    "the GPU answered GPU access blocked by the operating system")]
