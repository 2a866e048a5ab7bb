"""A pasted nccl-tests table is read (a note with what it measured; doctor: HEALTHY, not "not recognised"),
and its one verdict, values out of bounds, is the critical nccl.tests_wrong_results."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.sources import evidence, nccl_tests

TABLE = (
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0\n"
    "#\n"
    "#  out-of-place  in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
    "busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
    "(GB/s)\n"
    "  8  2  float  sum  -1  42.56  0.00  0.00  0  41.90  0.00  "
    "0.00      0\n"
    "   134217728      33554432     float     sum      -1   1180.3  113.72  199.01      0   1179.0  113.84  "
    "199.22      0\n"
    "# Out of bounds values : {oob}\n"
    "# Avg bus bandwidth    : 99.5\n"
    "#\n"
)


def _run(tmp_path: Path, oob: str) -> tuple[list[str], dict[str, str]]:
    p = tmp_path / "allreduce.txt"
    p.write_text(TABLE.replace("{oob}", oob))
    snap = evidence.load_evidence([str(p)])
    return snap.notes, {f.code: f.severity.name.lower() for f in diagnose(snap).findings}


def test_healthy_table_is_read(tmp_path: Path) -> None:
    notes, codes = _run(tmp_path, "0 OK")
    assert any(
        "nccl-tests run read: 2 sizes, busbw 199.01 GB/s at 134217728 B, avg bus bandwidth 99.5 GB/s, "
        "out of bounds values 0" in n
        for n in notes
    ), notes
    assert not {c for c, s in codes.items() if s in ("warning", "critical")}, codes


def test_out_of_bounds_is_critical(tmp_path: Path) -> None:
    _, codes = _run(tmp_path, "12 FAILED")
    assert codes.get("error.nccl.tests_wrong_results") == "critical", codes


def test_old_table_without_root_column() -> None:
    """Older nccl-tests printed no root column and an error column (a float) where #wrong is now."""
    lines = [
        "#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error",
        "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
        "  64  16  float  sum  163.7  0.00  0.00  2e-07  164.0  0.00  0.00  2e-07",
        "  1048576  262144  float  sum  181.3  5.79  5.79  0e+00  180.7  5.80  5.80  0e+00",
    ]
    run, used = nccl_tests.parse(lines)
    assert run.rows == 2 and run.largest_busbw == 5.79 and used == [1, 2, 3, 4]
