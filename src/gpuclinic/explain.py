"""``gpuclinic explain``: an error message, traceback, log or nvidia-smi output -> cause and exact fix.

Three layers, all optional:

1. error signatures (``knowledge/signatures.py``) recognise CUDA/NCCL/NVML/driver/framework errors;
2. the evidence parsers (kernel log, XID, nvidia-smi) turn the same text into facts that the doctor's
   checks diagnose;
3. when run on the affected machine, live facts (driver version, installed torch build, the GPUs'
   compute capability, /dev/shm, limits) turn a generic fix into the exact command.

The result is a normal :class:`Report` (command ``explain``), so the renderers and JSON schema are the
doctor's.  Exit codes (``diagnose.explain_verdict``): 0 nothing found (or only information), 1 a warning-level
cause or a software cause of any severity (draining a node does not fix a driver too old for the framework),
2 critical hardware evidence about a node (a GPU off the bus, an uncorrectable ECC error), 3 could not run.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from gpuclinic.bigtext import BigText, Text, as_str
from gpuclinic.checks import run_checks
from gpuclinic.diagnose import Report, build_report
from gpuclinic.errors import InputError
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import SoftwareFacts
from gpuclinic.knowledge import compat
from gpuclinic.knowledge.runbooks import finding_remedy
from gpuclinic.knowledge.signatures import CATEGORY_FAMILY, SignatureMatch, covered_by, match
from gpuclinic.model import Family, Finding, GpuRef, Severity, Skipped
from gpuclinic.textinput import HEAD_KEEP, MAX_INPUT, decode, read_input

__all__ = ["HEAD_KEEP", "MAX_INPUT", "decode", "explain_text", "live_facts", "pasted_facts", "read_input"]

_FAMILY = {k: Family(v) for k, v in CATEGORY_FAMILY.items()}
_SEV = {"info": Severity.INFO, "warning": Severity.WARNING, "critical": Severity.CRITICAL}


def live_facts() -> Snapshot | None:
    """Facts about this machine that sharpen a fix (quick: no timed windows, no network)."""
    try:
        from gpuclinic.collect import CollectOptions, collect_live

        return collect_live(CollectOptions(quick=True, sources=("nvml", "software", "container", "host")))
    except Exception:
        return None


def pasted_facts(text: Text, snap: Snapshot | None = None) -> Snapshot | None:
    """Facts the paste itself carries: ``python -m torch.utils.collect_env`` output, an nvidia-smi header.

    Issue reports usually include them; they describe the affected machine better than the machine
    ``explain`` happens to run on.
    """
    import re

    from gpuclinic.facts.gpu import GpuFacts
    from gpuclinic.facts.software import Framework
    from gpuclinic.textscan import contains

    driver = None
    has_env = (
        contains(text, "Nvidia driver version:")
        or contains(text, "PyTorch version:")  # (these literals are among the big-text scan's needles)
        or contains(text, "GPU models and configuration:")
    )
    m: re.Match[str] | None = None
    if has_env:
        m = re.search(r"^Nvidia driver version:\s*(\d+\.\d+(?:\.\d+)?)\s*$", as_str(text), re.M)
    if m is None and contains(text, "Driver Version:"):  # (a substring test first: the regex scan is slower)
        m = re.search(r"Driver Version:\s*(\d+\.\d+(?:\.\d+)?)", as_str(text))
    if m:
        driver = m.group(1)
    elif snap is not None and snap.driver_version:
        driver = snap.driver_version
    torch_v = cuda = None
    m = re.search(r"^PyTorch version:\s*(\d+\.\d+\S*)\s*$", as_str(text), re.M) if has_env else None
    if m is None and contains(text, "torch=="):
        m = re.search(r"^\[(?:pip3?|conda)\]\s+torch==(\d+\.\d+\S*)\s*$", as_str(text), re.M)
    if m:
        torch_v = m.group(1)
        mc = re.search(r"^CUDA used to build PyTorch:\s*(\d+\.\d+)\s*$", as_str(text), re.M)
        cuda = mc.group(1) if mc else None
    gpus: list[GpuFacts] = list(snap.gpus) if snap is not None and snap.gpus else []
    if not gpus and contains(text, "GPU models and configuration:"):
        block = re.search(r"^GPU models and configuration:(.*(?:\n\s*GPU \d+:.*)*)", as_str(text), re.M)
        if block:
            for gm in re.finditer(r"GPU (\d+):\s*([^\n(]+?)\s*(?:\(UUID[^)]*\))?\s*$", block.group(1), re.M):
                name = gm.group(2).strip()
                gpus.append(
                    GpuFacts(
                        index=int(gm.group(1)),
                        name=name,
                        compute_capability=compat.compute_capability_for(name),
                    )
                )
    if not (driver or torch_v or gpus):
        return None
    out = Snapshot(
        origin="evidence",
        driver_version=driver,
        gpus=gpus,
        software=SoftwareFacts(proc_driver_version=driver),
    )
    if torch_v:
        fw = Framework(name="torch", version=torch_v, cuda=cuda)
        tb = compat.parse_torch_version(torch_v, cuda)
        if tb is not None:
            fw.cuda = fw.cuda or compat.cuda_version_of(tb.variant)
            al = compat.torch_arch_list(tb.version, tb.variant) if tb.variant else None
            if al is not None:
                fw.arch_list, fw.arch_list_source = al.names(), "table"
        assert out.software is not None
        out.software.frameworks.append(fw)
    return out


def explain_text(
    text: Text, origin: str = "<stdin>", live: Snapshot | None = None, *, truncated: bool = False
) -> Report:
    """Diagnose a pasted text (a big input may come as a :class:`~gpuclinic.bigtext.BigText`: its lines
    without one whole string); facts in the paste, else ``live`` (this machine's facts), make the fixes
    concrete."""
    if isinstance(text, BigText):  # its greps still run (textinput started them): load the detectors now
        from gpuclinic.checks import load_all

        load_all()
    snap, notes = _evidence(text, origin)
    pasted = pasted_facts(text, snap)
    if pasted is not None:
        live = pasted
        notes.append("fixes use the facts in the pasted text: " + _live_summary(pasted))
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    if (
        snap.gpus
        or snap.kernel_events
        or snap.signals
        or snap.room
        or snap.host  # pasted top/vmstat/mpstat/iostat figures
        or (snap.network and snap.network.extra.get("pasted"))  # pasted ping/mtr/iperf3/transfer meters
        or (snap.software and snap.software.nvidia_smi_errors)
    ):
        try:
            fs, _sk = run_checks(
                snap
            )  # checks that lack facts in a paste are not news: their skips are dropped
            # "no GPU" is noise for a paste without GPU tables (info), but news when nvidia-smi said so
            findings += [f for f in fs if not (f.code == "gpu.none_detected" and f.severity <= Severity.INFO)]
        except Exception as e:  # the evidence checks are a bonus; signatures still answer
            notes.append(f"evidence checks failed: {type(e).__name__}: {e}")
    have = {f.code for f in findings}
    for sm in match(text):
        covered = covered_by().get(sm.id)
        if covered and any(
            c == cov or (cov.endswith(".") and c.startswith(cov)) for cov in covered.split("|") for c in have
        ):
            continue  # the evidence checks already diagnosed it, with the doctor's code
        findings.append(_finding(sm, live))
    if truncated:
        notes.append(
            f"input over {MAX_INPUT // (1 << 20)} MiB: read its first {HEAD_KEEP // (1 << 20)} MiB and its "
            "end"
        )
    snap.notes += notes
    if live is not None and pasted is None:
        snap.notes.append("fixes use this machine's facts: " + _live_summary(live))
    if not findings:
        lines = _line_count(text)
        findings.append(
            Finding(
                code="explain.no_match",
                severity=Severity.INFO,
                family=Family.SOFTWARE,
                title="No known error, GPU event or nvidia-smi problem found in the input",
                evidence=[f"{origin}: {lines} line(s), {len(text)} characters scanned"],
                remedy=finding_remedy("explain.no_match"),
            )
        )
    return build_report(snap, findings, skipped, command="explain")


# signature id -> doctor finding code (or prefix ending in ".") that says the same from parsed evidence


def _line_count(text: Text) -> int:
    """``text.count("\\n")``, and one more for a last line without a newline."""
    if isinstance(text, BigText):
        return text.data.count(b"\n") + (1 if text.data and not text.endswith_newline() else 0)
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _evidence(text: Text, origin: str) -> tuple[Snapshot, list[str]]:
    notes: list[str] = []
    try:
        from gpuclinic.sources.evidence_text import snapshot_from_text

        snap = snapshot_from_text(text, origin)
    except InputError as e:
        snap = Snapshot(origin="evidence", software=SoftwareFacts())
        snap.inputs.append(origin)
        if "could not be read" in str(e):  # a format was recognised but its text is broken: say so
            from gpuclinic.sources.bmc.salvage import note_partial

            note_partial(snap, origin, str(e).removeprefix(f"{origin}: ").split("; expected")[0])
    except Exception as e:  # a parser bug must not hide the signature answer
        snap = Snapshot(origin="evidence", software=SoftwareFacts())
        snap.inputs.append(origin)
        notes.append(f"evidence parser failed: {type(e).__name__}: {e}")
    return snap, notes


def _live_summary(live: Snapshot) -> str:
    parts = []
    if live.driver_version:
        parts.append(f"driver {live.driver_version}")
    sw = live.software
    t = sw.framework("torch") if sw else None
    if t:
        parts.append(f"torch {t.version}" + (f" (CUDA {t.cuda})" if t.cuda else " (CPU build)"))
    for g in live.gpus[:2]:
        parts.append(
            f"GPU {g.index} {g.name or '?'} cc "
            f"{g.compute_capability or compat.compute_capability_for(g.name) or '?'}"
        )
    return ", ".join(parts) or "none available"


def _finding(sm: SignatureMatch, live: Snapshot | None) -> Finding:
    ev = [f"line {sm.line_no}: {sm.matched_line}"]
    if sm.count > 1:
        ev.append(f"seen on {sm.count} lines")
    if sm.code:
        ev.append(f"error: {sm.code}")
    ev += sm.hints
    remedy = sm.fix
    data = sm.to_dict()
    gpu = None
    if "gpu_index" in sm.data:
        gpu = GpuRef(index=int(sm.data["gpu_index"]))
    elif "pci_bus_id" in sm.data:
        gpu = GpuRef(pci_bus_id=str(sm.data["pci_bus_id"]))
    if sm.hints and sm.category == "cuda_oom":
        remedy = sm.hints[0][0].upper() + sm.hints[0][1:] + ". " + sm.fix
    if live is not None:
        concrete = _concrete_fix(sm, live)
        if concrete:
            fix, lev = concrete
            remedy = fix + " (general advice: " + sm.fix + ")"
            ev += lev
            data["live"] = True
    return Finding(
        code=f"error.{sm.id}",
        severity=_SEV.get(sm.severity, Severity.WARNING),
        family=_FAMILY.get(sm.category, Family.SOFTWARE),
        title=sm.title,
        evidence=ev,
        remedy=remedy,
        gpu=gpu,
        data=data,
        source=sm.source,
    )


# ------------------------------------------------------------------ live combination


def _concrete_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    fn = _COMBINE.get(sm.id) or _COMBINE.get(sm.category)
    if fn is None:
        return None
    try:
        return fn(sm, live)
    except Exception:  # a missing fact must never break explain
        return None


def _torch(live: Snapshot) -> tuple[str | None, compat.TorchBuild | None, str | None]:
    sw = live.software
    t = sw.framework("torch") if sw else None
    if t is None:
        return None, None, None
    return t.version, compat.parse_torch_version(t.version, t.cuda), t.cuda


def _who(live: Snapshot) -> str:
    return "this machine" if live.origin == "live" else "the pasted report"


def _driver_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    driver = live.driver_version or (live.software.proc_driver_version if live.software else None)
    version, tb, cuda = _torch(live)
    if not driver:
        if not (version and tb and cuda):
            return None
        fam = compat.family_min_driver((compat.parse_version(cuda) or (0,))[0])
        old = compat.suggest_torch_variant(tb.version, "450.80.02")
        alt = (
            f"; on an older driver use the {old.variant} build (`{old.command}`)"
            if old and old.variant != tb.variant
            else ""
        )
        return (
            f"torch {version} (CUDA {cuda}) needs driver >= {fam} (>= {compat.min_driver(cuda)} for full "
            f"compatibility): compare with `nvidia-smi`{alt}",
            [f"{_who(live)}: torch {version} built for CUDA {cuda}"],
        )
    ev = [f"{_who(live)}: driver {driver} (supports CUDA <= {compat.driver_max_cuda(driver) or '?'})"]
    if not (version and tb and cuda):
        cc0 = next((g.compute_capability or compat.compute_capability_for(g.name) for g in live.gpus), None)
        newest = compat.newest_torch_for_driver(driver, cc0)
        pick = (
            (
                f"; the newest PyTorch it can run is {newest[0]} with {newest[1]}: `pip install "
                f"'torch=={newest[0]}.*' "
                f"--index-url https://download.pytorch.org/whl/{newest[1]}`"
            )
            if newest
            else ""
        )
        return (
            f"driver {driver} supports CUDA <= {compat.driver_max_cuda(driver) or '?'}{pick}; or upgrade the "
            "driver",
            ev,
        )
    ev.append(f"{_who(live)}: torch {version} built for CUDA {cuda}")
    dc = compat.driver_supports_cuda(driver, cuda)
    cc = next((g.compute_capability or compat.compute_capability_for(g.name) for g in live.gpus), None)
    need = dc.min_driver_family or dc.min_driver_full
    full = (
        f" (>= {dc.min_driver_full} for full compatibility)"
        if dc.min_driver_full and dc.min_driver_full != need
        else ""
    )
    sug = compat.suggest_torch_variant(tb.version, driver, cc)
    alt = (
        f"install the {sug.variant} build (`{sug.command}`) or " if sug and sug.variant != tb.variant else ""
    )
    if dc.ok and sm.id != "cuda.unsupported_ptx":
        return (
            f"driver {driver} can run torch {version} (CUDA {cuda}, {dc.mode.replace('_', '-')} "
            "compatibility): the "
            "failing binary is not this torch - check other CUDA libraries in the environment "
            "(`pip list | grep -i -e nvidia -e cuda`, LD_LIBRARY_PATH) and containers' CUDA_VERSION",
            ev,
        )
    return (
        f"driver {driver} supports CUDA <= {compat.driver_max_cuda(driver) or '?'}; torch {version} needs >= "
        f"{need}{full}"
        f" — {alt}upgrade the driver to >= {dc.min_driver_full or need}",
        ev,
    )


def _arch_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    version, tb, cuda = _torch(live)
    sw = live.software
    t = sw.framework("torch") if sw else None
    if not (version and tb and t and live.gpus):
        return None
    driver = live.driver_version
    al = compat.ArchList.parse(t.arch_list) if t.arch_list else compat.torch_arch_list(tb.version, tb.variant)
    out_ev: list[str] = [
        f"{_who(live)}: torch {version}, arch list {', '.join(al.names()) if al else 'unknown'}"
    ]
    for g in live.gpus:
        cc = g.compute_capability or compat.compute_capability_for(g.name)
        if not cc or al is None:
            continue
        v = compat.can_run(al, cc)
        out_ev.append(f"GPU {g.index} {g.name}: compute capability {cc} -> {v.detail}")
        if not v.ok:
            from gpuclinic.checks.software_cuda import _arch_fix as arch_fix

            return arch_fix(t, cc, driver), out_ev
    ccs = (g.compute_capability or compat.compute_capability_for(g.name) for g in live.gpus)
    return (
        "torch itself supports these GPUs: the kernel without an image comes from a compiled extension "
        "(flash-attn, xformers, bitsandbytes, a custom op) - rebuild it with "
        f"TORCH_CUDA_ARCH_LIST={next(ccs, '?')}"
        " or install a wheel built for this GPU",
        out_ev,
    )


def _oom_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    idx = sm.data.get("gpu_index")
    g = next((x for x in live.gpus if x.index == idx), None) if idx is not None else None
    if g is None or not g.processes:
        return None

    mine = os.getpid()
    others = [p for p in g.processes if p.pid != mine]
    if not others:
        return None
    tot = sum(p.used_memory_bytes or 0 for p in others)
    lst = ", ".join(
        f"{p.pid} ({p.name or '?'}, {(p.used_memory_bytes or 0) / (1 << 30):.1f} GiB)" for p in others[:5]
    )
    return (
        f"GPU {idx} is in use by {len(others)} process(es) holding {tot / (1 << 30):.1f} GiB now: {lst} - "
        "stop them "
        f"or run on another GPU (CUDA_VISIBLE_DEVICES)",
        [f"{_who(live)}: GPU {idx} processes: {lst}"],
    )


def _shm_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    c = live.container
    if c is None or c.shm_bytes is None:
        return None
    size = f"{c.shm_bytes / (1 << 20):.0f} MiB"
    if c.shm_bytes >= 1 << 30 and sm.category == "container":
        return None
    where = (
        "Kubernetes: mount an emptyDir with medium: Memory at /dev/shm"
        if c.kubernetes
        else "restart the container with `--ipc=host` or `--shm-size=16g`"
        if c.in_container
        else "`sudo mount -o remount,size=16G /dev/shm`"
    )
    return f"/dev/shm here is only {size}: {where}", [f"{_who(live)}: /dev/shm {size}"]


def _nvml_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    sw = live.software
    if sw is None or not sw.proc_driver_version:
        return None
    libs = ", ".join(sw.user_lib_versions) or "?"
    if sw.user_lib_versions and sw.proc_driver_version not in sw.user_lib_versions:
        return (
            f"kernel module {sw.proc_driver_version} is loaded but the libraries are {libs}: reboot (or "
            "reload the "
            "nvidia modules) to load the new module",
            [f"{_who(live)}: module {sw.proc_driver_version}, libnvidia-ml {libs}"],
        )
    return None


def _nofile_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    h = live.host
    if h is None or h.nofile_soft is None:
        return None
    return (
        f"the open-files limit here is {h.nofile_soft} (hard {h.nofile_hard or 'unlimited'}): `ulimit -n "
        f"{h.nofile_hard or 1048576}` before starting, or set_sharing_strategy('file_system')",
        [f"{_who(live)}: ulimit -n = {h.nofile_soft}"],
    )


def _fm_fix(sm: SignatureMatch, live: Snapshot) -> tuple[str, list[str]] | None:
    sw = live.software
    if sw is None or sw.fabricmanager_running is None:
        return None
    if sw.fabricmanager_running:
        return (
            "nv-fabricmanager is running: check its version equals the driver's and "
            "/var/log/fabricmanager.log",
            [f"{_who(live)}: nv-fabricmanager running"],
        )
    return (
        "nv-fabricmanager is not running here: `sudo systemctl enable --now nvidia-fabricmanager` (install "
        "the package "
        f"of driver version {live.driver_version or '?'} if missing)",
        [f"{_who(live)}: nv-fabricmanager not running"],
    )


_COMBINE: dict[str, Callable[[SignatureMatch, Snapshot], tuple[str, list[str]] | None]] = {
    "cuda.insufficient_driver": _driver_fix,
    "torch.driver_too_old": _driver_fix,
    "cuda.unsupported_ptx": _driver_fix,
    "container_cli.require_cuda": _driver_fix,
    "cuda.no_kernel_image": _arch_fix,
    "torch.sm_not_compatible": _arch_fix,
    "cuda.invalid_kernel_image": _arch_fix,
    "cuda.oom": _oom_fix,
    "torch.dataloader_bus_error": _shm_fix,
    "nccl.shm": _shm_fix,
    "nccl.system_error": _shm_fix,
    "nvml.version_mismatch": _nvml_fix,
    "nvrm.api_mismatch": _nvml_fix,
    "python.too_many_open_files": _nofile_fix,
    "cuda.system_not_ready": _fm_fix,
}
