"""``nvidia-smi nvlink -s`` (link state/speed) and ``nvidia-smi nvlink -e`` (error counters) text.

Both print one ``GPU <n>: <name> (UUID: GPU-...)`` line per GPU followed by indented ``Link <k>: ...``
lines.  ``-s`` prints the speed of an active link (``Link 0: 25.781 GB/s``) or ``<inactive>``; a link
that is down on a GPU whose siblings are up is what the ``nvlink.error`` check reports.  ``-e`` prints
``Link <k>: Replay Errors: <n>`` (and Recovery, CRC, CRC Flit/Data, ECC) lines.  ``-c`` prints what each
link supports (``Link 0, P2P is supported: true``): the links are read, their state is not in it.

``dcgmi nvlink --link-status`` prints ``gpuId <n>:`` and one row of link states (``U`` up, ``D`` down,
``X`` disabled, ``_`` not supported); its ``NvSwitches:`` part is not GPU links and is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuclinic import lazyre
from gpuclinic.facts.gpu import GpuFacts, NvLinkFacts
from gpuclinic.sources import smi_common as c
from gpuclinic.sources import sniffgates

# (drivers before ~450 print no UUID: "GPU 0: Tesla V100-SXM2-32GB")
_GPU_RE = lazyre.compile(r"^\s*GPU (?P<idx>\d+): (?P<name>[^:()]+?)\s*(?:\(UUID: (?P<uuid>[^)]*)\))?\s*$")
_LINK_RE = lazyre.compile(r"^\s*Link (?P<link>\d+): (?P<rest>.*?)\s*$")
# `nvlink -c` (--capabilities): "Link 0, P2P is supported: true": the link exists; no state, no fault
_CAP_RE = lazyre.compile(r"^\s*Link (?P<link>\d+), [\w ]+? (?:is )?supported: (?:true|false)\s*$")
_SPEED_RE = lazyre.compile(r"^(?P<speed>[\d.]+) ?GB/s$")
_COUNTER_RE = lazyre.compile(r"^(?P<what>[A-Za-z ]+?) Errors?: ?(?P<n>\d+)$")
# printed under a GPU instead of its links when NVML finds none up (no bridge, or every link down)
_DCGM_GPU_RE = lazyre.compile(r"^\s*gpuId (?P<idx>\d+):\s*$")
_DCGM_STATES_RE = lazyre.compile(r"^\s*[UDX_](?:\s+[UDX_])*\s*$")
_ALL_INACTIVE_RE = lazyre.compile(r"Unable to retrieve NVLink information as all links are inActive", re.I)
_COUNTERS = {"replay": "replay_errors", "recovery": "recovery_errors", "crc": "crc_flit_errors",
             "crc flit": "crc_flit_errors", "crc data": "crc_data_errors", "ecc": "ecc_errors"}
MAX_LINES = 100_000


def looks_like(sample: str) -> bool:
    """True when ``sample`` starts like ``nvidia-smi nvlink -s`` / ``-e`` output (a GPU line, then a link
    line)."""
    if not any(k in sample for k in sniffgates.SMI_NVLINK):
        return False  # no line can start the output (the two GPU patterns need these literals)
    seen_gpu = False
    for line in c.first_lines(sample, 50):
        if _DCGM_GPU_RE.match(line):
            seen_gpu = True
        elif seen_gpu and _DCGM_STATES_RE.match(line):
            return True
        elif _GPU_RE.match(line):
            seen_gpu = True
        elif seen_gpu and _ALL_INACTIVE_RE.search(line):
            return True
        elif seen_gpu and _CAP_RE.match(line):
            return True
        elif seen_gpu and _LINK_RE.match(line):
            m = _LINK_RE.match(line)
            rest = m.group("rest") if m else ""
            return rest == "<inactive>" or bool(_SPEED_RE.match(rest) or _COUNTER_RE.match(rest))
    return False


def parse(text: str | Iterable[str]) -> c.SmiDump:
    """GPUs (index, name, UUID) with their links; speeds and counters that are not printed stay None."""
    lines = text.splitlines() if isinstance(text, str) else list(text)
    dump = c.SmiDump(kind="smi_nvlink")
    cur: GpuFacts | None = None
    links: dict[int, NvLinkFacts] = {}
    for line in lines[:MAX_LINES]:
        g = _GPU_RE.match(line)
        if g:
            uuid = (g.group("uuid") or "").strip()
            cur = GpuFacts(
                index=int(g.group("idx")),
                name=g.group("name").strip() or None,
                uuid=uuid if uuid.startswith(("GPU-", "MIG-")) else None,
            )
            dump.gpus.append(cur)
            links = {}
            continue
        d = _DCGM_GPU_RE.match(line)
        if d:
            cur = GpuFacts(index=int(d.group("idx")))
            dump.gpus.append(cur)
            links = {}
            continue
        if line.strip().startswith("NvSwitches:"):
            cur = None  # switch ports follow, not GPU links
            continue
        if cur is not None and _DCGM_STATES_RE.match(line):
            states = line.split()
            for k, st in enumerate(states):
                if st in "UD":
                    cur.nvlinks.append(NvLinkFacts(link=k, active=st == "U"))
            if "D" in states and all(st == "D" for st in states):
                cur.nvlink_all_inactive = True  # DCGM lists these links as present and down
            continue
        if cur is not None and _ALL_INACTIVE_RE.search(line):
            cur.nvlink_all_inactive = True
            continue
        if cur is not None:
            _read_link(cur, links, line)
    dump.notes.append("nvidia-smi nvlink output: link state/counters only")
    return dump


def _read_link(cur: GpuFacts, links: dict[int, NvLinkFacts], line: str) -> None:
    """One ``Link <k>: ...`` (state, speed or counter) or ``Link <k>, ... supported: ...`` line of ``cur``."""
    cap = _CAP_RE.match(line)
    m = None if cap else _LINK_RE.match(line)
    hit = cap or m
    if hit is None:
        return
    k = int(hit.group("link"))
    link = links.get(k)
    if link is None:
        link = links[k] = NvLinkFacts(link=k)
        cur.nvlinks.append(link)
    if m is None:
        return
    rest = m.group("rest")
    if rest == "<inactive>":
        link.active = False
    elif _SPEED_RE.match(rest):
        link.active = True
    else:
        cm = _COUNTER_RE.match(rest)
        attr = _COUNTERS.get(cm.group("what").strip().lower()) if cm else None
        if cm and attr:
            setattr(link, attr, int(cm.group("n")))
