"""Shared fixtures: a running WAN simulator and an in-process CLI runner (all traffic on 127.0.0.1)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gpuclinic.cli import main
from gpuclinic.transfer.wansim import Knobs, WanSim, make_data

MiB = 1024 * 1024


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def sim() -> Iterator[WanSim]:
    with WanSim(Knobs()) as s:
        yield s


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    def run(*args: str) -> CliResult:
        code = 0
        try:
            main(list(args))
        except SystemExit as e:
            code = int(e.code or 0)
        cap = capsys.readouterr()
        return CliResult(code, cap.out, cap.err)

    return run


def blob(size: int, seed: int = 1) -> tuple[bytes, str]:
    data = make_data(size, seed)
    return data, hashlib.sha256(data).hexdigest()
