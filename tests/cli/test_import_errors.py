"""A broken import of gpuclinic's own code surfaces as an error; only a missing third-party package is a
clean one-line "needs the Python package" message (issue 10: no "not available in this build" swallowing)."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from gpuclinic import cli


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], missing: str
) -> tuple[int, str]:
    mod = types.ModuleType("gpuclinic.cli._broken")

    def boom(name: str) -> None:
        raise ModuleNotFoundError(f"No module named '{name}'", name=name)

    monkeypatch.setitem(cli.COMMANDS, "broken", ("gpuclinic.cli._broken", "cmd", "test"))
    real = importlib.import_module

    def fake(name: str, *a: object) -> types.ModuleType:
        if name == "gpuclinic.cli._broken":
            boom(missing)
        return real(name)

    monkeypatch.setattr(importlib, "import_module", fake)
    monkeypatch.delenv("GPUCLINIC_DEBUG", raising=False)
    assert mod is not None
    with pytest.raises(SystemExit) as e:
        cli.main(["broken"])
    return int(e.value.code or 0), capsys.readouterr().err


def test_own_module_import_error_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, err = _run(monkeypatch, capsys, "gpuclinic.sources.gone")
    assert rc == 3 and "internal error" in err and "gpuclinic.sources.gone" in err
    assert "not available in this build" not in err


def test_missing_third_party_package_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, err = _run(monkeypatch, capsys, "some_optional_pkg")
    assert rc == 3 and "needs the Python package 'some_optional_pkg'" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "gpuclinic.cli._broken" not in sys.modules
