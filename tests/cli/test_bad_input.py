"""Bad input, as a user types it, for every command: one ``gpuclinic: error:`` line, no traceback,
a non-zero exit, and the working directory exactly as it was (no partial file, nothing clobbered).

Every case runs ``python -m gpuclinic`` in its own copy of a small directory; the cases run a few
at a time in one fixture (the CLI's startup dominates), and each case is its own test id.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuclinic.errors import EXIT_USAGE as USAGE
from gpuclinic.transfer.wansim import Knobs, WanSim, make_data

ZERO = "0" * 64


@dataclass
class Case:
    id: str
    args: list[str]
    rc: int
    msg: str  # substring of the error line
    stdin: bytes | None = None
    one_line: bool = True  # stderr is the error line alone (git's own "fatal:" lines are extra)
    env: dict[str, str] = field(default_factory=dict)


# Exit codes (README "Exit codes"): usage and input errors exit USAGE (64) in every command, a code
# no verdict uses (0 healthy, 1 warning, 2 drain); 3 = ran but could not finish or judge (a 404, a
# refused connection, a sha256 mismatch); run keeps the shell's 126/127 for a command it cannot start.
# {U}: a loopback HTTP server with file.txt and a Hub repo org/m; {D}: the case's directory
CASES = [
    # usage errors from click itself (issue 14: they exited 2, doctor's "drain")
    Case("doctor-unknown-flag", ["doctor", "--bogus"], USAGE, "No such option '--bogus'"),
    Case("get-unknown-flag", ["get", "url", "--bogus", "{U}/file.txt"], USAGE, "No such option"),
    Case("watch-duration-not-a-number", ["watch", "--duration", "soon", "--no-store"], USAGE, "duration"),
    Case("explain-directory-slash", ["explain", "--offline", "adir/"], USAGE, "is a directory"),
    # doctor
    Case("doctor-from-missing", ["doctor", "--from", "nope.txt"], USAGE, "nope.txt: no such file"),
    Case("doctor-from-dir-empty", ["doctor", "--from", "adir"], USAGE, "adir: no files found"),
    Case("doctor-from-binary", ["doctor", "--from", "binary.bin"], USAGE, "binary data"),
    Case("doctor-from-empty", ["doctor", "--from", "empty.txt"], USAGE, "file is empty"),
    Case("doctor-from-unrecognised", ["doctor", "--from", "precious.txt"], USAGE, "not recognised"),
    Case("doctor-scenario-unknown", ["doctor", "--scenario", "nosuch"], USAGE, "unknown scenario 'nosuch'"),
    Case(
        "doctor-scenario-and-from",
        ["doctor", "--scenario", "fallen-off-bus", "--from", "precious.txt"],
        USAGE,
        "either --scenario or --from",
    ),
    Case("doctor-expect-gpus-negative", ["doctor", "--expect-gpus", "-1"], USAGE, "--expect-gpus"),
    Case("doctor-expect-gpus-text", ["doctor", "--expect-gpus", "eight"], USAGE, "--expect-gpus"),
    Case(
        "doctor-json-and-markdown",
        ["doctor", "--json", "--markdown", "--from", "precious.txt"],
        USAGE,
        "one of --json and --markdown",
    ),
    Case(
        "doctor-kernel-log-missing",
        ["doctor", "--quick", "--kernel-log", "nope.log"],
        USAGE,
        "--kernel-log nope.log: no such file",
    ),
    Case("doctor-kernel-log-dir", ["doctor", "--quick", "--kernel-log", "adir"], USAGE, "is a directory"),
    Case(
        "doctor-kernel-log-with-scenario",
        ["doctor", "--scenario", "fallen-off-bus", "--kernel-log", "precious.txt"],
        USAGE,
        "cannot be combined with --scenario",
    ),
    Case("doctor-stray-argument", ["doctor", "precious.txt"], USAGE, "did you mean --from"),
    # capture: refused before minutes of collecting
    Case("capture-missing-dir", ["capture", "--quick", "-o", "nodir/c.tar.gz"], USAGE, "does not exist"),
    Case(
        "capture-missing-dir-absolute",
        ["capture", "--quick", "-o", "/nonexistent/dir/x"],
        USAGE,
        "does not exist",
    ),
    Case("capture-into-a-directory", ["capture", "--quick", "-o", "adir"], USAGE, "is a directory"),
    Case(
        "capture-over-a-file", ["capture", "--quick", "-o", "precious.txt"], USAGE, "not a gpuclinic capture"
    ),
    Case("capture-unwritable", ["capture", "--quick", "-o", "/sys/gpuclinic-test.tar.gz"], USAGE, "/sys"),
    Case(
        "capture-under-a-file", ["capture", "--quick", "-o", "precious.txt/c.tar.gz"], USAGE, "does not exist"
    ),
    # explain
    Case("explain-missing", ["explain", "--offline", "nope.txt"], USAGE, "nope.txt: no such file"),
    Case("explain-directory", ["explain", "--offline", "adir"], USAGE, "is a directory"),
    Case("explain-binary", ["explain", "--offline", "binary.bin"], USAGE, "binary data"),
    Case("explain-empty-file", ["explain", "--offline", "empty.txt"], USAGE, "empty input"),
    Case("explain-empty-stdin", ["explain", "--offline", "-"], USAGE, "<stdin>: empty input", stdin=b""),
    Case("explain-blank-stdin", ["explain", "--offline"], USAGE, "<stdin>: empty input", stdin=b"\n \n\t\n"),
    Case(
        "explain-binary-stdin",
        ["explain", "--offline", "-"],
        USAGE,
        "binary data",
        stdin=make_data(50_000, 3),
    ),
    # net: refused before probing anything
    Case("net-endpoint-not-url", ["net", "--quick", "--endpoint", "notaurl"], USAGE, "not an http(s) URL"),
    Case(
        "net-endpoint-ftp", ["net", "--quick", "--endpoint", "ftp://127.0.0.1/"], USAGE, "not an http(s) URL"
    ),
    Case("net-endpoint-empty", ["net", "--quick", "--endpoint", "="], USAGE, "not an http(s) URL"),
    Case("net-timeout-zero", ["net", "--quick", "--timeout", "0"], USAGE, "--timeout"),
    Case("net-timeout-text", ["net", "--quick", "--timeout", "soon"], USAGE, "--timeout"),
    Case("net-connections-zero", ["net", "--connections", "0"], USAGE, "--connections"),
    # get url
    Case("url-not-a-url", ["get", "url", "notaurl"], USAGE, "not an http(s) URL"),
    Case("url-ftp", ["get", "url", "ftp://127.0.0.1/x"], USAGE, "not an http(s) URL"),
    Case("url-file-scheme", ["get", "url", "file:///etc/passwd"], USAGE, "not an http(s) URL"),
    Case("url-no-host", ["get", "url", "http://"], USAGE, "not an http(s) URL"),
    Case("url-broken-ipv6", ["get", "url", "http://[::1/x"], USAGE, "not an http(s) URL"),
    Case("url-port-out-of-range", ["get", "url", "http://127.0.0.1:99999/x"], USAGE, "not an http(s) URL"),
    Case(
        "url-bad-mirror", ["get", "url", "{U}/file.txt", "--mirror", "notaurl"], USAGE, "not an http(s) URL"
    ),
    Case("url-404", ["get", "url", "-q", "{U}/missing.bin", "-o", "out.bin"], 3, "HTTP 404"),
    Case(
        "url-404-keeps-existing",
        ["get", "url", "-q", "--force", "{U}/missing.bin", "-o", "precious.txt"],
        3,
        "HTTP 404",
    ),
    Case(
        "url-existing-file-refused",
        ["get", "url", "-q", "{U}/file.txt", "-o", "precious.txt"],
        USAGE,
        "already exists and would be replaced; pass --force",
    ),
    Case(
        "url-existing-file-wrong-sha-refused",
        ["get", "url", "-q", "{U}/file.txt", "-o", "precious.txt", "--sha256", ZERO],
        USAGE,
        "does not match --sha256",
    ),
    Case("url-refused", ["get", "url", "-q", "http://127.0.0.1:1/x", "-o", "out.bin"], 3, "cannot connect"),
    Case(
        "url-output-missing-dir",
        ["get", "url", "{U}/file.txt", "-o", "nodir/x"],
        USAGE,
        "directory does not exist",
    ),
    Case(
        "url-output-under-a-file",
        ["get", "url", "{U}/file.txt", "-o", "precious.txt/x"],
        USAGE,
        "directory does not exist",
    ),
    Case(
        "url-output-unwritable",
        ["get", "url", "-q", "{U}/file.txt", "-o", "/sys/gpuclinic-test.bin"],
        USAGE,
        "gpuclinic-test.bin",
    ),
    Case("url-sha256-malformed", ["get", "url", "{U}/file.txt", "--sha256", "xyz"], USAGE, "64 hex digits"),
    Case(
        "url-sha256-wrong",
        ["get", "url", "-q", "{U}/file.txt", "--sha256", ZERO, "-o", "out.bin"],
        3,
        "sha256 mismatch",
    ),
    Case(
        "url-sha256-wrong-keeps-existing",
        ["get", "url", "-q", "-f", "{U}/file.txt", "--sha256", ZERO, "-o", "precious.txt"],
        3,
        "sha256 mismatch",
    ),
    Case(
        "url-connections-zero", ["get", "url", "{U}/file.txt", "--connections", "0"], USAGE, "--connections"
    ),
    Case(
        "url-stall-timeout-zero",
        ["get", "url", "{U}/file.txt", "--stall-timeout", "0"],
        USAGE,
        "--stall-timeout",
    ),
    Case(
        "url-stall-timeout-negative",
        ["get", "url", "{U}/file.txt", "--stall-timeout", "-5"],
        USAGE,
        "--stall-timeout",
    ),
    Case(
        "url-stall-timeout-nan",
        ["get", "url", "{U}/file.txt", "--stall-timeout", "nan"],
        USAGE,
        "--stall-timeout",
    ),
    # get hf (HF_ENDPOINT is the loopback simulator)
    Case("hf-empty-id", ["get", "hf", ""], USAGE, "not a Hugging Face repo id"),
    Case("hf-too-many-parts", ["get", "hf", "a/b/c/d"], USAGE, "not a Hugging Face repo id"),
    Case("hf-escape", ["get", "hf", "../etc"], USAGE, "not a Hugging Face repo id"),
    Case("hf-space-in-id", ["get", "hf", "bad repo"], USAGE, "not a Hugging Face repo id"),
    Case("hf-revision-empty", ["get", "hf", "org/m", "--revision", ""], USAGE, "invalid revision ''"),
    Case("hf-revision-escape", ["get", "hf", "org/m", "--revision", "../x"], USAGE, "invalid revision"),
    Case(
        "hf-revision-unknown", ["get", "hf", "org/m", "--revision", "nosuchbranch"], 3, "revision not found"
    ),
    Case("hf-repo-unknown", ["get", "hf", "org/nope"], 3, "repository not found"),
    Case(
        "hf-glob-matches-nothing", ["get", "hf", "org/m", "--include", "*.nomatch"], USAGE, "no file matches"
    ),
    Case("hf-glob-malformed", ["get", "hf", "org/m", "--include", "["], USAGE, "no file matches"),
    Case("hf-cache-dir-is-a-file", ["get", "hf", "org/m", "--cache-dir", "precious.txt"], USAGE, "is a file"),
    Case(
        "hf-cache-dir-unwritable",
        ["get", "hf", "-q", "org/m", "--cache-dir", "/sys/gpuclinic-hf"],
        USAGE,
        "cannot create the Hub cache",
    ),
    Case("hf-connections-zero", ["get", "hf", "org/m", "--connections", "0"], USAGE, "--connections"),
    # get git
    Case("git-empty-url", ["get", "git", "", "x"], USAGE, "not a repository URL"),
    Case("git-destination-is-a-file", ["get", "git", "{U}/r.git", "precious.txt"], USAGE, "already exists"),
    Case(
        "git-local-repo-missing",
        ["get", "git", "-q", "nope-repo", "newdir"],
        3,
        "does not exist",
        one_line=False,
    ),
    Case("git-retries-zero", ["get", "git", "--retries", "0", "{U}/r.git", "newdir"], USAGE, "--retries"),
    # run / report
    Case("run-no-command", ["run"], USAGE, "Missing argument"),
    Case("run-only-dashes", ["run", "--"], USAGE, "Missing argument"),
    Case(
        "run-missing-program",
        ["run", "--", "/nonexistent/prog"],
        127,
        "cannot run /nonexistent/prog: no such file",
    ),
    Case(
        "run-unknown-command",
        ["run", "--skip-preflight", "--", "no-such-command-xyz"],
        127,
        "command not found",
    ),
    Case("run-not-executable", ["run", "--skip-preflight", "--", "./precious.txt"], 126, "not an executable"),
    Case("run-max-restarts-negative", ["run", "--max-restarts", "-1", "--", "true"], USAGE, "--max-restarts"),
    Case("run-bad-duration", ["run", "--backoff", "soon", "--", "true"], USAGE, "not a duration"),
    Case("run-bad-retry-class", ["run", "--retry-on", "bogus", "--", "true"], USAGE, "unknown class 'bogus'"),
    Case(
        "run-log-unwritable",
        ["run", "--skip-preflight", "--log", "/sys/gpuclinic.log", "--", "true"],
        USAGE,
        "--log /sys/gpuclinic.log: cannot write",
    ),
    Case(
        "run-log-under-a-file",
        ["run", "--skip-preflight", "--log", "precious.txt/x.log", "--", "true"],
        USAGE,
        "cannot write",
    ),
    Case("run-log-is-a-directory", ["run", "--log", "adir", "--", "true"], USAGE, "is a directory"),
    Case(
        "run-checkpoint-dir-is-a-file",
        ["run", "--checkpoint-dir", "precious.txt", "--", "true"],
        USAGE,
        "is a file",
    ),
    Case("run-config-missing", ["run", "--config", "nope.toml", "--", "true"], USAGE, "no such file"),
    Case("run-kernel-log-missing", ["run", "--kernel-log", "nope.log", "--", "true"], USAGE, "no such file"),
    Case(
        "run-scenario-unknown",
        ["run", "--skip-preflight", "--scenario", "nosuch", "--", "true"],
        USAGE,
        "unknown scenario",
    ),
    Case(
        "report-since-garbage",
        ["report", "interruptions", "--since", "garbage"],
        USAGE,
        "not a duration or ISO date",
    ),
    Case(
        "report-since-bad-date",
        ["report", "interruptions", "--since", "2026-13-45"],
        USAGE,
        "not a duration or ISO date",
    ),
    Case("report-db-missing", ["report", "interruptions", "--db", "nope.db"], USAGE, "no such file"),
    Case(
        "report-db-not-sqlite",
        ["report", "interruptions", "--db", "binary.bin"],
        USAGE,
        "cannot read the run ledger",
    ),
    Case("report-unknown", ["report", "nosuch"], USAGE, "No such command"),
    Case("unknown-command", ["nosuch"], USAGE, "No such command"),
    # watch, history, events
    Case("history-no-metric", ["history", "--db", "nope.db"], USAGE, "name a METRIC"),
    Case(
        "history-unknown-metric", ["history", "nosuch", "--db", "nope.db"], USAGE, "unknown metric 'nosuch'"
    ),
    Case(
        "history-until-garbage",
        ["history", "temperature", "--until", "garbage", "--db", "nope.db"],
        USAGE,
        "bad --until 'garbage'",
    ),
    Case("history-db-missing", ["history", "temperature", "--db", "nope.db"], USAGE, "no watch store"),
    Case(
        "history-db-not-sqlite", ["history", "temperature", "--db", "binary.bin"], USAGE, "cannot open store"
    ),
    Case("events-db-not-sqlite", ["events", "--db", "binary.bin"], USAGE, "cannot open store"),
    Case(
        "events-since-garbage",
        ["events", "--since", "garbage", "--db", "nope.db"],
        USAGE,
        "bad --since 'garbage'",
    ),
    Case(
        "watch-kernel-log-missing",
        ["watch", "--scenario", "demo", "--duration", "1s", "--no-store", "--kernel-log", "nope.log"],
        USAGE,
        "no such file",
    ),
    Case(
        "watch-webhook-not-url",
        [
            "watch",
            "--scenario",
            "demo",
            "--duration",
            "1s",
            "--no-store",
            "--webhook",
            "hooks.example/secret-token",
        ],
        USAGE,
        "not an http(s) URL",
    ),
    Case(
        "watch-db-is-dir",
        ["watch", "--scenario", "demo", "--duration", "1s", "--db", "adir"],
        USAGE,
        "is a directory",
    ),
    Case(
        "watch-scenario-unknown",
        ["watch", "--scenario", "nosuch", "--duration", "1s", "--no-store"],
        USAGE,
        "nosuch",
    ),
    Case("runbook-unknown-code", ["runbook", "gpu.nosuch"], USAGE, "no runbook for 'gpu.nosuch'"),
    Case("runbook-no-code", ["runbook"], USAGE, "give a code"),
    Case("runbook-bad-gpu", ["runbook", "xid.79", "--gpu", "-1"], USAGE, "--gpu"),
]


def _setup(d: Path) -> None:
    d.mkdir()
    (d / "precious.txt").write_text("someone's notes: must survive every failed command\n")
    (d / "adir").mkdir()
    (d / "binary.bin").write_bytes(make_data(5000, 1))
    (d / "empty.txt").write_bytes(b"")


def _listing(d: Path) -> dict[str, str]:
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), d) + "/"] = "dir"
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = hashlib.sha256(f.read()).hexdigest()
    return out


@dataclass
class Outcome:
    rc: int
    err: str
    before: dict[str, str]
    after: dict[str, str]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    base = tmp_path_factory.mktemp("bad-input")
    with WanSim(Knobs()) as s:
        s.add_file("file.txt", b"hello\n")
        s.add_repo("org/m", {"config.json": b"{}", "w.bin": make_data(100_000, 2)})
        url = s.base_url + "/files"
        env = dict(
            os.environ, GPUCLINIC_NO_NVML="1", NO_COLOR="1", HF_ENDPOINT=s.base_url, GIT_TERMINAL_PROMPT="0"
        )
        for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "CUDA_VISIBLE_DEVICES"):
            env.pop(k, None)

        def one(c: Case) -> tuple[str, Outcome]:
            d = base / c.id
            _setup(d)
            before = _listing(d)
            args = [a.replace("{U}", url) for a in c.args]
            r = subprocess.run(
                [sys.executable, "-m", "gpuclinic", *args],
                cwd=d,
                input=c.stdin or b"",
                capture_output=True,
                timeout=90,
                env={**env, "HF_HUB_CACHE": str(d / "hfcache"), **c.env},
            )
            return c.id, Outcome(r.returncode, r.stderr.decode("utf-8", "replace"), before, _listing(d))

        with ThreadPoolExecutor(max_workers=4) as pool:
            yield dict(pool.map(one, CASES))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clean_error(case: Case, outcomes: dict[str, Outcome]) -> None:
    o = outcomes[case.id]
    lines = o.err.splitlines()
    assert "Traceback" not in o.err and "internal error" not in o.err, o.err
    assert lines and lines[-1].startswith("gpuclinic: error: "), o.err
    assert case.msg in lines[-1], lines[-1]
    if case.one_line:
        assert len(lines) == 1, o.err
    assert o.rc == case.rc, (o.rc, o.err)
    # nothing created, nothing removed, nothing changed: no partial files, no clobbered data
    assert o.after == o.before, sorted(set(o.after.items()) ^ set(o.before.items()))


def test_bad_webhook_is_not_echoed() -> None:
    """A webhook URL is a secret even when malformed: the error must not repeat it."""
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclinic",
            "watch",
            "--scenario",
            "demo",
            "--duration",
            "1s",
            "--no-store",
            "--webhook",
            "hooks.example/T0KEN-s3cret",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == USAGE
    assert "T0KEN-s3cret" not in r.stderr + r.stdout


def test_plain_gpuclinic_prints_the_help_and_exits_0() -> None:
    r = subprocess.run([sys.executable, "-m", "gpuclinic"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: gpuclinic") and "doctor" in r.stdout and "error" not in r.stderr


def test_no_verdict_code_is_a_usage_code() -> None:
    """A health-check script acts on 2 (drain): a typo must never produce a verdict code."""
    assert USAGE not in (0, 1, 2, 3)
    assert all(c.rc not in (1, 2) for c in CASES)
