"""watch/history/events from the command line: formats, bad input as one line, no store created by readers."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from gpuclinic.cli import main
from watchproc import watch_argv


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ex:
        main(args)
    out, err = capsys.readouterr()
    return int(ex.value.code or 0), out, err


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("w") / "w.db"
    r = subprocess.run(
        watch_argv("--db", str(db), "--no-http", "--duration", "70s", "--quiet", time_scale=60),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return db


def test_history_formats(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(
        ["history", "temperature", "--gpu", "0", "--since", "2h", "--format", "csv", "--db", str(demo_db)],
        capsys,
    )
    assert rc == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["time", "gpu", "kind", "temperature_celsius"]
    # every stored sample of GPU 0 is printed once (raw), plus its 1-minute rollups; how many samples a
    # time-scaled run stores depends on the machine's load, so the count comes from the store itself
    with sqlite3.connect(demo_db) as c:
        raw_n = c.execute("SELECT count(*) FROM samples WHERE gpu = 0").fetchone()[0]
        rollup_n = c.execute("SELECT count(*) FROM samples_1m WHERE gpu = 0").fetchone()[0]
    kinds = [r[2] for r in rows[1:]]
    assert raw_n >= 20 and kinds.count("raw") == raw_n and kinds.count("1m") == rollup_n
    assert {r[1] for r in rows[1:]} == {"0"} and set(kinds) <= {"1m", "raw"}
    assert max(float(r[3]) for r in rows[1:]) > 86
    rc, out, _ = _run(["history", "power", "--format", "json", "--db", str(demo_db), "--since", "2h"], capsys)
    d = json.loads(out)
    assert d["unit"] == "watts" and {p["gpu"] for p in d["points"]} == {0, 1, 2, 3}
    # GPU 2 is lost at t=30: its samples stop there while the others go on
    last = {g: max(p["ts"] for p in d["points"] if p["gpu"] == g) for g in (0, 2)}
    assert 35 <= last[0] - last[2] <= 45
    rc, out, _ = _run(["history", "utilization", "--gpu", "3", "--db", str(demo_db), "--since", "2h"], capsys)
    assert rc == 0 and out.splitlines()[0].startswith("time (UTC)")


def test_events_text_and_json(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["events", "--db", str(demo_db)], capsys)
    assert rc == 0 and "xid.79 GPU 2" in out and "what to do:" in out and "fallen off the bus" in out
    rc, out, _ = _run(["events", "--json", "--db", str(demo_db)], capsys)
    evs = json.loads(out)
    assert {"xid.79", "watch.stall", "watch.idle", "thermal.throttle"} <= {e["code"] for e in evs}
    assert all(e["remedy"] for e in evs)


@pytest.mark.parametrize(
    "args,msg",
    [
        (["history", "temprature", "--db", "{db}"], "unknown metric 'temprature'"),
        (["history", "temperature", "--since", "yesterday", "--db", "{db}"], "bad --since"),
        (["events", "--db", "{missing}"], "no watch store at"),
        (["watch", "--scenario", "nope", "--no-http"], "unknown scenario 'nope'"),
        (["watch", "--scenario", "demo", "--listen", "127.0.0.1:99999"], "port must be"),
        (["watch", "--config", "{missing}"], "config file not found"),
    ],
)
def test_bad_input_is_one_line(
    args: list[str], msg: str, demo_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.format(db=demo_db, missing=tmp_path / "nope" / "x.db") for a in args]
    rc, out, err = _run(args, capsys)
    assert rc != 0 and msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "nope").exists()


def test_config_errors_are_specific(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[rules]\ntemp_margn_c = 3\n")
    rc, _, err = _run(["watch", "--scenario", "demo", "--no-http", "--config", str(cfg)], capsys)
    assert rc != 0 and "unknown setting rules.temp_margn_c" in err
    cfg.write_text("[[notify.channel]]\ntype = 'dingtalk'\n")
    rc, _, err = _run(["watch", "--scenario", "demo", "--no-http", "--config", str(cfg)], capsys)
    assert rc != 0 and "needs a url" in err
    cfg.write_text("[store]\nraw_retention = '2 fortnights'\n")
    rc, _, err = _run(["watch", "--scenario", "demo", "--no-http", "--config", str(cfg)], capsys)
    assert rc != 0 and "bad store.raw_retention" in err


def test_list_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["watch", "--list-scenarios"], capsys)
    assert rc == 0 and {"demo", "steady8", "straggler", "power-brake", "straggler-4x", "fallen-off-bus"} <= {
        ln.split()[0] for ln in out.splitlines()
    }


def test_no_gpu_is_one_line_and_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "sub" / "w.db"
    try:
        rc, _, err = _run(["watch", "--no-http", "--db", str(db), "--duration", "1s", "--quiet"], capsys)
    except Exception:  # pragma: no cover
        raise
    if rc == 0:
        pytest.skip("this machine has working NVML GPUs")
    assert "NVML" in err and "--scenario demo" in err and len(err.strip().splitlines()) == 1
    assert not db.exists()


def test_history_json_flag_marks_rollups_and_formats_numbers_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14: `--json` like every other command; 1-minute rollup rows were not told apart from raw
    samples, and numbers came out as "41" next to "40.52"."""
    import time

    from gpuclinic.facts.gpu import GpuFacts
    from gpuclinic.watch.store import WatchStore

    db = tmp_path / "w.db"
    st = WatchStore(db, raw_retention_s=120, rollup_retention_s=86400)
    start = time.time() - 300
    for k in range(300):
        st.add_samples(start + k, [GpuFacts(index=0, temperature_c=40 + (k % 3) * 0.5 if k < 100 else 41.0)])
    st.flush()
    st.maintain(start + 300)
    st.close()
    rc, out, _ = _run(["history", "temperature", "--json", "--db", str(db), "--since", "1h"], capsys)
    assert rc == 0
    pts = json.loads(out)["points"]
    assert {p["kind"] for p in pts} == {"1m", "raw"}
    assert [p["kind"] for p in pts] == sorted(
        (p["kind"] for p in pts), key=lambda k: k != "1m"
    )  # rollups first
    rc2, out2, _ = _run(
        ["history", "temperature", "--format", "json", "--db", str(db), "--since", "1h"], capsys
    )
    assert json.loads(out2)["points"] == pts
    rc, out, _ = _run(["history", "temperature", "--db", str(db), "--since", "1h"], capsys)
    lines = out.splitlines()
    assert "kind" in lines[0]
    body = lines[1:]
    assert any("1m avg" in ln for ln in body) and any(" raw " in ln for ln in body)
    decimals = {len(ln.split()[-1].partition(".")[2]) for ln in body}
    assert decimals == {1}, body[:5]
    rc, _, err = _run(["history", "temperature", "--json", "--format", "csv", "--db", str(db)], capsys)
    assert rc == 64 and "contradict" in err
