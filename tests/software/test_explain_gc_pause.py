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


def test_an_explain_process_ends_without_turning_the_collector_back_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process that ends in ``os._exit`` has no use for a collection after the run: the first allocation
    once ``run_explain`` turned the collector back on made one walk a big log's objects (~15 ms)."""
    import gpuclinic.cli as C

    at_exit: list[tuple[int, bool]] = []

    def fake_exit(code: int) -> None:
        at_exit.append((code, gc.isenabled()))
        raise SystemExit(code)

    was = gc.isenabled()
    gc.enable()
    monkeypatch.setattr(C, "_exit_now", fake_exit)
    monkeypatch.setattr("sys.argv", ["gpuclinic", "explain", "--offline", str(ERROR)])
    try:
        with pytest.raises(SystemExit):
            C.main()
        assert at_exit and at_exit[0][0] in (1, 2) and at_exit[0][1] is False
        gc.enable()
        with pytest.raises(SystemExit):  # main(argv): a caller's process goes on, its collector stays on
            C.main(["explain", "--offline", str(ERROR)])
        assert gc.isenabled() and len(at_exit) == 1
    finally:
        (gc.enable if was else gc.disable)()
    assert "explain" in capsys.readouterr().out.lower()
