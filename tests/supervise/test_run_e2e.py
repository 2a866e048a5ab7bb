"""End to end: real `gpuclinic run` processes supervising a real fake trainer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from supervise_helpers import RunResult, assert_all_gone, child_env, gpu_facts_file, run_cmd


def test_sigkill_is_retried_and_resumes_from_newest_complete_checkpoint(
        gpuclinic_run: Callable[..., RunResult], tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    r = gpuclinic_run(["--checkpoint-dir", str(ckpt), "--max-restarts", "2"],
                      ["--fail", "sigkill", "--steps", "3"])
    assert r.rc == 0, r.err
    # first attempt from scratch, second from the newest complete checkpoint written by the first
    assert "attempt=1 resume=None start=0" in r.out
    assert f"attempt=2 resume={ckpt / 'step-0003.ckpt'} start=3" in r.out
    assert "training complete" in r.out
    rows = r.interruptions()
    assert [x["class"] for x in rows] == ["killed"]
    assert rows[0]["action"] == "restart" and rows[0]["signal"] == signal.SIGKILL
    assert rows[0]["checkpoint"] == str(ckpt / "step-0003.ckpt")
    run = r.runs()[0]
    assert run["status"] == "completed" and run["attempts"] == 2 and run["exit_code"] == 0


def test_resume_placeholder_ignores_partial_files(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "step-0001.ckpt").write_text("1")
    time.sleep(0.02)
    # newer, but unfinished writes: must never be resumed from
    (ckpt / ".step-0009.ckpt.tmp-abc").write_text("9")
    (ckpt / "step-0008.ckpt.partial").write_text("8")
    r = gpuclinic_run(
        ["--checkpoint-dir", str(ckpt)], ["--resume", "{resume}", "--fail", "none", "--steps", "1"]
    )
    assert r.rc == 0, r.err
    assert f"attempt=1 resume={ckpt / 'step-0001.ckpt'} start=1" in r.out


def test_exception_is_application_error_and_not_retried(gpuclinic_run: Callable[..., RunResult]) -> None:
    r = gpuclinic_run(["--max-restarts", "3"], ["--fail", "exception"])
    assert r.rc == 1
    rows = r.interruptions()
    assert len(rows) == 1 and rows[0]["class"] == "application_error" and rows[0]["action"] == "give_up"
    assert "ValueError: loss is NaN" in rows[0]["summary"]
    assert "attempt=2" not in r.out
    assert r.runs()[0]["status"] == "gave_up"


def test_cuda_oom_is_classified_and_not_retried(gpuclinic_run: Callable[..., RunResult]) -> None:
    r = gpuclinic_run([], ["--fail", "cuda_oom"])
    assert r.rc == 1
    rows = r.interruptions()
    assert [x["class"] for x in rows] == ["cuda_oom"] and rows[0]["action"] == "give_up"


def test_nccl_timeout_is_network_and_retried(gpuclinic_run: Callable[..., RunResult]) -> None:
    r = gpuclinic_run(["--max-restarts", "1"], ["--fail", "nccl"])
    assert r.rc == 0, r.err
    rows = r.interruptions()
    assert [x["class"] for x in rows] == ["nccl_network"]
    assert rows[0]["signal"] == signal.SIGABRT
    assert "Watchdog caught collective operation timeout" in json.loads(rows[0]["evidence"])[0]
    # output passed through untouched
    assert "ProcessGroupNCCL.cpp:607" in r.err


def test_max_restarts_is_respected(gpuclinic_run: Callable[..., RunResult]) -> None:
    r = gpuclinic_run(["--max-restarts", "1"], ["--fail", "sigkill", "--fail-attempts", "5"])
    assert r.rc == 128 + signal.SIGKILL
    rows = r.interruptions()
    assert [x["action"] for x in rows] == ["restart", "give_up"]


def test_xid_in_followed_kernel_log_excludes_the_bad_gpu(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    klog = tmp_path / "kern.log"
    klog.write_text(
        "[    1.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n"
        "[    2.000000] NVRM: Xid (PCI:0000:86:00): 79, pid=1, name=old, GPU has fallen off the bus.\n"
    )
    facts = gpu_facts_file(tmp_path / "gpus.json")
    r = gpuclinic_run(
        ["--kernel-log", str(klog), "--gpu-facts", str(facts), "--exclude-bad-gpu", "--max-restarts", "2"],
        ["--fail", "xid", "--kernel-log", str(klog), "--bus", "0000:3b:00"],
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert r.rc == 0, r.err
    rows = r.interruptions()
    assert [x["class"] for x in rows] == ["gpu_hardware"]
    gpu = json.loads(rows[0]["gpu"])
    assert gpu["uuid"] == "GPU-0c5a4f3e-1111-2222-3333-444455556666"
    assert rows[0]["action"] == "restart without GPU-0c5a4f3e-1111-2222-3333-444455556666"
    # the old XID (before the run) on the other GPU is not blamed; the retry runs on the healthy GPU only
    assert "cvd=0,1 ngpus=2" in r.out
    assert "attempt=2 resume=None start=0 cvd=GPU-9d7e2b10-aaaa-bbbb-cccc-ddddeeeeffff ngpus=1" in r.out


def test_xid_with_min_gpus_gives_up(gpuclinic_run: Callable[..., RunResult], tmp_path: Path) -> None:
    klog = tmp_path / "kern.log"
    klog.write_text("")
    facts = gpu_facts_file(tmp_path / "gpus.json")
    r = gpuclinic_run(
        ["--kernel-log", str(klog), "--gpu-facts", str(facts), "--exclude-bad-gpu", "--min-gpus", "2"],
        ["--fail", "xid", "--kernel-log", str(klog), "--bus", "0000:86:00"],
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert r.rc == 1
    rows = r.interruptions()
    assert rows[0]["class"] == "gpu_hardware" and rows[0]["action"] == "give_up"
    assert "fewer than --min-gpus 2" in r.err


def test_gpu_lost_seen_by_sampling(gpuclinic_run: Callable[..., RunResult], tmp_path: Path) -> None:
    facts = gpu_facts_file(tmp_path / "gpus.json")
    r = gpuclinic_run(
        ["--gpu-facts", str(facts), "--max-restarts", "0"],
        ["--fail", "gpu_lost", "--gpu-facts", str(facts), "--lose-index", "1"],
    )
    rows = r.interruptions()
    assert [x["class"] for x in rows] == ["gpu_hardware"], r.err
    assert json.loads(rows[0]["gpu"])["uuid"] == "GPU-9d7e2b10-aaaa-bbbb-cccc-ddddeeeeffff"
    assert rows[0]["action"] == "give_up"


def test_oom_killer_in_kernel_log(gpuclinic_run: Callable[..., RunResult], tmp_path: Path) -> None:
    klog = tmp_path / "kern.log"
    klog.write_text("")
    r = gpuclinic_run(
        ["--kernel-log", str(klog), "--max-restarts", "0"],
        ["--fail", "oom_killer", "--kernel-log", str(klog)],
    )
    rows = r.interruptions()
    assert rows[0]["class"] == "killed"
    assert "OOM killer killed pid" in rows[0]["summary"]


def test_hang_by_stale_heartbeat_is_killed_and_retried(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids.json"
    r = gpuclinic_run(
        ["--hang-timeout", "1s", "--max-restarts", "1", "--stop-timeout", "0.5s"],
        ["--fail", "hang", "--pidfile", str(pidfile)],
    )
    assert r.rc == 0, r.err
    rows = r.interruptions()
    assert [x["class"] for x in rows] == ["hang"]
    assert "heartbeat" in rows[0]["summary"]
    assert "training complete" in r.out
    assert_all_gone(pidfile)


def test_hang_by_silence_without_heartbeat(gpuclinic_run: Callable[..., RunResult]) -> None:
    r = gpuclinic_run(
        ["--hang-timeout", "1s", "--max-restarts", "0", "--stop-timeout", "0.5s"],
        ["--fail", "hang", "--no-beat"],
    )
    # the fake trainer turns SIGTERM into a checkpoint request and keeps sleeping: SIGKILL after 0.5s
    assert r.rc == 128 + signal.SIGKILL
    rows = r.interruptions()
    assert rows[0]["class"] == "hang" and "no output" in rows[0]["summary"]


def _start(tmp_path: Path, run_args: list[str], trainer_args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        run_cmd(tmp_path, ["--log", str(tmp_path / "job.log"), *run_args], trainer_args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def _wait_for(path: Path, text: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_sigterm_is_forwarded_and_job_stops_gracefully(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids.json"
    p = _start(
        tmp_path,
        ["--checkpoint-dir", str(tmp_path / "ckpt")],
        ["--fail", "wait_for_stop", "--pidfile", str(pidfile)],
    )
    _wait_for(tmp_path / "job.log", "training until stopped")
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert "got SIGTERM: saved step 4, exiting gracefully" in out
    assert (tmp_path / "ckpt" / "step-0004.ckpt").read_text() == "4"
    r = RunResult(p.returncode, out, err, tmp_path / "ledger.db", tmp_path / "ckpt")
    rows = r.interruptions()
    assert [(x["class"], x["planned"], x["action"]) for x in rows] == [("planned", 1, "stop")]
    assert r.runs()[0]["status"] == "stopped"
    assert_all_gone(pidfile)


def test_stop_timeout_kills_a_job_that_ignores_sigterm(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids.json"
    p = _start(tmp_path, ["--stop-timeout", "0.5s"], ["--fail", "ignore_term", "--pidfile", str(pidfile)])
    _wait_for(tmp_path / "job.log", "ignoring SIGTERM")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 15  # 0.5 s + kill; without the kill it waits forever
    assert p.returncode == 128 + signal.SIGKILL
    assert "did not stop within 0.5s" in err
    assert_all_gone(pidfile)


def test_log_file_gets_raw_output(gpuclinic_run: Callable[..., RunResult], tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    r = gpuclinic_run(["--log", str(log)], ["--fail", "none", "--steps", "2"])
    assert r.rc == 0
    text = log.read_text()
    assert "step 1\nstep 2\n" in text and "training complete" in text
    assert r.interruptions() == []


def test_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    for args, msg in (
        (["--retry-on", "gpu_hardware,bogus"], "unknown class 'bogus'"),
        (["--hang-timeout", "soon"], "not a duration"),
        (["--kernel-log", str(tmp_path / "nope.log")], "no such file"),
    ):
        r = subprocess.run(
            run_cmd(tmp_path, args, []), capture_output=True, text=True, env=child_env(), timeout=30
        )
        assert r.returncode != 0
        assert msg in r.stderr and "Traceback" not in r.stderr
    # a program that is not there: one line before anything starts, shell-style exit codes
    for prog, rc in (("/nonexistent/binary", 127), ("no-such-command-xyz", 127), (str(tmp_path), 126)):
        r = subprocess.run(
            run_cmd(tmp_path, [], [])[:-5] + ["--", prog],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=30,
        )
        assert r.returncode == rc and r.stderr.startswith(f"gpuclinic: error: cannot run {prog}: "), r.stderr
        assert r.stderr.count("\n") == 1
    assert not os.path.exists(tmp_path / "ledger.db")


def test_xid_on_its_gpu_through_the_scenario_backend(gpuclinic_run: Callable[..., RunResult]) -> None:
    # simulated 8-GPU node where GPU 4 falls off the bus (XID 79) while the job runs
    r = gpuclinic_run(
        ["--scenario", "fallen-off-bus", "--exclude-bad-gpu", "--max-restarts", "1"], ["--fail", "exit3"]
    )
    assert r.rc == 0, r.err
    rows = r.interruptions()
    assert [x["class"] for x in rows] == ["gpu_hardware"]
    assert json.loads(rows[0]["gpu"])["index"] == 4
    assert "NVRM: Xid (PCI:0000:9a:00): 79" in rows[0]["evidence"]
    second = next(line for line in r.out.splitlines() if line.startswith("attempt=2"))
    assert "ngpus=7" in second and "GPU-5b0c0004" not in second and "GPU-5b0c0003" in second


def test_preflight_on_the_scenario_backend(tmp_path: Path) -> None:
    base = run_cmd(tmp_path, ["--scenario", "fallen-off-bus"], ["--fail", "none", "--steps", "1"])
    base.remove("--skip-preflight")
    r = subprocess.run(base, capture_output=True, text=True, env=child_env(), timeout=40)
    assert r.returncode == 2 and "pre-flight doctor says drain" in r.stderr and "attempt=1" not in r.stdout
    # GPU 4 is not one of this job's GPUs: warn and run
    r = subprocess.run(
        base, capture_output=True, text=True, env=child_env({"CUDA_VISIBLE_DEVICES": "0,1"}), timeout=40
    )
    assert r.returncode == 0, r.stderr
    assert "pre-flight warning: GPU 4" in r.stderr and "training complete" in r.stdout


def test_interruptions_go_through_watch_notifiers(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    import http.server
    import threading

    got: list[dict[str, object]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = tmp_path / "watch.toml"
        cfg.write_text(
            f"[[notify.channel]]\ntype = 'webhook'\nurl = 'http://127.0.0.1:{srv.server_port}/hook'\n"
        )
        r = gpuclinic_run(["--config", str(cfg), "--max-restarts", "0"], ["--fail", "sigkill"])
    finally:
        srv.shutdown()
    assert r.rc == 128 + signal.SIGKILL
    assert len(got) == 1, r.err
    alert = got[0]
    assert alert["code"] == "run.interruption.killed" and alert["severity"] == "critical"
    assert "give_up" in str(alert["title"]) and alert["source"] == "gpuclinic run"


def test_fatal_fault_seen_live_stops_a_job_stuck_on_the_lost_gpu(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    # the job would wait out an NCCL timeout (10-30 min); gpuclinic stops it after the grace period
    facts = gpu_facts_file(tmp_path / "gpus.json")
    t0 = time.monotonic()
    r = gpuclinic_run(
        [
            "--gpu-facts",
            str(facts),
            "--gpu-fault-grace",
            "0.3s",
            "--stop-timeout",
            "0.5s",
            "--exclude-bad-gpu",
            "--max-restarts",
            "1",
        ],
        ["--fail", "gpu_lost", "--then-hang", "--gpu-facts", str(facts), "--lose-index", "0"],
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
    )
    assert r.rc == 0, r.err
    assert time.monotonic() - t0 < 20
    assert "fatal GPU fault on the job's GPU" in r.err
    rows = r.interruptions()
    assert [(x["class"], x["action"]) for x in rows] == [
        ("gpu_hardware", "restart without GPU-0c5a4f3e-1111-2222-3333-444455556666")
    ]
    assert "attempt=2 resume=None start=0 cvd=GPU-9d7e2b10-aaaa-bbbb-cccc-ddddeeeeffff ngpus=1" in r.out


def test_fatal_xid_followed_live_from_kernel_log(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    klog = tmp_path / "kern.log"
    klog.write_text("")
    r = gpuclinic_run(
        [
            "--kernel-log",
            str(klog),
            "--gpu-fault-grace",
            "0s",
            "--stop-timeout",
            "0.5s",
            "--max-restarts",
            "0",
        ],
        ["--fail", "xid", "--then-hang", "--kernel-log", str(klog)],
    )
    assert "fatal GPU fault on the job's GPU" in r.err, r.err
    rows = r.interruptions()
    assert rows[0]["class"] == "gpu_hardware" and "Xid (PCI:0000:3b:00): 79" in rows[0]["evidence"]


def test_silent_job_with_busy_gpus_is_not_a_hang(
    gpuclinic_run: Callable[..., RunResult], tmp_path: Path
) -> None:
    facts = gpu_facts_file(tmp_path / "gpus.json")  # both GPUs at ~97% utilization
    r = gpuclinic_run(["--gpu-facts", str(facts), "--hang-timeout", "1s"], ["--fail", "quiet", "--no-beat"])
    assert r.rc == 0, r.err
    assert r.interruptions() == [] and "training complete" in r.out


def test_progress_bars_pass_through_byte_for_byte(tmp_path: Path) -> None:
    code = (
        "import sys\nfor i in range(3):\n    sys.stderr.write(f'\\r{i * 50:3d}%|' + '#' * i + ' ' * (2 - i) "
        "+ '|')\n"
        "    sys.stderr.flush()\nsys.stdout.buffer.write(bytes([0xff, 0xfe]) + b'binary\\n')\n"
    )
    log = tmp_path / "out.log"
    cmd = run_cmd(tmp_path, ["--log", str(log)], [])[:-5] + ["--", sys.executable, "-c", code]
    r = subprocess.run(cmd, capture_output=True, env=child_env(), timeout=30)
    assert r.returncode == 0, r.stderr
    bar = b"\r  0%|  |\r 50%|# |\r100%|##|"
    assert bar in r.stderr and r.stdout == b"\xff\xfebinary\n"
    # the log merges two pipes read by two threads: each stream's bytes arrive whole and in order, but a
    # stdout chunk may land between two stderr chunks (it did, about 1 run in 10)
    merged = log.read_bytes()
    assert b"\xff\xfebinary\n" in merged and bar in merged.replace(b"\xff\xfebinary\n", b"", 1)


def test_unwritable_ledger_does_not_stop_the_job(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("x")  # even root cannot create a folder inside a file
    cmd = run_cmd(tmp_path, [], ["--fail", "none", "--steps", "1"])
    cmd[cmd.index("--db") + 1] = str(tmp_path / "not-a-dir" / "ledger.db")
    r = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=30)
    assert r.returncode == 0 and "training complete" in r.stdout
    assert "run ledger unavailable" in r.stderr and "Traceback" not in r.stderr


def test_second_signal_kills_at_once(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids.json"
    p = _start(tmp_path, ["--stop-timeout", "60s"], ["--fail", "ignore_term", "--pidfile", str(pidfile)])
    _wait_for(tmp_path / "job.log", "ignoring SIGTERM")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)  # impatient operator: a second stop means now
    p.communicate(timeout=20)
    assert time.monotonic() - t0 < 10
    assert p.returncode == 128 + signal.SIGKILL
    assert_all_gone(pidfile)


def test_sighup_is_survived_and_sigusr1_reaches_the_job(tmp_path: Path) -> None:
    p = _start(tmp_path, [], ["--fail", "checkpoint_on_usr1"])
    _wait_for(tmp_path / "job.log", "training until asked for a checkpoint")
    p.send_signal(signal.SIGHUP)  # the ssh session went away
    _wait_for(tmp_path / "job.log", "terminal hung up")
    p.send_signal(signal.SIGUSR1)  # "checkpoint now", passed on to the job
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert "checkpoint on request: step 4" in out and "training complete" in out
    assert (tmp_path / "ckpt" / "step-0004.ckpt").read_text() == "4"
    r = RunResult(p.returncode, out, err, tmp_path / "ledger.db", tmp_path / "ckpt")
    assert r.interruptions() == [] and r.runs()[0]["status"] == "completed"


def test_each_evidence_line_is_printed_once(gpuclinic_run: Callable[..., RunResult]) -> None:
    """Issue 14: an output line matched by both a supervise pattern and an explain signature was
    printed (and stored) twice as "evidence: output: ..."."""
    for mode in ("cuda_oom", "nccl"):
        r = gpuclinic_run(["--max-restarts", "0"], ["--fail", mode])
        ev = [ln for ln in r.err.splitlines() if "evidence:" in ln]
        assert ev, r.err
        assert len(ev) == len(set(ev)), ev
        stored = json.loads(r.interruptions()[0]["evidence"])
        assert len(stored) == len(set(stored)), stored
