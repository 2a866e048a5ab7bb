"""The agent on the NVML backend, with pynvml faked at its call boundary (tests/nvml/fake_pynvml.py):
samples flow, a GPU lost mid-run becomes an event, a hung NVML call does not block the agent."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvml"))
from fake_pynvml import FakeNvml

from gpuclinic.watch.agent import Agent
from gpuclinic.watch.backend import NvmlBackend, RealClock
from gpuclinic.watch.config import config_from_dict


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    f = FakeNvml(4).install(monkeypatch)
    yield f
    f.release.set()
    assert not f.mutating_calls, f.mutating_calls  # the agent never changes GPU state


def _agent(**agent: Any) -> Agent:
    cfg = config_from_dict({"agent": {"doctor_interval": 0, **agent}, "rules": {"resolve_after": 0}})
    return Agent(cfg, NvmlBackend(call_timeout_s=0.2), clock=RealClock(), log=lambda m: None)


def test_nvml_backend_samples_every_gpu(fake: FakeNvml) -> None:
    a = _agent()
    a.start()
    a.tick()
    st = a.status_snapshot()
    assert a.info.name == "nvml" and a.info.driver_version == "550.54.15"
    assert len(st.gpus) == 4 and all(g.temperature_c is not None for g in st.gpus)
    assert st.samples_total == 1 and not st.stalled
    a.shutdown()


def test_gpu_lost_mid_run(fake: FakeNvml) -> None:
    a = _agent()
    a.start()
    a.tick()
    g = fake.gpu(3)
    g.lose_after = len(g.calls)
    a.tick()
    lost = [e for e in a.book.open_events() if e.code == "gpu.missing"]
    assert [e.gpu for e in lost] == [3]
    assert a.status_snapshot().gpus[3].lost
    a.shutdown()


def test_hung_nvml_call_is_bounded(fake: FakeNvml) -> None:
    a = _agent(sample_timeout=1.0)
    a.start()
    a.tick()
    fake.gpu(1).hang.add("nvmlDeviceGetTemperature")
    t0 = time.monotonic()
    a.tick()
    assert time.monotonic() - t0 < 1.5  # the reader's per-call timeout or the sampler's deadline
    a.shutdown()
