from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_pynvml import FakeNvml


@pytest.fixture
def install_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeNvml]]:
    """Build and install a FakeNvml; hung fake calls are released at teardown."""
    made: list[FakeNvml] = []

    def make(*args: Any, **kwargs: Any) -> FakeNvml:
        f = FakeNvml(*args, **kwargs).install(monkeypatch)
        made.append(f)
        return f

    yield make
    for f in made:
        f.release.set()
        assert not f.mutating_calls, f"state-changing NVML calls made: {f.mutating_calls}"
