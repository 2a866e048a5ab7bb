"""``gpuclinic explain``: real error texts, live-fact combination, and any bytes -> no traceback."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.bigtext import as_str
from gpuclinic.explain import decode, explain_text, read_input
from gpuclinic.facts.gpu import GpuFacts, GpuProcess
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import ContainerFacts, Framework, SoftwareFacts
from gpuclinic.knowledge import compat
from gpuclinic.model import Severity

ERRORS = Path(__file__).resolve().parents[1] / "fixtures" / "software" / "errors"


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gpuclinic", "explain", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        env=env,
    )


def live(driver: str, torch: str, cuda: str, gpus: list[GpuFacts]) -> Snapshot:
    tb = compat.parse_torch_version(torch, cuda)
    al = compat.torch_arch_list(tb.version, tb.variant) if tb else None
    fw = Framework(
        name="torch", version=torch, cuda=cuda, arch_list=al.names() if al else [], arch_list_source="table"
    )
    return Snapshot(
        driver_version=driver,
        gpus=gpus,
        software=SoftwareFacts(proc_driver_version=driver, frameworks=[fw]),
        container=ContainerFacts(in_container=True, shm_bytes=64 << 20),
    )


def test_insufficient_driver_with_live_facts_gives_pip_command() -> None:
    text = (ERRORS / "insufficient_driver_docker_781.txt").read_text()
    lv = live(
        "470.82.01", "2.4.1+cu121", "12.1", [GpuFacts(index=0, name="NVIDIA A10G", compute_capability="8.6")]
    )
    r = explain_text(text, "x.log", lv)
    f = r.findings[0]
    assert f.code == "error.cuda.insufficient_driver" and f.severity == Severity.CRITICAL
    assert f.remedy.startswith("driver 470.82.01 supports CUDA <= 11.4; torch 2.4.1+cu121 needs >= 525.60.13")
    assert "`pip install torch==2.4.1 --index-url https://download.pytorch.org/whl/cu118`" in f.remedy
    assert r.exit_code == 1 and r.command == "explain"  # a software cause never drains a node
    assert r.explain_summary() == {
        "cause_found": True,
        "cause": "error.cuda.insufficient_driver",
        "kind": "software",
        "severity": "critical",
        "summary": "cause found: software (critical)",
    }


def test_no_kernel_image_with_live_rtx5090() -> None:
    text = (ERRORS / "no_kernel_image_comfyui_10326.txt").read_text()
    lv = live(
        "570.124.06",
        "2.6.0+cu126",
        "12.6",
        [GpuFacts(index=0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")],
    )
    f = explain_text(text, "x", lv).findings[0]
    assert "torch >= 2.7 with cu128" in f.remedy
    assert any("compute capability 12.0" in e for e in f.evidence)


def test_no_kernel_image_when_torch_covers_gpu_blames_extension() -> None:
    text = (ERRORS / "no_kernel_image_comfyui_10326.txt").read_text()
    lv = live(
        "570.124.06",
        "2.7.1+cu128",
        "12.8",
        [GpuFacts(index=0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")],
    )
    f = explain_text(text, "x", lv).findings[0]
    assert "compiled extension" in f.remedy and "TORCH_CUDA_ARCH_LIST=12.0" in f.remedy


def test_oom_live_other_processes_and_shm() -> None:
    lv = live(
        "550.54.15",
        "2.4.1+cu124",
        "12.4",
        [
            GpuFacts(
                index=0,
                name="NVIDIA L4",
                processes=[GpuProcess(pid=424242, name="python", used_memory_bytes=10 << 30)],
            )
        ],
    )
    f = explain_text((ERRORS / "oom_fragmented_mgfn_35.txt").read_text(), "x", lv).findings[0]
    assert "424242" in f.remedy
    f2 = explain_text((ERRORS / "dataloader_bus_error_megatron_878.txt").read_text(), "x", lv).findings[0]
    assert f2.remedy.startswith("/dev/shm here is only 64 MiB")


def test_offline_uses_signature_fix() -> None:
    r = explain_text((ERRORS / "cudnn_not_init_clrnet_94.txt").read_text(), "x", None)
    assert r.findings[0].code == "error.cudnn.not_initialized" and "data" not in r.findings[0].data.get(
        "fix", ""
    )
    assert r.findings[0].remedy == r.findings[0].data["fix"]


def test_evidence_and_signature_are_not_doubled() -> None:
    r = explain_text((ERRORS / "nvml_mismatch_tinygrad_47.txt").read_text(), "x", None)
    codes = [f.code for f in r.findings]
    assert "error.nvml.version_mismatch" not in codes
    assert codes.count("driver.library_mismatch") + codes.count(
        "error.nvml.version_mismatch"
    ) == 1 or codes == ["error.nvml.version_mismatch"]
    assert r.exit_code == 1  # configuration, not hardware: explain warns, it does not drain


def test_no_match_is_said_clearly_and_exits_0() -> None:
    r = explain_text("all good here\nepoch 1 done\n", "x", None)
    assert [f.code for f in r.findings] == ["explain.no_match"]
    assert r.exit_code == 0


def test_decode_handles_gzip_utf16_and_nuls() -> None:
    gz = gzip.compress(b"CUDA error: out of memory\n")
    assert "out of memory" in decode(gz)
    assert decode("x\u00e9".encode("utf-16")) == "x\u00e9"
    assert decode(b"a\x00b\r\nc\xff") == "ab\nc\ufffd"


def test_read_input_errors(tmp_path: Path) -> None:
    from gpuclinic.errors import InputError

    with pytest.raises(InputError, match="no such file"):
        read_input(str(tmp_path / "missing.log"))
    with pytest.raises(InputError, match="is a directory"):
        read_input(str(tmp_path))
    text, origin, trunc = read_input("-", io.BytesIO(b"hello"))
    assert (text, origin, trunc) == ("hello", "<stdin>", False)


@pytest.mark.parametrize(
    ("name", "code", "rc"),
    [
        ("watchdog_llamafactory_7396.txt", "error.nccl.watchdog_timeout", 1),
        ("ecc_accelerate_1192.txt", "error.cuda.ecc_uncorrectable", 2),
        ("gpu_lost_owod_81.txt", "gpu.missing", 2),  # the parsed evidence names it with the doctor's code
    ],
)
def test_cli_json(name: str, code: str, rc: int) -> None:
    r = cli("--json", "--offline", str(ERRORS / name))
    assert r.returncode == rc, r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "gpuclinic.report/2" and d["command"] == "explain"
    assert d["findings"][0]["code"] == code
    if code.startswith("error."):  # a signature cites where it comes from
        assert d["findings"][0]["data"]["source"].startswith("https://")


def test_cli_stdin_markdown_and_bad_path(tmp_path: Path) -> None:
    r = cli("--markdown", "--offline", "-", stdin=(ERRORS / "cublas_cntk_379.txt").read_bytes())
    assert r.returncode == 1 and b"CUBLAS_STATUS_EXECUTION_FAILED" in r.stdout
    bad = cli(str(tmp_path / "nope.txt"))
    assert bad.returncode == 64 and b"Traceback" not in bad.stderr and bad.stderr.count(b"\n") == 1


def test_cli_random_bytes_no_traceback() -> None:
    rnd = bytes((i * 7919 + 13) % 256 for i in range(20000)) + b"\x1f\x8b\x08garbage"
    # nothing to explain (empty, whitespace, binary, a broken gzip): one error line, exit 64 (input error), no
    # report
    for data in (rnd, b"", b" \n\n", b"\x1f\x8b", b"\xff\xfe\x00"):
        r = cli("--offline", "--json", "-", stdin=data)
        assert r.returncode == 64, (data[:20], r.stdout[:200])
        assert r.stderr.startswith(b"gpuclinic: error: <stdin>: ") and r.stderr.count(b"\n") == 1
        assert r.stdout == b""
    r = cli(
        "--offline",
        "--json",
        "-",
        stdin=b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n",
    )
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    json.loads(r.stdout)


@settings(max_examples=120, deadline=None)
@given(st.binary(max_size=4000))
def test_any_bytes_function_level(data: bytes) -> None:
    r = explain_text(decode(data), "<fuzz>", None)
    assert r.findings and r.exit_code in (0, 1, 2)
    r.to_dict()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(p.name for p in ERRORS.glob("*.txt"))), min_size=1, max_size=3),
    st.binary(max_size=300),
)
def test_real_texts_with_noise_never_break(names: list[str], noise: bytes) -> None:
    data = noise + b"\n" + b"\n".join((ERRORS / n).read_bytes() for n in names)
    lv = live(
        "470.82.01", "2.4.1+cu121", "12.1", [GpuFacts(index=0, name="NVIDIA A10G", compute_capability="8.6")]
    )
    r = explain_text(decode(data), "<fuzz>", lv)
    assert r.findings and r.findings[0].code != "explain.no_match" and r.exit_code in (1, 2)


PASTES = Path(__file__).resolve().parents[1] / "fixtures" / "software" / "pastes"


def test_facts_in_the_paste_beat_this_machine() -> None:
    text = (PASTES / "fooocus_1313_error_and_smi.txt").read_text()
    here = live("580.65.06", "2.9.0+cu130", "13.0", [])
    f = explain_text(text, "x", here).findings[0]
    assert f.code == "error.torch.driver_too_old"
    assert "driver 470.86 supports CUDA <= 11.4" in f.remedy
    assert "`pip install 'torch==2.7.*' --index-url https://download.pytorch.org/whl/cu118`" in f.remedy
    assert any(e.startswith("the pasted report: driver 470.86") for e in f.evidence)


def test_collect_env_paste_with_an_error() -> None:
    text = (
        (PASTES / "collect_env_pytorch_134366.txt").read_text()
        + "\n"
        + (ERRORS / "no_kernel_image_comfyui_10326.txt").read_text()
    )
    r = explain_text(text, "x", None)
    f = next(x for x in r.findings if x.code == "error.cuda.no_kernel_image")
    # A100 (8.0) is covered by torch 2.4.1+cu121: the culprit is an extension
    assert "compiled extension" in f.remedy and "TORCH_CUDA_ARCH_LIST=8.0" in f.remedy
    assert any("NVIDIA A100-SXM4-40GB: compute capability 8.0" in e for e in f.evidence)


def test_long_input_keeps_its_start_and_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the crash that ended a long training log is its last line: a head-only cut said "nothing found"
    import gpuclinic.explain as ex
    import gpuclinic.textinput as ti

    monkeypatch.setattr(ti, "MAX_INPUT", 64 * 1024)
    monkeypatch.setattr(ti, "HEAD_KEEP", 4 * 1024)
    log = (
        "Nvidia driver version: 535.104.05\n"
        + "step 1 loss 0.5 tokens/s 12345\n" * 20000
        + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    ).encode()
    f = tmp_path / "train.log"
    f.write_bytes(log)
    for read, _origin, truncated in (ex.read_input(str(f)), ex.read_input("-", stdin=io.BytesIO(log))):
        text = as_str(read)  # (a big input comes as a BigText: its lines, the string built when asked)
        assert truncated and len(text) <= 64 * 1024 + 100 and len(read) == len(text)
        assert text.startswith("Nvidia driver version: 535.104.05\n")
        assert text.endswith("illegal memory access was encountered\n")
        assert "\nstep 1 loss 0.5 tokens/s 12345\n" in text[-2000:]  # the tail starts at a whole line
        r = ex.explain_text(read, "train.log", None, truncated=truncated)
        assert "error.cuda.illegal_address" in [x.code for x in r.findings]
    short = b"RuntimeError: CUDA error: out of memory\n"
    assert ex.read_input("-", stdin=io.BytesIO(short)) == (short.decode(), "<stdin>", False)


def test_first_step_keeps_a_leading_decimal_number() -> None:
    """The OOM fix starts with '5.00 GiB ...': the first step must not lose '5.' as if it were a list
    marker."""
    text = (
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity; "
        "70.00 GiB already allocated; 1.50 GiB free; 75.00 GiB reserved in total by PyTorch)"
    )
    report = explain_text(text)
    inc = next(i for i in report.incidents if i.code == "error.cuda.oom")
    assert inc.first_step.startswith("5.00 GiB is reserved"), inc.first_step


def test_first_step_does_not_stop_at_an_abbreviation() -> None:
    """'... only if a step takes longer (e.g. a checkpoint save).' must not end as '(e.g.'."""
    from gpuclinic.incidents import first_sentence

    assert (
        first_sentence("Raise it only if a step takes longer (e.g. a save). Then rerun.")
        == "Raise it only if a step takes longer (e.g. a save)."
    )
    assert (
        first_sentence("Check the driver, i.e. the kernel module. Then reboot.")
        == "Check the driver, i.e. the kernel module."
    )
    assert first_sentence("Drain the node. Reboot it.") == "Drain the node."
    assert (
        first_sentence("Read the lines above ('Memory usage ... free'); reinstall. Then rerun.")
        == "Read the lines above ('Memory usage ... free'); reinstall."
    )
