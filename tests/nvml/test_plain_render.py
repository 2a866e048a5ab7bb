"""The rich-free plain renderer (pipes, logs) prints what rich prints without a TTY."""

from __future__ import annotations

import io
import sys

import pytest

from gpuclinic.diagnose import diagnose
from gpuclinic.render.terminal import _plain_table, make_console, render_plain, render_terminal
from gpuclinic.sources.scenarios import list_scenarios, load_scenario


def _both(report: object) -> tuple[str, str]:
    rich_buf, plain_buf = io.StringIO(), io.StringIO()
    render_terminal(report, make_console(rich_buf))  # type: ignore[arg-type]
    render_plain(report, plain_buf)  # type: ignore[arg-type]
    strip = "\n".join(line.rstrip() for line in rich_buf.getvalue().splitlines()).rstrip("\n")
    return strip, plain_buf.getvalue().rstrip("\n")


@pytest.mark.parametrize("name", [n for n, _ in list_scenarios()])
def test_plain_matches_rich_without_tty(name: str) -> None:
    rich_text, plain_text = _both(diagnose(load_scenario(name)))
    assert plain_text == rich_text


def test_plain_table_shrinks_the_widest_column_only() -> None:
    rows = [
        [
            "0",
            "A" * 80,
            "0000:18:00.0",
            "58°C HBM 66°C",
            "662W/700W",
            "99%",
            "69.0/80 GiB",
            "Gen5 x16",
            "healthy",
        ],
        ["1", "short", "0000:2a:00.0", "61°C", "6W", "9%", "-", "-", "drain (lost)"],
    ]
    lines = _plain_table(rows)
    assert max(len(x) for x in lines) <= 120
    assert lines[0].split() == ["GPU", "Name", "Bus", "Temp", "Power", "Util", "Memory", "PCIe", "Verdict"]
    assert "A…" in lines[1] and "0000:18:00.0" in lines[1] and lines[2].endswith("drain (lost)")


def test_render_terminal_uses_plain_path_without_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    monkeypatch.delitem(sys.modules, "rich.table", raising=False)
    render_terminal(diagnose(load_scenario("overheating")))
    assert "thermal.slowdown" in buf.getvalue() and "rich.table" not in sys.modules


def test_a_gpu_known_only_by_its_bus_id_is_named_once() -> None:
    """A log names GPU 0000:02:00.0 that NVML does not list: 'GPU 0000:02:00.0', not
    '... · 0000:02:00.0' again."""
    from pathlib import Path

    from gpuclinic.explain import explain_text

    text = (Path(__file__).parents[1] / "fixtures/kernel_log/gpu-burn-1-aer-fatal-xid79.log").read_text()
    buf = io.StringIO()
    render_plain(explain_text(text), buf)
    out = buf.getvalue()
    assert "gpu.fallen_off_bus · GPU 0000:02:00.0" in out
    assert "GPU 0000:02:00.0 · 0000:02:00.0" not in out
    from gpuclinic.render.markdown import render_markdown

    md = render_markdown(explain_text(text))
    assert "(GPU 0000:02:00.0)" in md and "0000:02:00.0, 0000:02:00.0" not in md
