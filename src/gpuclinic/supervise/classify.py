"""Why did the job stop?  Evidence from one attempt -> one root-cause class.

Order of trust, strongest first: the user asked it to stop (planned) > GPU hardware evidence on the
job's GPUs during the run (kernel XID / fell off the bus, NVML lost GPU or new uncorrectable ECC) >
we killed it for a hang > the host OOM killer took one of its processes > the first specific error
in its output (CUDA OOM, NCCL) > how it died (signal) > a Python traceback > unknown.

"First specific error" matters for multi-rank jobs: one rank runs out of memory, the others then
time out in NCCL; the root cause is the earliest line, not the loudest.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gpuclinic.checks._hw import host_threshold
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.xid import classify as classify_xid
from gpuclinic.model import GpuRef, Severity
from gpuclinic.supervise.kernel import OomKill

COMPLETED = "completed"
CLASSES = (
    "gpu_hardware",
    "nccl_network",
    "download",
    "cuda_oom",
    "application_error",
    "killed",
    "hang",
    "planned",
    "unknown",
)

_HW_KINDS = {"xid", "sxid", "fallen_off_bus", "gsp", "nvlink"}

# torchrun's failure summary: "exitcode  : -9 (pid: 14750)" and "failed (exitcode: -9) local_rank: 4 (pid:
# 899509)"
_TORCHRUN_EXIT = re.compile(
    r"exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)|failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)"
)
_SIGNAL_EXC = re.compile(r"SignalException: Process (\d+) got signal: (\d+)")


@cache
def knowledge() -> dict[str, Any]:
    d = load_data("interruptions.json")
    assert isinstance(d, dict)
    return d


def default_retry() -> tuple[str, ...]:
    """The classes ``gpuclinic run`` restarts unless told otherwise: those whose data says ``retry``."""
    return tuple(c for c in CLASSES if class_info(c).get("retry"))


def class_info(cls: str) -> dict[str, Any]:
    info = knowledge()["classes"].get(cls)
    return dict(info) if info else {"title": cls, "category": "Unknown", "planned": False, "retry": False}


def is_planned(cls: str) -> bool:
    return bool(class_info(cls).get("planned"))


@cache
def _patterns() -> list[tuple[re.Pattern[str], dict[str, Any]]]:
    return [(re.compile(p["regex"], re.MULTILINE), p) for p in knowledge()["output_patterns"]]


@dataclass
class OutputMatch:
    cls: str
    title: str
    line: str
    offset: int  # position in the tail, for "earliest first"
    generic: bool = False
    source: str = ""
    fix: str = ""


def match_output(text: str) -> list[OutputMatch]:
    """Error signatures in the job's output: the explain signatures (when installed) plus our own."""
    out: list[OutputMatch] = []
    for rx, p in _patterns():
        m = rx.search(text)
        if m:
            out.append(
                OutputMatch(
                    p["class"],
                    p["title"],
                    _line_at(text, m.start()),
                    m.start(),
                    bool(p.get("generic")),
                    p.get("source", ""),
                )
            )
    out.extend(_signature_matches(text))
    out.sort(key=lambda m: m.offset)
    return out


def _signature_matches(text: str) -> list[OutputMatch]:
    try:
        from gpuclinic.knowledge.signatures import match
    except ImportError:
        return []
    cats: dict[str, str] = knowledge()["signature_categories"]
    by_id: dict[str, str] = knowledge().get("signature_classes", {})
    found: list[OutputMatch] = []
    try:
        results = match(text)
    except Exception:  # a broken signature must not stop classification
        return []
    for r in results:
        cls = by_id.get(str(getattr(r, "id", ""))) or cats.get(getattr(r, "category", ""))
        if cls is None:
            continue
        line = str(getattr(r, "matched_line", "") or "")
        pos = text.find(line) if line else -1
        found.append(
            OutputMatch(
                cls,
                str(getattr(r, "title", "") or getattr(r, "id", "")),
                line.strip(),
                pos if pos >= 0 else len(text),
                generic=cls == "application_error",
                source=str(getattr(r, "source", "") or ""),
                fix=str(getattr(r, "fix", "") or ""),
            )
        )
    return found


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start : end if end >= 0 else len(text)].strip()[:400]


# "ValueError: ..." / "torch.OutOfMemoryError: ..." / "KeyboardInterrupt": what closes a traceback
_EXC_STRICT = re.compile(
    r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Iteration|Warning|Failure|Fault)(?::\s.*|:?$)"
)
_EXC_LOOSE = re.compile(r"^[A-Za-z_][\w.]*(?::\s.*|:?$)")


def _last_exception_line(text: str) -> str | None:
    """The "ValueError: ..." line closing the last traceback in ``text``.

    stdout and stderr reach the tail through separate pipes, so lines the job printed to stdout
    (``step 3``, ``loss: nan``) can land inside a traceback: prefer a line shaped like an exception.
    """
    idx = text.rfind("Traceback (most recent call last):")
    if idx < 0:
        return None
    cands = [
        ln.strip() for ln in text[idx:].splitlines()[1:] if ln and not ln.startswith((" ", "\t", "Traceback"))
    ]
    for pat in (_EXC_STRICT, _EXC_LOOSE):
        for ln in cands:
            if pat.match(ln):
                return ln[:400]
    return cands[0][:400] if cands else None


def is_fatal_event(k: KernelEvent) -> bool:
    """A kernel event after which a job on that GPU cannot continue (it will crash or hang in NCCL)."""
    return k.kind == "fallen_off_bus" or (
        k.kind == "xid" and k.xid is not None and classify_xid(k.xid).fatal_to_job
    )


@dataclass
class GpuFault:
    """A hardware fault seen by sampling a GPU (NVML or simulation) during the run: a finding of the
    doctor's detector (its code, severity and title) that appeared or whose counter rose."""

    gpu: GpuRef
    what: str
    fatal: bool = False  # the GPU is gone: the job cannot continue on it (knowledge.codes.fatal_to_job)
    code: str = ""
    severity: Severity | None = None
    remedy: str = ""  # the code's runbook, first step


@dataclass
class AttemptEvidence:
    """Everything known about how one attempt ended."""

    returncode: int | None
    output_tail: str = ""
    user_stop_signal: int | None = None  # we forwarded this because the user/scheduler asked us to stop
    hang_reason: str | None = None  # we killed it because it made no progress
    kernel_events: list[KernelEvent] = field(default_factory=list)
    oom_kills: list[OomKill] = field(default_factory=list)
    cgroup_oom_kills: int = 0
    gpu_faults: list[GpuFault] = field(default_factory=list)
    job_pids: set[int] = field(default_factory=set)
    job_gpus: list[GpuRef] = field(default_factory=list)  # empty: unknown, every GPU on the host counts
    mem_peak_pct: float | None = None
    kernel_note: str | None = None  # why the kernel log could not be read


@dataclass
class Classification:
    cls: str
    summary: str
    evidence: list[str] = field(default_factory=list)
    gpu: GpuRef | None = None
    signal: int | None = None
    remedy: str = ""  # what to do: the matched signature's fix, else the class's advice

    def __post_init__(self) -> None:
        # one output line often matches both our pattern and an explain signature: show it once
        self.evidence = list(dict.fromkeys(self.evidence))

    @property
    def planned(self) -> bool:
        return is_planned(self.cls)

    @property
    def interrupted(self) -> bool:
        return self.cls != COMPLETED


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def event_on_job(ev: KernelEvent, job_gpus: list[GpuRef], job_pids: set[int]) -> tuple[bool, GpuRef | None]:
    """Does this kernel event concern the job's GPUs (by bus id, or by the job's pid)?  -> (concerns, gpu)."""
    bus = normalize_bus_id(ev.pci_bus_id) if ev.pci_bus_id else None
    if ev.pid is not None and ev.pid in job_pids:
        return True, _ref_for_bus(bus, job_gpus)
    if not job_gpus or not any(g.pci_bus_id for g in job_gpus):
        return True, GpuRef(pci_bus_id=bus) if bus else None  # GPUs unknown: any GPU on this host counts
    if bus is None:
        return True, None
    ref = _ref_for_bus(bus, job_gpus)
    return (ref is not None), ref


def _ref_for_bus(bus: str | None, job_gpus: list[GpuRef]) -> GpuRef | None:
    if bus is None:
        return None
    for g in job_gpus:
        if g.pci_bus_id and normalize_bus_id(g.pci_bus_id) == bus:
            return g
    return GpuRef(pci_bus_id=bus) if not job_gpus else None


def _signal_of(ev: AttemptEvidence) -> tuple[int | None, str | None]:
    """The signal that ended the job (directly, via a shell's 128+n, or a torchrun worker)."""
    rc = ev.returncode
    if rc is not None and rc < 0:
        return -rc, f"exited by {signal_name(-rc)}"
    tail = ev.output_tail
    root = tail.rfind("Root Cause (first observed failure)")
    # torchrun's summary names the root cause after "Root Cause"; else take the first failure logged
    m = (_TORCHRUN_EXIT.search(tail, root) if root >= 0 else None) or _TORCHRUN_EXIT.search(tail)
    if m is not None:
        code = int(m.group(1) or m.group(3))
        pid = int(m.group(2) or m.group(4))
        ev.job_pids.add(pid)
        if code < 0:
            return -code, f"worker pid {pid} exited by {signal_name(-code)} (torchrun summary)"
    sm = _SIGNAL_EXC.search(ev.output_tail)
    if sm:
        return int(
            sm.group(2)
        ), f"launcher got {signal_name(int(sm.group(2)))} (torch elastic SignalException)"
    if (
        rc is not None
        and 128 < rc < 160
        and (rc - 128)
        in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)
    ):
        return rc - 128, f"exit code {rc} = 128+{signal_name(rc - 128)} (a wrapper reported a killed child)"
    return None, None


def classify(ev: AttemptEvidence) -> Classification:
    """The root cause of one attempt's end (``completed`` when it simply finished), with what to do."""
    c = _classify(ev)
    if c.interrupted and not c.remedy:
        fixes = [m.fix for m in match_output(ev.output_tail) if m.fix and m.cls == c.cls]
        c.remedy = fixes[0] if fixes else str(class_info(c.cls).get("remedy", ""))
    return c


def _gpu_hardware(ev: AttemptEvidence, notes: list[str]) -> Classification | None:
    """A GPU hardware fault on the job's GPUs during the run (kernel log, NVML, or the job's output).

    Xids that NVIDIA attributes to the application are not hardware: they go to ``notes``.
    """
    hw: list[tuple[str, GpuRef | None]] = []
    for k in ev.kernel_events:
        if k.kind not in _HW_KINDS:
            continue
        if k.kind == "xid" and k.xid is not None and classify_xid(k.xid).application:
            notes.append(f"application-attributed Xid {k.xid}: {k.line.strip()[:300]}")
            continue
        concerns, gpu = event_on_job(k, ev.job_gpus, ev.job_pids)
        if concerns:
            hw.append((k.line.strip()[:400], gpu))
    for f in ev.gpu_faults:
        hw.append((f"{f.gpu.label()}: {f.what}", f.gpu))
    text_hw = [m for m in match_output(ev.output_tail) if m.cls == "gpu_hardware"]
    if hw or text_hw:
        gpu = next((g for _, g in hw if g is not None), None)
        lines = [t for t, _ in hw] + [f"output: {m.line}" for m in text_hw]
        what = "fault on " + gpu.label() if gpu else "fault"
        return Classification(
            "gpu_hardware",
            f"GPU hardware {what} during the run",
            lines[:20] + notes,
            gpu=gpu,
            signal=_signal_of(ev)[0],
        )
    return None


def _host_oom(ev: AttemptEvidence, notes: list[str], sig: int | None) -> Classification | None:
    """The host (or the container's cgroup) OOM killer killed one of the job's processes."""
    victims = [k for k in ev.oom_kills if k.pid in ev.job_pids]
    if victims or ev.cgroup_oom_kills:
        lines = [k.line for k in victims]
        if ev.cgroup_oom_kills:
            lines.append(f"cgroup memory.events: oom_kill +{ev.cgroup_oom_kills} during the run")
        who = f"pid {victims[0].pid} ({victims[0].process})" if victims else "a process in this container"
        return Classification(
            "killed", f"host out of memory: the OOM killer killed {who}", lines + notes, signal=sig
        )
    return None


def _classify(ev: AttemptEvidence) -> Classification:
    notes: list[str] = []
    if ev.kernel_note:
        notes.append(f"could not check the kernel log: {ev.kernel_note}")

    if ev.user_stop_signal is not None:
        return Classification(
            "planned",
            f"stopped on request ({signal_name(ev.user_stop_signal)} forwarded)",
            [f"exit status {ev.returncode}", *notes],
            signal=ev.user_stop_signal,
        )

    if ev.returncode == 0 and not ev.hang_reason:
        return Classification(COMPLETED, "completed (exit status 0)", notes)

    hw = _gpu_hardware(ev, notes)
    if hw is not None:
        return hw

    if ev.hang_reason:
        return Classification("hang", f"hang: {ev.hang_reason}", [ev.hang_reason, *notes])

    sig, sig_note = _signal_of(ev)

    oom = _host_oom(ev, notes, sig)
    if oom is not None:
        return oom

    matches = match_output(ev.output_tail)
    # "a process was killed" texts say how, not why: the signal branch below handles them
    killed_text = [m for m in matches if m.cls == "killed"]
    specific = [m for m in matches if not m.generic and m.cls != "killed"]
    if specific:
        first = specific[0]
        lines = [f"output: {m.line}" for m in specific[:5]]
        if sig_note:
            lines.append(sig_note)
        return Classification(first.cls, first.title, lines + notes, signal=sig)

    if sig is not None and sig_note is not None:
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            return Classification(
                "planned", f"stopped from outside: {sig_note}", [sig_note, *notes], signal=sig
            )
        if sig == signal.SIGKILL:
            lines = [sig_note] + [f"output: {m.line}" for m in killed_text[:3]]
            summary = f"killed: {sig_note}"
            if ev.mem_peak_pct is not None and ev.mem_peak_pct >= host_threshold("oom_mem_peak_pct"):
                lines.append(
                    f"host memory peaked at {ev.mem_peak_pct:.0f}% during the run (likely the OOM killer)"
                )
                summary += " under host memory pressure"
            return Classification("killed", summary, lines + notes, signal=sig)
        exc = _last_exception_line(ev.output_tail)
        lines = [sig_note] + ([f"output: {exc}"] if exc else [])
        return Classification("application_error", f"crashed: {sig_note}", lines + notes, signal=sig)

    if killed_text:
        return Classification(
            "killed", killed_text[0].title, [f"output: {m.line}" for m in killed_text[:3]] + notes
        )

    exc = _last_exception_line(ev.output_tail)
    if exc or any(m.cls == "application_error" for m in matches):
        line = exc or next(m.line for m in matches if m.cls == "application_error")
        return Classification(
            "application_error",
            f"application error: {line}",
            [f"output: {line}", f"exit status {ev.returncode}", *notes],
        )
    return Classification(
        "unknown",
        f"exit status {ev.returncode}, no recognised error in the output",
        [f"exit status {ev.returncode}", *notes],
    )
