"""Faults: NVML errors mid-run, a hung driver, GPUs lost or gone, SIGKILL of the agent, a full disk."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.watch.agent import Agent
from gpuclinic.watch.backend import BackendInfo, ScaledClock
from gpuclinic.watch.config import ChannelConfig, NotifyConfig, config_from_dict
from gpuclinic.watch.notify import Notifier
from gpuclinic.watch.simulate import ScenarioBackend, load_watch_scenario
from gpuclinic.watch.store import WatchStore


class FlakyBackend:
    """The steady8 scenario, but chosen sample calls raise a real NVMLError or block like a hung driver."""

    def __init__(
        self, clock: Any, fail: set[int] | None = None, hang: dict[int, float] | None = None
    ) -> None:
        self.inner = ScenarioBackend(load_watch_scenario("steady8"), clock)
        self.fail = fail or set()
        self.hang = hang or {}
        self.calls = 0
        self.release = threading.Event()

    def open(self) -> BackendInfo:
        return self.inner.open()

    def sample(self) -> list[GpuFacts]:
        self.calls += 1
        if self.calls in self.fail:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        if self.calls in self.hang:
            self.release.wait(self.hang[self.calls])
        return self.inner.sample()

    def close(self) -> None:
        self.release.set()


def _agent(backend: Any, clock: Any, **rules: Any) -> tuple[Agent, list[str]]:
    cfg = config_from_dict({"rules": rules, "agent": {"sample_timeout": 0.3, "doctor_interval": 0}})
    logs: list[str] = []
    return Agent(cfg, backend, clock=clock, log=logs.append), logs


def test_nvml_errors_mid_run_are_counted_alerted_and_recovered() -> None:
    clock = ScaledClock(1)
    be = FlakyBackend(clock, fail={3, 4, 5, 6})
    a, logs = _agent(be, clock, sample_error_count=3, resolve_after_s=0)
    a.start()
    opened: list[str] = []
    a.book.subscribe(lambda ev, what: opened.append(f"{what}:{ev.code}"))
    for _ in range(8):
        a.tick()
    assert a.samples_total == 4 and a.sample_errors_total == 4
    assert "opened:watch.sample_errors" in opened and "resolved:watch.sample_errors" in opened
    assert any("NVMLError" in m and "Unknown Error" in m for m in logs)
    assert len(a.status_snapshot().gpus) == 8  # last good sample kept for /metrics
    a.shutdown()


def test_hung_driver_never_blocks_the_agent(agent_factory: Callable[..., Agent]) -> None:
    clock = ScaledClock(1)
    be = FlakyBackend(clock, hang={2: 30.0})
    a, _ = _agent(be, clock, stale_after_s=0.5, resolve_after_s=0)
    a.start()
    a.tick()
    t0 = time.monotonic()
    ticks = 0
    while time.monotonic() - t0 < 1.2:
        a.tick()  # each returns within sample_timeout even though the driver call hangs
        ticks += 1
    assert ticks >= 4
    st = a.status_snapshot()
    assert st.stalled and st.sample_age >= 0.5
    assert be.calls == 2  # never a second call stuck in the driver
    (ev,) = [e for e in a.book.open_events() if e.code == "watch.sampler_stalled"]
    assert ev.severity.label == "critical"
    # a kernel XID still alerts while sampling hangs
    for kev in a._parser.feed(["NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."]):
        a.handle_kernel_event(kev)
    assert any(e.code == "xid.79" for e in a.book.open_events())
    be.release.set()  # the driver call returns
    time.sleep(0.05)
    a.tick()
    a.tick()
    assert not a.status_snapshot().stalled
    assert not any(e.code == "watch.sampler_stalled" for e in a.book.open_events())
    a.shutdown()


def test_gpu_lost_and_gpu_gone(agent_factory: Callable[..., Agent], tmp_path: Path) -> None:
    sc = load_watch_scenario("steady8")
    raw: dict[str, Any] = {
        "name": "gone",
        "gpu_count": 4,
        "gpu_template": sc.gpus[0] | {"uuid": "GPU-{i}"},
        "events": [{"t": 5, "gpu": 1, "set": {"lost": True}}, {"t": 10, "gpu": 3, "set": {"absent": True}}],
    }
    raw["gpu_template"].pop("index")
    raw["gpu_template"].pop("pci_bus_id")
    a = agent_factory(raw, scale=30, db=tmp_path / "w.db")
    a.run(duration_s=20)
    assert a.store is not None
    evs = {e.key: e for e in a.store.events()}
    assert evs["rules:gpu.missing:GPU-1"].gpu == 1
    missing = evs["rules:gpu.missing:node"]
    assert "3 GPU(s) visible now, 4 expected" in missing.evidence[0]
    assert any("GPU-3" in x for x in missing.evidence)
    assert a.status_snapshot().gpus_expected == 4


@pytest.mark.timeout(60)
def test_sigkill_then_restart_loses_at_most_a_second(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    cmd = [
        sys.executable,
        "-m",
        "gpuclinic",
        "watch",
        "--scenario",
        "steady8",
        "--interval",
        "0.2",
        "--db",
        str(db),
        "--no-http",
        "--quiet",
        "--doctor-interval",
        "0",
    ]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    # wait until it is writing, then let it run a bit
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(db) as c:
                if c.execute("SELECT COUNT(*) FROM samples").fetchone()[0] > 8:
                    break
        except sqlite3.Error:
            pass
        time.sleep(0.1)
    time.sleep(1.5)
    t_kill = time.time()
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    last = c.execute("SELECT MAX(ts) FROM samples").fetchone()[0] / 1000
    assert t_kill - last <= 1.25, f"lost {t_kill - last:.2f}s of samples"
    n_before = c.execute("SELECT COUNT(*) FROM samples WHERE gpu = 0").fetchone()[0]
    c.close()
    # restart on the same store: it opens, keeps the old rows, and appends
    p2 = subprocess.run([*cmd, "--duration", "1s"], capture_output=True, text=True, timeout=30)
    assert p2.returncode == 0, p2.stderr
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert c.execute("SELECT COUNT(*) FROM samples WHERE gpu = 0").fetchone()[0] >= n_before + 4
    c.close()


class _FullDisk:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.full = True

    def execute(self, sql: str, *a: Any) -> Any:
        if self.full and sql.startswith(("INSERT", "UPDATE", "DELETE")):
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.execute(sql, *a)

    def executemany(self, sql: str, rows: Any) -> Any:
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.executemany(sql, rows)

    def __getattr__(self, k: str) -> Any:
        return getattr(self.conn, k)


def test_disk_full_keeps_alerting_and_says_so(tmp_path: Path, receiver: Any) -> None:
    clock = ScaledClock(1)
    store = WatchStore(tmp_path / "w.db")
    disk = _FullDisk(store.conn)
    store.conn = disk  # type: ignore[assignment]
    notifier = Notifier(
        NotifyConfig(channels=[ChannelConfig(type="webhook", url=receiver.url)], backoff_s=0.01),
        spool_dir=tmp_path / "spool",
    )
    cfg = config_from_dict(
        {"agent": {"doctor_interval": 0}, "store": {"flush_interval": 0}, "rules": {"resolve_after": 0}}
    )
    logs: list[str] = []
    a = Agent(
        cfg,
        ScenarioBackend(load_watch_scenario("steady8"), clock),
        clock=clock,
        store=store,
        notifier=notifier,
        log=logs.append,
    )
    a.start()
    for _ in range(3):
        a.tick()
    for kev in a._parser.feed(["NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus."]):
        a.handle_kernel_event(kev)
    a.tick()
    notifier.flush(5)
    codes = {b["code"] for b in receiver.bodies()}
    assert {"watch.store_failed", "xid.79"} <= codes  # alerting works with the disk full, and says so
    failed = next(b for b in receiver.bodies() if b["code"] == "watch.store_failed")
    assert "database or disk is full" in failed["title"] and failed["severity"] == "critical"
    assert any("store write failed: database or disk is full" in m and "still alerting" in m for m in logs)
    st = a.status_snapshot()
    assert st.store_error == "database or disk is full" and st.store_buffered == 4 * 8
    # space comes back: held rows are written, the event resolves
    disk.full = False
    a.tick()
    notifier.flush(5)
    assert store.error is None and store.buffered == 0
    assert len(store.query("temperature", gpu=0, since=0)) == 5
    assert any(b["code"] == "watch.store_failed" and b["status"] == "resolved" for b in receiver.bodies())
    assert [e.code for e in store.events() if e.code == "xid.79"] == [
        "xid.79"
    ]  # written once space came back
    a.shutdown()
    notifier.close()


def test_lost_gpu_without_uuid_is_not_counted_twice() -> None:
    from gpuclinic.watch.config import RulesConfig
    from gpuclinic.watch.rules import RuleEngine

    eng = RuleEngine(RulesConfig())
    gs = [
        GpuFacts(index=i, uuid=f"GPU-{i}", pci_bus_id=f"0000:{i + 1:02x}:00.0", temperature_c=40.0)
        for i in range(4)
    ]
    eng.evaluate(0.0, gs)
    gs[2] = GpuFacts(index=2, pci_bus_id="0000:03:00.0", lost=True)  # NVML no longer gives its UUID
    conds, _ = eng.evaluate(1.0, gs)
    assert [c.code for c in conds] == ["gpu.missing"]
    assert conds[0].key == "rules:gpu.missing:GPU-2" and conds[0].uuid == "GPU-2"
    gs.pop(3)  # and one disappears entirely
    conds, _ = eng.evaluate(2.0, gs)
    (missing,) = [c for c in conds if c.key == "rules:gpu.missing:node"]
    assert missing.evidence[0] == "3 GPU(s) visible now, 4 expected"


def test_near_slowdown_closes_when_the_gpu_is_above_the_limit() -> None:
    """Issue 14: "within 5 °C of thermal slowdown" stayed open while the GPU was already above it,
    and alert text said "5 C" without the degree sign."""
    from gpuclinic.model import Severity
    from gpuclinic.watch.config import RulesConfig
    from gpuclinic.watch.rules import RuleEngine

    eng = RuleEngine(RulesConfig())

    def temp_conds(t: float, temp: float) -> list[Any]:
        g = GpuFacts(index=0, uuid="GPU-0", temperature_c=temp, slowdown_temp_c=87.0)
        conds, _ = eng.evaluate(t, [g])
        return [c for c in conds if c.code.startswith("thermal.")]

    (near,) = temp_conds(0.0, 84.0)  # the doctor's heat rule: one code, its severity rule decides
    assert near.code == "thermal.slowdown" and near.severity == Severity.WARNING
    assert "within 5 °C of its slowdown temperature" in near.title
    (over,) = temp_conds(1.0, 89.0)  # above the limit: the condition no longer says "within", and is critical
    assert over.code == "thermal.slowdown" and over.severity == Severity.CRITICAL
    assert "at or above its hardware slowdown temperature" in over.title and "within" not in over.title
    (near2,) = temp_conds(2.0, 85.0)
    assert near2.key == near.key == over.key and near2.severity == Severity.WARNING
    # cooled: the warning of 1 s ago stays in the detectors' window (throttle_min, 5 s), said to be past
    (past,) = temp_conds(3.0, 70.0)
    assert past.key == near.key and past.data["window"]["in_newest"] is False
    assert any("not in the newest" in e for e in past.evidence)
    assert temp_conds(8.5, 70.0) == []  # out of the window (it keeps one sample 5 s back or older)
    text = " ".join(" ".join([c.title, *c.evidence]) for c in [near, over])
    assert " C " not in text.replace("°C", "") and " C," not in text and " C)" not in text
