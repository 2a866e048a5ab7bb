"""What a matched error signature's text says beyond its code: the numbers of a CUDA OOM, the rank and
collective of an NCCL timeout, the driver and library versions of a mismatch, a GPU's bus id or Xid.

Kept apart from :mod:`gpuclinic.knowledge.signatures` (finding the matches) because each extractor
reads one message family's wording; a signature names its extractor in
``data/evidence_signatures.json`` (``"extract"``).
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

from gpuclinic import lazyre

if TYPE_CHECKING:
    from gpuclinic.knowledge.signatures import SignatureMatch

_SIZE = r"([\d.]+)\s*(bytes|[KMGT]i?B)"
_UNITS = {
    "bytes": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
    "tb": 1000**4,
    "tib": 1024**4,
}


def parse_size(num: str, unit: str) -> int | None:
    """``("2.00", "GiB")`` -> bytes; None when the number is unreadable."""
    try:
        return int(float(num) * _UNITS[unit.lower()])
    except (ValueError, KeyError):
        return None


def human(n: int | float) -> str:
    v = float(n)
    for u in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or u == "TiB":
            return f"{v:.2f} {u}" if u != "B" else f"{int(v)} B"
        v /= 1024
    return f"{v:.2f} TiB"


_OOM_NEW = {
    "tried": lazyre.compile(r"Tried to allocate " + _SIZE),
    "total": lazyre.compile(r"total capaci?ty of " + _SIZE),
    "free": lazyre.compile(r"of which " + _SIZE + r" is free"),
    "allocated": lazyre.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch"),
    "reserved_unallocated": lazyre.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated"),
    "this_process": lazyre.compile(r"this process has " + _SIZE + r" memory in use"),
}
_OOM_OLD = {
    "total": lazyre.compile(r"\(GPU \d+; " + _SIZE + r" total capacity"),
    "allocated": lazyre.compile(_SIZE + r" already allocated"),
    "free": lazyre.compile(r"; " + _SIZE + r" free"),
    "reserved": lazyre.compile(_SIZE + r" reserved in total by PyTorch"),
}
_OOM_GPU = lazyre.compile(r"(?:\(GPU |GPU )(\d+)")
_OOM_OTHER = lazyre.compile(r"Process (\d+) has " + _SIZE + r" memory in use")


@cache
def _oom_limits() -> tuple[float, float, int]:
    """(fragmentation fraction, reserved-note fraction, fit slack bytes) from the signature data."""
    from gpuclinic.knowledge import load_data

    d = load_data("error_signatures.json")["oom_diagnosis"]
    return (
        float(d["fragmentation_fraction_of_gpu"]),
        float(d["reserved_note_fraction_of_gpu"]),
        int(d["fit_slack_bytes"]),
    )


def _extract_oom(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    """Turn the numbers of a PyTorch OOM message into a diagnosis (fragmentation, other processes)."""
    seg = text[m.start() : m.start() + 1500]
    # the message may be wrapped over lines; stop at the next OOM message
    nxt = seg.find("CUDA out of memory", 20)
    if nxt > 0:
        seg = seg[:nxt]
    vals = _oom_numbers(seg)
    g = _OOM_GPU.search(seg)
    if g:
        sm.data["gpu_index"] = int(g.group(1))
    if "reserved_unallocated" not in vals and "reserved" in vals and "allocated" in vals:
        vals["reserved_unallocated"] = max(0, vals["reserved"] - vals["allocated"])
    sm.data.update({f"{k}_bytes": v for k, v in vals.items()})
    others = [(int(p), parse_size(n, u) or 0) for p, n, u in _OOM_OTHER.findall(seg)]
    if others:
        sm.data["other_processes"] = [{"pid": p, "bytes": b} for p, b in others]
    if _oom_exceeds_gpu(vals, sm):
        return
    _oom_cache_hints(vals, sm)
    if others:
        _oom_other_processes(others, sm)
    _oom_last_hints(vals, sm)


def _oom_numbers(seg: str) -> dict[str, int]:
    """The byte counts an OOM message states (new and old PyTorch wordings)."""
    vals: dict[str, int] = {}
    for table in (_OOM_NEW, _OOM_OLD):
        for key, rx in table.items():
            if key in vals:
                continue
            mm = rx.search(seg)
            if mm:
                size = parse_size(mm.group(1), mm.group(2))
                if size is not None:
                    vals[key] = size
    return vals


def _oom_exceeds_gpu(vals: dict[str, int], sm: SignatureMatch) -> bool:
    """One allocation larger than the whole GPU: nothing else matters."""
    tried, total = vals.get("tried"), vals.get("total")
    if tried and total and tried > total:
        sm.hints.append(
            f"a single allocation of {human(tried)} is larger than the whole GPU ({human(total)}): "
            "the batch/sequence/image size must shrink (or shard the model across GPUs); no setting will fit "
            "it"
        )
        sm.data["diagnosis"] = "allocation_exceeds_gpu"
        return True
    return False


def _oom_cache_hints(vals: dict[str, int], sm: SignatureMatch) -> None:
    """Memory PyTorch reserved but did not allocate: a fragmented cache, or one too small to matter."""
    tried, total = vals.get("tried"), vals.get("total")
    free, ru = vals.get("free"), vals.get("reserved_unallocated")
    frag, note, _ = _oom_limits()
    if (
        ru is not None
        and tried
        and (ru >= tried or (free is not None and free + ru >= tried and total and ru >= frag * total))
    ):
        sm.hints.append(
            f"{human(ru)} is reserved by PyTorch but unallocated (the request was {human(tried)}): the cache "
            "is "
            "fragmented; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting the job"
        )
        sm.data["diagnosis"] = "fragmentation"
    elif ru is not None and total and ru >= note * total:
        sm.hints.append(
            f"{human(ru)} is reserved by PyTorch but unallocated; "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "returns it, but the request would still not fit: the job needs less memory"
        )


def _oom_other_processes(others: list[tuple[int, int]], sm: SignatureMatch) -> None:
    """Other processes holding memory on the GPU."""
    tot = sum(b for _, b in others)
    sm.hints.append(
        f"{len(others)} other process(es) hold {human(tot)} on this GPU "
        f"(pids {', '.join(str(p) for p, _ in others[:5])}): stop them or use another GPU"
    )
    sm.data.setdefault("diagnosis", "other_processes")


def _oom_last_hints(vals: dict[str, int], sm: SignatureMatch) -> None:
    """Free memory that still did not fit, else the model itself is too large."""
    tried, free = vals.get("tried"), vals.get("free")
    # The allocator rounds requests up (2 MiB pages, 20 MiB segments) and the driver keeps some room, so a
    # request only "fit" when clearly below the free memory: 41.56 MiB free vs 32 MiB asked is a full GPU.
    if free is not None and tried and free >= tried + _oom_limits()[2] and "diagnosis" not in sm.data:
        sm.hints.append(
            f"{human(free)} was free but {human(tried)} could not be allocated: a per-process memory "
            "fraction, "
            "MIG slice, or driver-level fragmentation limits this process"
        )
        sm.data["diagnosis"] = "free_but_failed"
    if "diagnosis" not in sm.data and tried:
        used = vals.get("allocated")
        sm.hints.append(
            f"the model and activations use the memory ({human(used) if used else 'most of it'} allocated by "
            "PyTorch): "
            "reduce batch size or sequence length, enable activation checkpointing or mixed precision"
        )
        sm.data["diagnosis"] = "model_too_large"


_WD = lazyre.compile(
    r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\((.*?)\) ran for (\d+) "
    r"milliseconds"
)
_WD_FIELDS = lazyre.compile(r"([\w()]+)=([^,]+)")


def _extract_nccl_timeout(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    ranks: set[int] = set()
    first_fields: dict[str, str] = {}
    for i, mm in enumerate(_WD.finditer(text)):
        ranks.add(int(mm.group(1)))
        if i == 0:
            first_fields = dict(_WD_FIELDS.findall(mm.group(2)))
            sm.data["ran_for_ms"] = int(mm.group(3))
        if i > 5000:
            break
    if ranks:
        sm.data["ranks_reporting"] = sorted(ranks)
    for key in ("SeqNum", "OpType", "Timeout(ms)"):
        if key in first_fields:
            sm.data[key.lower().replace("(ms)", "_ms")] = first_fields[key].strip()
    if first_fields:
        op, to = first_fields.get("OpType", "?"), first_fields.get("Timeout(ms)", "?")
        sm.hints.append(f"{op} (SeqNum {first_fields.get('SeqNum', '?')}) exceeded the {to} ms timeout")
    if len(ranks) > 1:
        mx = max(ranks)
        missing = sorted(set(range(mx + 1)) - ranks)
        if missing and len(missing) <= 8:
            sm.hints.append(
                f"ranks {', '.join(map(str, missing))} did not report the timeout in this log: look at those "
                "first "
                "(straggler, crash, or a hung GPU)"
            )
            sm.data["ranks_silent"] = missing


def _extract_torch_driver(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    try:
        v = int(m.group(1))
    except (IndexError, ValueError, TypeError):
        return
    major, minor = v // 1000, (v % 1000) // 10
    sm.data["driver_cuda"] = f"{major}.{minor}"
    sm.hints.append(f"the driver supports CUDA up to {major}.{minor}; torch was built for a newer CUDA")


def _extract_nvml_mismatch(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    mm = re.search(r"NVML library version: ([\d.]+)", text)
    if mm:
        sm.data["nvml_library_version"] = mm.group(1)
        sm.hints.append(f"user-space NVML is {mm.group(1)}; compare with `cat /proc/driver/nvidia/version`")
    _extract_api_mismatch(text, m, sm)


_API = lazyre.compile(
    r"API mismatch: the client has the version (\d+(?:\.\d+)+), but\s*(?:NVRM: )?this kernel module has the "
    r"version (\d+(?:\.\d+)+)"
)  # the sentence's own full stop is not part of the version


def _extract_api_mismatch(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    mm = _API.search(text)
    if mm:
        sm.data["client_version"], sm.data["kernel_module_version"] = mm.group(1), mm.group(2)
        sm.hints.append(
            f"user-space driver {mm.group(1)} but kernel module {mm.group(2)}: reboot to load the new module"
        )


def _extract_assert(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    mm = re.search(r"Assertion `([^`]*)` failed", text)
    if mm:
        sm.data["assertion"] = mm.group(1)
        if "n_classes" in mm.group(1) or "n_class" in mm.group(1):
            sm.hints.append(
                "a target label is outside [0, num_classes): check labels.min()/labels.max() against the "
                "model's output size"
            )
        elif "index" in mm.group(1).lower() or "srcIndex" in mm.group(1):
            sm.hints.append(
                "an index is out of range (embedding/gather): check token ids against the vocabulary size"
            )


def _extract_bus_id(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    try:
        sm.data["pci_bus_id"] = m.group(1)
    except IndexError:
        pass


def _extract_xid(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    try:
        sm.data["pci_bus_id"], sm.data["xid"] = m.group(1), int(m.group(2))
    except (IndexError, ValueError):
        return
    from gpuclinic.knowledge.xid import lookup  # late: xid imports this module's loader

    info = lookup(sm.data["xid"])
    if info is not None:
        name = getattr(info, "name", None) or getattr(info, "title", None)
        if name:
            sm.hints.append(f"XID {sm.data['xid']}: {name}")


_SM = lazyre.compile(
    r"(?:^|\n)\s*(?:[\w.]+Warning:\s*)?(.*?) with CUDA capability sm_(\d+) is not compatible"
)
_SM_LIST = lazyre.compile(r"supports CUDA capabilities ((?:(?:sm|compute)_\d+\s*)+)")


def _extract_sm_compat(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    from gpuclinic.knowledge import compat

    mm = _SM.search(text, max(0, m.start() - 300))
    if not mm:
        return
    name, digits = mm.group(1).strip(), mm.group(2)
    cc = f"{digits[:-1]}.{digits[-1]}"
    sm.data.update({"gpu_name": name, "compute_capability": cc})
    lst = _SM_LIST.search(text, mm.end())
    if lst:
        arch = lst.group(1).split()
        sm.data["arch_list"] = arch
        verdict = compat.can_run(compat.ArchList.parse(arch), cc)
        if verdict.via == "ptx":
            sm.hints.append(f"{name} (sm_{digits}) is served only through PTX JIT: {verdict.detail}")
    first = compat.first_torch_for(cc)
    if first:
        minor, var = first
        sm.hints.append(
            f"{name} is sm_{digits} (compute capability {cc}); official wheels support it from torch {minor} "
            "with "
            f"{var}: `pip install 'torch>={minor}' --index-url https://download.pytorch.org/whl/{var}` "
            f"(needs driver >= {compat.min_driver(var)})"
        )


_KILLED = lazyre.compile(r"Killed process (\d+) \(([^)]*)\)[^\n]*?anon-rss:\s*([\d,]+)\s*kB")


def _extract_oom_killer(text: str, m: re.Match[str], sm: SignatureMatch) -> None:
    mm = _KILLED.search(text, max(0, m.start() - 10))
    if not mm:
        return
    rss = int(mm.group(3).replace(",", "")) * 1024
    sm.data.update({"pid": int(mm.group(1)), "process": mm.group(2), "anon_rss_bytes": rss})
    sm.hints.append(f"the kernel killed pid {mm.group(1)} ({mm.group(2)}) holding {human(rss)} of RAM")


EXTRACTORS = {
    "sm_compat": _extract_sm_compat,
    "oom_killer": _extract_oom_killer,
    "oom": _extract_oom,
    "nccl_timeout": _extract_nccl_timeout,
    "torch_driver": _extract_torch_driver,
    "nvml_mismatch": _extract_nvml_mismatch,
    "api_mismatch": _extract_api_mismatch,
    "assert": _extract_assert,
    "bus_id": _extract_bus_id,
    "xid": _extract_xid,
}
