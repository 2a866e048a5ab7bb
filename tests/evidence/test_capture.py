"""gpuclinic capture: bundle contents, round trip through doctor --from, redaction, secrets, atomicity."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.collect import CollectOptions
from gpuclinic.errors import InputError
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.sources import capture as cap
from gpuclinic.sources import smi_xml
from gpuclinic.sources.evidence import load_evidence

FX = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"
XML = (FX / "tesla-p100-510.xml").read_text()
SERIAL = "0324217145110"
UUID = "d3da8716-eaab-75db-efc1-60e88e1cd55e"
HOST = socket.gethostname()
HF = "hf_" + "Q" * 34
WEBHOOK = "https://hooks.slack.com/services/T000/B000/" + "x" * 24


def fake_collect(opts: CollectOptions) -> Snapshot:
    snap = Snapshot(origin="live", hostname=HOST, driver_version="510.47.03", nvml_available=True)
    snap.gpus = smi_xml.parse(XML).gpus
    return snap


def fake_runner(argv: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    name = " ".join(argv[1:])
    if argv[1:] == ["-q", "-x"]:
        out = XML
    elif argv[1:] == ["-q"]:
        out = f"==============NVSMI LOG==============\n\nGPU 00000000:00:04.0\n    Serial Number : {SERIAL}\n    GPU UUID : GPU-{UUID}\n"  # noqa: E501
    elif "dmesg" in argv[0]:
        out = (
            f"[  1.0] {HOST} eth0: 10.1.2.3 fe80::1ff:fe23:4567:890a mac 3c:fd:fe:aa:bb:cc\n"
            f"[  2.0] python[12]: HF_TOKEN={HF} WEBHOOK={WEBHOOK}\n"
        )
    else:
        return subprocess.CompletedProcess(argv, 1, b"", f"{name}: Operation not permitted\n".encode())
    return subprocess.CompletedProcess(argv, 0, out.encode(), b"")


@pytest.fixture
def which_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda c: "/usr/bin/" + c)


def _files(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read().decode() for m in tf if m.isfile()}  # type: ignore[union-attr]


def test_bundle_round_trips_through_doctor_from(tmp_path: Path, which_all: None) -> None:
    b = cap.gather(runner=fake_runner, collect=fake_collect)
    out = tmp_path / "c.tar.gz"
    cap.write_bundle(cap.render_files(b, redact=False), str(out))
    files = _files(out)
    assert {
        "snapshot.json",
        "manifest.json",
        "raw/nvidia-smi-q.xml",
        "raw/nvidia-smi-q.txt",
        "raw/dmesg.txt",
    } <= set(files)
    man = json.loads(files["manifest.json"])
    assert man["schema"] == "gpuclinic.capture/1" and man["redacted"] is False
    assert any("journalctl" in f["what"] and "Operation not permitted" in f["why"] for f in man["failed"])
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    snap = load_evidence([str(out)])
    assert snap.origin == "evidence" and snap.gpus[0].name == "Tesla P100-PCIE-16GB"
    assert snap.gpus[0].ecc_aggregate_corrected == 3 and snap.hostname == HOST


def test_secrets_never_enter_bundle_even_without_redact(
    tmp_path: Path, which_all: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("SLACK_WEBHOOK_URL", WEBHOOK)
    monkeypatch.setenv("DB_PASSWORD", "hunter2hunter2")
    monkeypatch.setenv("MY_API_KEY", "k" * 30)

    def leaky_collect(opts: CollectOptions) -> Snapshot:
        s = fake_collect(opts)
        s.notes.append(f"env: DB_PASSWORD=hunter2hunter2 key={'k' * 30}")
        return s

    for redact in (False, True):
        b = cap.gather(runner=fake_runner, collect=leaky_collect)
        out = tmp_path / f"c{redact}.tar.gz"
        cap.write_bundle(cap.render_files(b, redact=redact), str(out))
        blob = "\n".join(_files(out).values())
        for secret in (HF, WEBHOOK, "hunter2hunter2", "k" * 30, "B000/"):
            assert secret not in blob, (redact, secret)
        assert "[secret:HF_TOKEN]" in blob


def test_redaction_is_consistent_across_files(tmp_path: Path, which_all: None) -> None:
    b = cap.gather(runner=fake_runner, collect=fake_collect)
    out = tmp_path / "r.tar.gz"
    cap.write_bundle(cap.render_files(b, redact=True), str(out))
    files = _files(out)
    blob = "\n".join(files.values())
    assert (
        SERIAL not in blob and UUID not in blob and "10.1.2.3" not in blob and "3c:fd:fe:aa:bb:cc" not in blob
    )
    assert "fe80::1ff:fe23:4567:890a" not in blob
    if HOST != "localhost":
        assert json.loads(files["snapshot.json"])["hostname"].startswith("host")
        assert not re.search(rf"(?<![\w.-]){re.escape(HOST)}(?![\w-])", blob)
    snap_uuid = json.loads(files["snapshot.json"])["gpus"][0]["uuid"]
    assert snap_uuid.startswith("GPU-") and snap_uuid in files["raw/nvidia-smi-q.xml"]
    assert snap_uuid in files["raw/nvidia-smi-q.txt"]
    serial_tok = json.loads(files["snapshot.json"])["gpus"][0]["serial"]
    assert (
        serial_tok != SERIAL
        and serial_tok in files["raw/nvidia-smi-q.txt"]
        and serial_tok in files["raw/nvidia-smi-q.xml"]
    )
    # PCI bus ids, versions and times survive redaction: the diagnosis still works
    assert (
        "00000000:00:04.0" in files["raw/nvidia-smi-q.xml"] and "510.47.03" in files["raw/nvidia-smi-q.xml"]
    )
    snap = load_evidence([str(out)])
    assert snap.gpus[0].uuid == snap_uuid and snap.gpus[0].pci_bus_id == "0000:00:04.0"


def test_redactor_same_value_same_token() -> None:
    r = cap.Redactor(["gpu-node-7"])
    a = r.apply("GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e on gpu-node-7 at 10.0.0.5")
    b = r.apply(
        "again GPU-D3DA8716-EAAB-75DB-EFC1-60E88E1CD55E gpu-node-7.example 10.0.0.5 19:32:16 0000:3b:00.0"
    )
    tok = a.split()[0]
    assert tok in b and "gpu-node-7" not in a + b and "10.0.0.5" not in a + b
    assert "19:32:16" in b and "0000:3b:00.0" in b


def test_short_hostname_is_masked_as_a_word_only() -> None:
    r = cap.Redactor(["vm"])
    out = r.apply("vm kernel: kvm-clock ok on vm.")
    assert out.startswith("host0001 kernel: kvm-clock") and out.endswith("on host0001.")


def test_write_is_atomic_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "c.tar.gz"
    cap.write_bundle({"manifest.json": b"{}", "snapshot.json": b"{}"}, str(out))
    previous = out.read_bytes()

    def boom(*a: object, **k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "addfile", boom)
    with pytest.raises(Exception, match="No space left"):
        cap.write_bundle({"snapshot.json": b"{}"}, str(out))
    assert out.read_bytes() == previous
    assert [p.name for p in tmp_path.iterdir()] == ["c.tar.gz"]


def test_write_into_missing_directory_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        cap.write_bundle({"a": b"x"}, str(tmp_path / "nope" / "c.tar.gz"))


def test_an_existing_file_that_is_not_a_capture_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "notes.txt"
    out.write_bytes(b"someone's notes")
    with pytest.raises(InputError, match="not a gpuclinic capture"):
        cap.write_bundle({"manifest.json": b"{}"}, str(out))
    assert out.read_bytes() == b"someone's notes"
    old = tmp_path / "old.tar.gz"
    cap.write_bundle({"manifest.json": b"{}"}, str(old))
    cap.write_bundle({"manifest.json": b"{}", "snapshot.json": b"{}"}, str(old))  # a capture: replaced
    with tarfile.open(old) as tf:
        assert sorted(tf.getnames()) == ["manifest.json", "snapshot.json"]


def test_missing_tools_are_recorded_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda c: None)
    b = cap.gather(runner=fake_runner, collect=fake_collect)
    assert not [r for r in b.raw if r.argv]
    assert any("nvidia-smi not found" in f["why"] for f in b.failed)


def test_cli_capture_on_this_machine_then_doctor_from(tmp_path: Path) -> None:
    out = tmp_path / "here.tar.gz"
    env = dict(os.environ, HF_TOKEN=HF)
    r = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "capture", "--quick", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and out.exists()
    assert HF not in "\n".join(_files(out).values())
    r2 = subprocess.run(
        [sys.executable, "-m", "gpuclinic", "doctor", "--json", "--from", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r2.returncode in (0, 1, 2), r2.stderr
    assert json.loads(r2.stdout)["facts"]["origin"] == "evidence"


def test_secret_env_names() -> None:
    env = {
        "HF_TOKEN": "hf_abcdefghij",
        "AWS_SECRET_ACCESS_KEY": "abcdefghijkl",
        "DB_PASSWORD": "pw123456",
        "TOKENIZERS_PARALLELISM": "falseee",
        "PATH": "/usr/bin:/bin",
        "ALERT_URL": "https://x.example/webhook/abc123",
    }
    got = cap.secret_env_values(env)
    assert set(got.values()) == {"HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "ALERT_URL"}


_SAFE = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=200)


@settings(max_examples=60, deadline=None)
@given(_SAFE, _SAFE, st.uuids())
def test_redaction_property_uuid_consistent_and_gone(a: str, b: str, u: object) -> None:
    r = cap.Redactor([])
    uid = str(u)
    one = r.apply(f"{a} GPU-{uid} {b}")
    two = r.apply(f"{b}\nuuid={uid.upper()}")
    assert uid not in one.lower() and uid not in two.lower()
    tok = r.token("uuid", uid)
    assert f"GPU-{tok}" in one and tok in two


@settings(max_examples=60, deadline=None)
@given(_SAFE)
def test_scrub_secrets_never_leaks_env_value(noise: str) -> None:
    secret = "s3cr3t-" + "Z" * 20
    out = cap.scrub_secrets(f"{noise}{secret}{noise}", {secret: "MY_TOKEN"})
    assert secret not in out


def test_hung_nvidia_smi_is_not_run_again(which_all: None) -> None:
    calls: list[list[str]] = []

    def hanging(argv: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
        calls.append(argv)
        if argv[0].endswith("nvidia-smi"):
            raise subprocess.TimeoutExpired(argv, timeout)
        return fake_runner(argv, timeout)

    b = cap.gather(runner=hanging, collect=fake_collect)
    assert sum(1 for c in calls if c[0].endswith("nvidia-smi")) == 1
    assert sum(1 for f in b.failed if "earlier nvidia-smi call timed out" in f["why"]) == 4
    assert any(r.name == "raw/dmesg.txt" for r in b.raw)
