"""Pasted top / vmstat / mpstat / iostat output is read as host facts and judged by the host checks with the
thresholds of knowledge/data/host_thresholds.json (steal 5%, iowait 20%, swap 100 pages/s); the since-boot
first row of vmstat and first report of iostat give way to the interval figures after them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bothpaths import both_paths
from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import evidence, host_stats

TOP = (
    "top - 10:01:02 up 3 days,  1:02,  1 user,  load average: 7.10, 6.90, 6.50\n"
    "Tasks: 301 total,   2 running, 299 sleeping,   0 stopped,   0 zombie\n"
    "%Cpu(s): 12.3 us,  3.1 sy,  0.0 ni, 50.2 id,  0.1 wa,  0.0 hi,  0.4 si, 33.9 st\n"
)
OLD_TOP = "Cpu(s):  2.0%us,  1.0%sy,  0.0%ni, 90.0%id,  0.5%wa,  0.0%hi,  0.0%si,  6.5%st\n"
VMSTAT = (
    "procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu-----\n"
    " r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st\n"
    " 1  0      0 800000  10000 900000    0    0     5    10  100  200  5  1 94  0  0\n"
    " 9  3 900000  20000   1000  50000 2400 3600   900  4000 9000 8000 20 10 30 25 15\n"
    " 8  4 910000  18000   1000  48000 2000 3000   800  3900 9100 8100 22 10 28 26 14\n"
)
VMSTAT_T = (
    " r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st                 UTC\n"
    " 1  0      0 800000  10000 900000    0    0     5    10  100  200  5  1 94  0  0 2024-05-01 10:00:00\n"
    " 1  0      0 800000  10000 900000    0    0     5    10  100  200  4  1 85  0 10 2024-05-01 10:00:01\n"
)
MPSTAT = (
    "12:00:01 AM  CPU    %usr   %nice    %sys %iowait    %irq   %soft  %steal  %guest  %gnice   %idle\n"
    "12:00:02 AM  all    1.00    0.00    1.00    0.00    0.00    0.00   40.00    0.00    0.00   58.00\n"
    "Average:     all    2.00    0.00    1.00    0.00    0.00    0.00   12.00    0.00    0.00   85.00\n"
)
IOSTAT_TWO = (
    "avg-cpu:  %user   %nice %system %iowait  %steal   %idle\n"
    "           5.00    0.00    2.00   40.00    0.00   53.00\n"
    "\n"
    "avg-cpu:  %user   %nice %system %iowait  %steal   %idle\n"
    "           5.00    0.00    2.00    3.00    0.00   90.00\n"
)


@pytest.mark.parametrize(("text", "code"), [(TOP, "host.cpu_steal"), (OLD_TOP, "host.cpu_steal")])
def test_top_steal(tmp_path: Path, text: str, code: str) -> None:
    for codes in both_paths(tmp_path, text):
        assert codes.get(code) == "warning", codes


def test_top_evidence_names_the_paste_not_a_sampling_window() -> None:
    (f,) = [f for f in explain_text(TOP, "top.txt").findings if f.code == "host.cpu_steal"]
    assert f.evidence == ["steal 33.9% in the pasted top"]


def test_vmstat_interval_rows_without_the_since_boot_row(tmp_path: Path) -> None:
    facts, used = host_stats.read(VMSTAT.splitlines())
    assert facts is not None
    assert facts.cpu_pct["steal"] == pytest.approx(14.5) and facts.cpu_pct["iowait"] == pytest.approx(25.5)
    assert facts.swap_in_per_s == pytest.approx(550.0) and facts.swap_out_per_s == pytest.approx(825.0)
    assert used == {1, 2, 3, 4, 5}
    for codes in both_paths(tmp_path, VMSTAT):
        assert {"host.cpu_steal", "host.iowait", "host.swapping"} <= set(codes), codes


def test_vmstat_t_with_its_time_zone_column() -> None:
    facts, _ = host_stats.read(VMSTAT_T.splitlines())
    assert facts is not None and facts.cpu_pct["steal"] == 10.0


def test_mpstat_average_row_wins() -> None:
    facts, _ = host_stats.read(MPSTAT.splitlines())
    assert facts is not None and facts.cpu_pct["steal"] == 12.0 and facts.extra["read_from"] == "mpstat"


def test_iostat_last_report_wins(tmp_path: Path) -> None:
    for codes in both_paths(tmp_path, IOSTAT_TWO):
        assert "host.iowait" not in codes, codes


def test_healthy_vmstat_is_read_not_refused(tmp_path: Path) -> None:
    text = VMSTAT.splitlines()[0] + "\n" + VMSTAT.splitlines()[1] + "\n" + VMSTAT.splitlines()[2] + "\n"
    p = tmp_path / "vmstat.txt"
    p.write_text(text)
    snap = evidence.load_evidence([str(p)])  # no "not recognised"
    assert snap.host is not None and snap.host.cpu_pct["idle"] == 94
    assert not [f for f in diagnose(snap).findings if f.severity.name.lower() in ("warning", "critical")]


def test_prose_mentioning_the_words_is_not_read() -> None:
    text = "we watched %steal and %iowait in mpstat and saw nothing; Cpu(s) looked fine\n"
    assert host_stats.read(text.splitlines()) == (None, set())


def test_sar_u_is_read_like_mpstat() -> None:
    sar = (
        "12:00:01 AM     CPU     %user     %nice   %system   %iowait    %steal     %idle\n"
        "12:10:01 AM     all      3.00      0.00      1.00     30.00      0.00     66.00\n"
        "Average:        all      3.00      0.00      1.00     30.00      0.00     66.00\n"
    )
    facts, _ = host_stats.read(sar.splitlines())
    assert facts is not None and facts.cpu_pct["iowait"] == 30.0 and facts.extra["read_from"] == "sar -u"


FREE_M_LOW = (
    "$ free -m\n"
    "               total        used        free      shared  buff/cache   available\n"
    "Mem:          515890      509000        2000          10        4890        1500\n"
    "Swap:              0           0           0\n"
)


def test_free_m_low_available_memory(tmp_path: Path) -> None:
    facts, used = host_stats.read(FREE_M_LOW.splitlines())
    assert facts is not None and facts.mem_available_bytes == 1500 << 20 and used == {2, 3, 4}
    for codes in both_paths(tmp_path, FREE_M_LOW):
        assert codes.get("host.memory_low") == "warning", codes


def test_free_h_units_and_decimal_comma() -> None:
    text = (
        "              total        used        free      shared  buff/cache   available\n"
        "Mem:            62G         10G        400M        145M         51G         51G\n"
        "Swap:          8,0G        8,0G          0B\n"
    )
    facts, _ = host_stats.read(text.splitlines())
    assert facts is not None and facts.mem_total_bytes == 62 << 30 and facts.swap_total_bytes == 8 << 30


def test_free_without_its_unit_is_not_guessed() -> None:
    """Plain numbers are KiB, MiB or GiB depending on a flag the paste does not show: not read."""
    assert host_stats.read(FREE_M_LOW.splitlines()[1:]) == (None, set())


def test_top_memory_lines_with_explicit_units(tmp_path: Path) -> None:
    text = (
        "top - 10:01:02 up 3 days,  1:02,  1 user,  load average: 1.10, 0.90, 0.50\n"
        "%Cpu(s):  2.3 us,  1.1 sy,  0.0 ni, 96.2 id,  0.1 wa,  0.0 hi,  0.3 si,  0.0 st\n"
        "MiB Mem :  64215.2 total,    512.3 free,  62991.1 used,    711.8 buff/cache\n"
        "MiB Swap:   2048.0 total,      0.0 free,   2048.0 used.    801.4 avail Mem\n"
    )
    facts, used = host_stats.read(text.splitlines())
    assert facts is not None and facts.mem_available_bytes == int(801.4 * (1 << 20)) and {3, 4} <= used
    for codes in both_paths(tmp_path, text):
        assert codes.get("host.memory_low") == "warning" and "host.cpu_steal" not in codes, codes
