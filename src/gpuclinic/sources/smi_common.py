"""Value parsing shared by the nvidia-smi text, XML and table parsers.

nvidia-smi prints the same facts in many spellings across driver eras ("N/A", "[N/A]",
"[Not Supported]", "ERR!", "[GPU requires reset]", "16x", "250.00 W", "1202176 us"); this module
turns one spelling into one typed value, and says *why* when a value is absent, so checks can tell
"not supported on this GPU" from "the GPU could not answer".
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from typing import Any

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import normalize_bus_id
from gpuclinic.knowledge import gpu_fields
from gpuclinic.record import field, record
from gpuclinic.sources import sniffgates

# One clock-event vocabulary (NVML's names) for every reader: knowledge/data/gpu_fields.json.
CLOCK_REASON_BITS: dict[str, int] = gpu_fields.reason_bits()
# "Clocks Event Reasons Counters" labels -> GpuFacts.violation_ns keys
COUNTER_NAMES: dict[str, str] = gpu_fields.counter_names()

# Values meaning "no value, and that is normal" (feature absent or not applicable).
_ABSENT = {"n/a", "[n/a]", "none", "not available", "", "-"}
# Values meaning "the GPU or driver could not answer": worth recording in GpuFacts.unreadable.
_ERROR_MARKERS = (
    "not supported", "unknown error", "requires reset", "err!", "gpu is lost", "insufficient permissions",
    "deprecated", "error", "unknown", "access blocked",
)
# Of those, the ones where the GPU or driver failed to answer (not a feature the GPU lacks, "[Not Supported]")
_FAILED_MARKERS = ("error", "err!", "requires reset", "gpu is lost", "unknown", "access blocked")

_NUM_RE = lazyre.compile(r"[-+]?\d+(?:\.\d+)?")


def clean(value: str | None) -> str | None:
    """Strip whitespace and surrounding brackets noise; None for absent values."""
    if value is None:
        return None
    v = value.strip()
    if v.lower() in _ABSENT:
        return None
    return v


def error_reason(value: str | None) -> str | None:
    """The error text when ``value`` is an error marker like "[Unknown Error]" or "ERR!", else None."""
    if value is None:
        return None
    v = value.strip()
    low = v.lower()
    if low in _ABSENT:
        return None
    if _NUM_RE.match(v):
        return None
    if any(m in low for m in _ERROR_MARKERS):
        return v.strip("[] ")
    return None


def num(value: str | None) -> float | None:
    """First number in ``value`` ("66.92 W" -> 66.92, "16x" -> 16), None when absent or an error."""
    v = clean(value)
    if v is None or error_reason(v):
        return None
    m = _NUM_RE.search(v)
    if not m:
        return None
    try:
        return float(m.group(0))
    except ValueError:  # pragma: no cover - the regex only matches numbers
        return None


def integer(value: str | None) -> int | None:
    """Integer value; hex ("0x1F") is accepted; negative or fractional text gives None."""
    v = clean(value)
    if v is None or error_reason(v):
        return None
    if v.lower().startswith("0x"):
        try:
            return int(v.split()[0], 16)
        except ValueError:
            return None
    f = num(v)
    if f is None or f != int(f):
        return None
    return int(f)


def mib_bytes(value: str | None) -> int | None:
    """'40960 MiB' -> bytes (MiB default; KiB/GiB/B honoured)."""
    f = num(value)
    if f is None or value is None:
        return None
    unit = value.strip().lower()
    if unit.endswith("gib") or unit.endswith("gb"):
        mul = 1024**3
    elif unit.endswith("kib") or unit.endswith("kb"):
        mul = 1024
    elif unit.endswith(" b") or unit.endswith("bytes"):
        mul = 1
    else:
        mul = 1024**2
    return int(f * mul)


_ANNOTATED = lazyre.compile(r"^(not active|inactive|active|yes|no|enabled|disabled)\s+[(<#←-]")


def yes_no(value: str | None) -> bool | None:
    """Yes/No, Enabled/Disabled, Active/Not Active, On/Off -> bool."""
    v = clean(value)
    if v is None:
        return None
    low = v.lower().strip("[]")
    if low in ("yes", "enabled", "active", "on", "true", "1"):
        return True
    if low in ("no", "disabled", "not active", "off", "false", "0", "inactive"):
        return False
    # a value the poster annotated: "Active      (bitmask 0x20)", "Active    <-- thermal throttling!"
    m = _ANNOTATED.match(low)
    return yes_no(m.group(1)) if m else None


def failed_answer(why: str | None) -> bool:
    """``why`` (an error marker printed in place of a value) says the GPU or driver failed to answer."""
    low = (why or "").lower()
    return any(m in low for m in _FAILED_MARKERS)


def failed_reads(gpu: GpuFacts) -> dict[str, str]:
    """The fields of ``gpu`` that its reader saw answered by an error ("ERR!", "[Unknown Error]")."""
    return {k: v for k, v in gpu.unreadable.items() if failed_answer(v)}


def note_unreadable(gpu: GpuFacts, field_name: str, value: str | None) -> None:
    """Record why ``field_name`` has no value when nvidia-smi printed an error instead of one."""
    why = error_reason(value)
    if why:
        gpu.unreadable.setdefault(field_name, why)
        low = why.lower()
        if "requires reset" in low and not gpu.recovery_action:
            gpu.recovery_action = "gpu_reset"
        if "gpu is lost" in low and not gpu.lost:
            gpu.lost = True
            gpu.lost_reason = why


def set_reasons(gpu: GpuFacts, active: dict[str, bool]) -> None:
    """Fill the decoded clock-event reasons and the NVML-compatible bitmask."""
    if not active:
        return
    mask = 0
    names: list[str] = []
    for name, on in active.items():
        if on:
            mask |= CLOCK_REASON_BITS.get(name, 0)
            names.append(name)
    gpu.clock_event_reasons = names
    gpu.clock_event_reasons_mask = mask


def reason_name(label: str) -> str | None:
    """Map an nvidia-smi reason label (text or XML tag) to its NVML-style name (gpu_fields.json)."""
    return gpu_fields.reason_name(label)


def microseconds_ns(value: str | None) -> int | None:
    """'1202176 us' -> nanoseconds."""
    f = num(value)
    if f is None or value is None:
        return None
    low = value.lower()
    if low.strip().endswith("ms"):
        return int(f * 1_000_000)
    if low.strip().endswith("ns"):
        return int(f)
    if low.strip().endswith(" s"):
        return int(f * 1_000_000_000)
    return int(f * 1000)


def width(value: str | None) -> int | None:
    """'16x' / 'x16' -> 16."""
    return integer(value.replace("x", "").replace("X", "") if value else value)


# How a gpu_fields.json row's printed value is read, by its "parse" kind: the same in -q text and -q -x XML.
SCHEMA_PARSE: dict[str, Callable[[str | None], Any]] = {
    "str": clean,
    "bool": yes_no,
    "num": num,
    "int": integer,
    "mib": mib_bytes,
    "width": width,
}
NUMERIC_PARSE = ("num", "int", "mib", "width")


def apply_tlimit(gpu: GpuFacts, tlimit: float | None, shutdown_margin: float | None,
                 slowdown_margin: float | None, max_gpu_margin: float | None) -> None:
    """Blackwell-era drivers (575+) print temperature *margins* to T.Limit instead of absolute thresholds.

    ``GPU T.Limit Temp`` is how far the GPU is below its T.Limit; thresholds are margins relative to
    T.Limit (0 = at it, -5 = five degrees past it).  With the current temperature we recover absolute
    thresholds so the thermal checks compare like with like.
    """
    if gpu.temperature_c is None or tlimit is None:
        return
    limit = gpu.temperature_c + tlimit
    if slowdown_margin is not None and gpu.slowdown_temp_c is None:
        gpu.slowdown_temp_c = limit - slowdown_margin
    if shutdown_margin is not None and gpu.shutdown_temp_c is None:
        gpu.shutdown_temp_c = limit - shutdown_margin
    if max_gpu_margin is not None and gpu.max_operating_temp_c is None:
        gpu.max_operating_temp_c = limit - max_gpu_margin


@record
class SmiDump:
    """What one nvidia-smi output said: versions, GPUs and error statements it printed."""

    kind: str  # smi_text | smi_xml | smi_table
    driver_version: str | None = None
    cuda_version: str | None = None
    timestamp: str | None = None
    attached_gpus: int | None = None
    gpus: list[GpuFacts] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # verbatim nvidia-smi error statements
    notes: list[str] = field(default_factory=list)  # how the dump was read, for the report's notes
    partial: list[str] = field(default_factory=list)  # why part of it could not be read (evidence.partial)


# nvidia-smi's own error statements, as printed in the wild (one line each).
_HANDLE_RE = lazyre.compile(
    r"Unable to (?:determine|detect) the device handle for "
    # "GPU0000:07:00.0", "GPU 0000:0B:00.0", an index first: "GPU0: 0000:09:00.0" (OGKM#1342), and
    # "gpu 0000:18:00.0" in lower case (NordicHPC/sonar#72)
    r"(?:(?:GPU|gpu)\s*(?:\d{1,3}:\s+)?)?(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"\s*:?\s*(?P<why>.*)$"
)
_ERROR_LINE_RES = (
    lazyre.compile(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.*", re.I),
    lazyre.compile(r"Failed to initialize NVML:.*", re.I),
    lazyre.compile(r"No devices were found", re.I),
    lazyre.compile(r"Unable to (?:determine|detect) the device handle for .*", re.I),
    lazyre.compile(r"NVML library version mismatch.*|Driver/library version mismatch.*", re.I),
    lazyre.compile(r"GPU access blocked by the operating system.*", re.I),
    lazyre.compile(r"Unable to find NVIDIA driver.*|NVIDIA driver is not loaded.*", re.I),
    lazyre.compile(r"Insufficient Permissions.*", re.I),
    lazyre.compile(r"nvidia-smi: (?:command )?not found|command not found: nvidia-smi", re.I),
)


# Every statement above contains one of these (lowercase): lines without any are skipped before
# the per-line regexes, which cost ~6 s on a 19 MB training log pasted into `explain`.
_ERROR_LINE_KEYS = (
    "nvidia-smi",
    "failed to initialize nvml",
    "no devices were found",
    "unable to determine the device handle",
    "version mismatch",
    "gpu access blocked",
    "unable to find nvidia driver",
    "nvidia driver is not loaded",
    "insufficient permissions",
)

# a literal each of _ERROR_LINE_RES and _HANDLE_RE needs (lower case): a line holding none is skipped
_ERROR_LINE_NEEDS = sniffgates.SMI_ERRORS


def _needs_any(low: str) -> bool:
    return any(k in low for k in _ERROR_LINE_NEEDS)


def first_lines(text: str, n: int) -> list[str]:
    """``text.splitlines()[:n]`` without splitting all of a long sample: from a prefix that holds more than
    ``n`` lines (then its first ``n`` lines, each break included, are the text's)."""
    cut = 256 * n
    if len(text) > cut:
        lines = text[:cut].splitlines()
        if len(lines) > n:
            return lines[:n]
    return text.splitlines()[:n]


def may_hold_errors(text: str) -> bool:
    """False when no line of ``text`` can hold an error statement: one fold of it all instead of one per
    line (scan_error_lines skips an ASCII line without a ``_ERROR_LINE_NEEDS`` word, and in an ASCII text
    without one every line is such a line)."""
    return not text.isascii() or _needs_any(text.lower())


def _candidate_lines(lines: list[str]) -> list[str]:
    """The lines holding one of ``_ERROR_LINE_KEYS`` (ASCII case folded, as bytes: str.lower() of a
    19 MB non-ASCII text alone takes half a second)."""
    if len(lines) < 2000:
        return lines
    low = "\n".join(lines).encode("utf-8", "surrogatepass").lower()
    hits: list[int] = []
    for key in _ERROR_LINE_KEYS:
        kb = key.encode()
        i = low.find(kb)
        while i >= 0:
            hits.append(i)
            nl = low.find(b"\n", i)
            i = low.find(kb, nl) if nl >= 0 else -1
    keep: list[str] = []
    k = prev = 0
    last = -1
    for i in sorted(hits):
        k += low.count(b"\n", prev, i)  # line index of offset i, counted on from the previous hit
        prev = i
        if k != last:
            keep.append(lines[k])
            last = k
    return keep


def scan_error_lines(lines: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """nvidia-smi error statements in ``lines`` and the (bus id, why) of each GPU it could not open."""
    errors: list[str] = []
    lost: list[tuple[str, str]] = []
    for raw in _candidate_lines(lines):
        line = raw.strip()
        if not line or len(line) > 500:
            continue
        if line.isascii() and not _needs_any(line.lower()):
            continue  # no regex below can match (non-ASCII lines take the regexes: re.I folds a few letters)
        for rx in _ERROR_LINE_RES:
            m = rx.search(line)
            if m:
                text = m.group(0).strip()
                if text not in errors:
                    errors.append(text)
                break
        h = _HANDLE_RE.search(line)
        if h:
            lost.append((normalize_bus_id(h.group("bus")), h.group("why").strip() or "Unknown Error"))
    return errors, lost


def mark_lost(gpus: list[GpuFacts], lost: list[tuple[str, str]]) -> None:
    """Add or mark GPUs nvidia-smi could not open as lost ("Unable to determine the device handle")."""
    for bus, why in lost:
        found = next((g for g in gpus if g.pci_bus_id == bus), None)
        if found is None:
            found = GpuFacts(index=len(gpus), pci_bus_id=bus)
            gpus.append(found)
        found.lost = True
        found.lost_reason = f"nvidia-smi: Unable to determine the device handle: {why}"


_TIME_FORMATS = (
    "%a %b %d %H:%M:%S %Y",
    "%a %b %d %H:%M:%S %Z %Y",
    "%a %d %b %Y %I:%M:%S %p %Z",
    "%a %b %d %I:%M:%S %p %z %Y",
)


def iso_time(text: str | None) -> str | None:
    """nvidia-smi / bug-report time stamps ("Wed Jun  7 19:32:16 2023") as ISO 8601, or None.

    nvidia-smi prints local time without a zone, so the result carries none either.
    """
    if not text:
        return None
    t = re.sub(r" ([+-]\d\d) ", r" \g<1>00 ", " ".join(text.split()))  # "-03" -> "-0300"
    for fmt in _TIME_FORMATS:
        try:
            return _dt.datetime.strptime(t, fmt).isoformat()
        except ValueError:
            continue
    return None
