"""``run_explain`` pauses the cycle collector for its run (issue 14) and gives it back as it found it, so a
caller that runs many explains in one process (the golden tool, the tests) keeps its own setting."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from gpuclinic.cli.explain_run import run_explain

ERROR = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "software" / "errors").glob("*.txt"))[0]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was(enabled: bool, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[bool] = []
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        import gpuclinic.explain as E

        real = E.explain_text

        def spy(*a: object, **k: object) -> object:
            seen.append(gc.isenabled())
            return real(*a, **k)  # type: ignore[arg-type]

        E.explain_text = spy  # type: ignore[assignment]
        try:
            code = run_explain(str(ERROR), as_json=True, offline=True)
        finally:
            E.explain_text = real
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False] and code in (1, 2)
    assert '"command": "explain"' in capsys.readouterr().out
