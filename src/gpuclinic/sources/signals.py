"""Known fault signatures on any line of saved evidence, whatever format surrounds it.

The safety net of the segmenting reader: a line that names an Xid (in a Kubernetes device-plugin log,
DCGM output, an exporter scrape, a JSON event, or a kernel line no parser understood) becomes an Xid
kernel event; fabric manager, persistence daemon, kernel Oops and IOMMU faults become
:class:`~gpuclinic.facts.evidence.Signal` records; and the ``explain`` error signatures
(``knowledge/signatures.py``) run on the prose parts, so ``doctor --from`` and ``explain`` agree.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from functools import cache

from gpuclinic import multifind, recache
from gpuclinic.facts.evidence import Signal
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.knowledge import codes, load_data
from gpuclinic.knowledge.signatures import CATEGORY_FAMILY, covered_by
from gpuclinic.knowledge.signatures import match as match_error_signatures
from gpuclinic.record import record

MAX_LINE = 4000


@record(frozen=True)
class EvidenceSignature:
    """One entry of ``evidence_signatures.json``: the line it recognises and what it means."""

    id: str
    extract: str  # xid | signal | room_event
    needles: tuple[str, ...]
    regex: str
    source: str
    net: bool = False  # only when no parser produced an event for the line
    code: str = ""
    severity_when: str | None = None  # the codes.json severity condition this signature means
    title: str = ""
    remedy: str = ""

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled ``regex``, compiled when a line first holds a needle (most never meet one)."""
        return _compiled(self.regex)


@cache
def _compiled(regex: str) -> re.Pattern[str]:
    return recache.compile(regex)


@cache
def evidence_signatures() -> tuple[EvidenceSignature, ...]:
    out = []
    for e in load_data("evidence_signatures.json")["signatures"]:
        out.append(
            EvidenceSignature(
                id=e["id"],
                extract=e["extract"],
                needles=tuple(e["needles"]),
                regex=e["pattern"],
                source=e["source"],
                net=bool(e.get("net")),
                code=e.get("code", ""),
                severity_when=e.get("severity_when"),
                title=e.get("title", ""),
                remedy=e.get("remedy", ""),
            )
        )
    return tuple(out)


_UUID = re.compile(r'UUID="(GPU-[0-9a-fA-F-]+)"')
_LABEL_GPU = re.compile(r'\bgpu="(\d+)"')
_LABEL_BUS = re.compile(r'pci_bus_id="([0-9a-fA-F:.]+)"')
# the GPU a restated Xid names ("... detected on GPU PCI:0000:01:00", gpud's reason text)
_NET_BUS = re.compile(r"\bPCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\b")


def evidence_needles() -> tuple[str, ...]:
    """The lower-case literal needles of the evidence signatures."""
    return tuple(sorted({n for s in evidence_signatures() for n in s.needles}))


def signature_needles() -> tuple[str, ...]:
    """The lower-case literal needles of every evidence and error signature: a line holding none of them
    cannot match any signature (the big-file prefilter)."""
    from gpuclinic.knowledge.signatures import signatures

    return tuple(
        sorted(
            {n for s in evidence_signatures() for n in s.needles}
            | {n for s in signatures() for n in s.needles}
        )
    )


def scan_lines(
    snap: Snapshot,
    numbered: Iterable[tuple[int, str]],
    origin: str,
    parsed_xid_lines: set[int] | None = None,
    lowered: str | None = None,
    *,
    prefiltered: bool = False,
) -> set[int]:
    """Run the evidence signatures over ``(line number, text)`` pairs; returns the line numbers they claimed.

    Xid lines become kernel events unless a parser already produced one for that line (``net`` entries;
    ``parsed_xid_lines`` names them when the parser's events carry no line numbers) or the format-specific
    entry already matched it.  ``lowered``: the texts joined with newlines and lower-cased, when the
    caller has it (saves a pass over a big input); ``prefiltered``: the pairs are only the lines that may
    hold a needle (a whole-text search found them): the needle pass runs over these few lines.
    """
    sigs = evidence_signatures()
    have = {ev.lineno for ev in snap.kernel_events if ev.origin == origin and ev.kind in ("xid", "sxid")}
    have |= parsed_xid_lines or set()
    # what the parsers read: a safety-net line restating one of these Xids (a tool's summary of the kernel
    # line, prose naming it) is the same fault, not another one on an unknown GPU
    parsed = {
        (ev.pci_bus_id, ev.xid) for ev in snap.kernel_events if ev.origin == origin and ev.kind == "xid"
    }
    parsed_nums = {x for _, x in parsed}
    pairs = list(numbered)
    claimed: set[int] = set()
    # (prefiltered pairs hold some reader's needle; most of them no evidence needle: the needle pass over
    # those few lines, one find per needle, spares a test per line and signature)
    needles, by_needle = _needle_index()
    for idx in _needle_lines(pairs, sigs, None if prefiltered else lowered):
        n, raw = pairs[idx]
        line = raw[:MAX_LINE]
        low = line.lower()
        xid_done = n in have
        # the signatures with a needle in the line, in order (one pass of the line for every needle)
        for k in sorted({k for nd in multifind.present(low, needles) for k in by_needle[nd]}):
            sig = sigs[k]
            if sig.extract == "xid" and xid_done:
                continue
            m = sig.pattern.search(line)
            if not m:
                continue
            gd = m.groupdict()
            if sig.extract == "xid":
                xid_done = True
                # (the safety net reads every Xid a line names: "`Xid 94` bursts + `Xid 154`")
                seen: set[int | None] = set()
                for mm in sig.pattern.finditer(line) if sig.net else (m,):
                    ev = _xid_event(sig, mm, line, origin, n)
                    where = ev.pci_bus_id
                    if ev.xid in seen or (
                        sig.net and ((where, ev.xid) in parsed or (where is None and ev.xid in parsed_nums))
                    ):
                        continue
                    seen.add(ev.xid)
                    snap.kernel_events.append(ev)
            elif sig.extract == "room_event":
                if not _room_event(snap, sig, m, origin, n):
                    continue  # a message of no known hardware-event class: not ours to judge
            else:
                bus = gd.get("bus") or gd.get("bus2")
                drv = gd.get("drv")
                if drv and drv != "nvidia" and not (bus and snap.gpu_by_bus_id(bus)):
                    continue  # an IOMMU fault of a NIC or NVMe drive: not ours to judge
                data = {k: v for k, v in gd.items() if v and k != "bus"}
                snap.signals.append(
                    signal_of(sig, line.strip(), origin, n, data, normalize_bus_id(bus) if bus else None)
                )
            claimed.add(n)
    return claimed


def signal_of(
    sig: EvidenceSignature,
    line: str,
    origin: str,
    lineno: int | None,
    data: dict[str, str],
    bus: str | None = None,
) -> Signal:
    """The signal an evidence signature gives for one line: code, severity and family from codes.json."""
    return Signal(
        code=sig.code,
        severity=codes.severity(sig.code, sig.severity_when).name.lower(),
        family=codes.family(sig.code).value,
        title=sig.title,
        line=line[:400],
        input=origin,
        lineno=lineno,
        pci_bus_id=bus,
        remedy=sig.remedy,
        source=sig.source,
        data={"signature": sig.id, **data},
    )


@cache
def _needle_index() -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """Every evidence needle, and for each the (ordered) indexes of the signatures holding it."""
    by: dict[str, list[int]] = {}
    for k, sig in enumerate(evidence_signatures()):
        for nd in sig.needles:
            if k not in by.setdefault(nd, []):
                by[nd].append(k)
    return tuple(sorted(by)), {nd: tuple(ks) for nd, ks in by.items()}


def _needle_lines(
    pairs: list[tuple[int, str]], sigs: Sequence[EvidenceSignature], lowered: str | None = None
) -> list[int]:
    """Indexes of the lines holding any needle: one multi-needle pass (``multifind``) over the whole text."""
    text = "\n".join(t for _, t in pairs).lower() if lowered is None else lowered
    starts = list(itertools.accumulate((len(t) + 1 for _, t in pairs[:-1]), initial=0))
    needles = tuple({nd for s in sigs for nd in s.needles})
    return sorted(
        {bisect.bisect_right(starts, end - len(nd) + 1) - 1 for end, nd in multifind.matches(text, needles)}
    )


def _xid_event(sig: EvidenceSignature, m: re.Match[str], line: str, origin: str, n: int) -> KernelEvent:
    gd = m.groupdict()
    detail: dict[str, object] = {"format": sig.id, "text": line.strip()[:400]}
    bus = None
    labels = gd.get("labels") or ""
    mu, mg = _UUID.search(labels), _LABEL_GPU.search(labels)
    uuid = gd.get("uuid") or (mu.group(1) if mu else None)
    if uuid:
        detail["uuid"] = uuid
    gpu = gd.get("gpu") or (mg.group(1) if mg else None)
    if gpu is not None:
        detail["gpu_index"] = int(gpu)
    mb = _LABEL_BUS.search(labels) or (_NET_BUS.search(line) if sig.net else None)
    if mb:
        bus = normalize_bus_id(mb.group(1))
    return KernelEvent(
        kind="xid",
        line=line.strip()[:MAX_LINE],
        xid=int(gd["xid"]),
        pci_bus_id=bus,
        message=line.strip()[:MAX_LINE],
        origin=origin,
        lineno=n,
        detail=detail,
    )


def _room_event(snap: Snapshot, sig: EvidenceSignature, m: re.Match[str], origin: str, n: int) -> bool:
    """A hardware event line outside a BMC dump (kernel EDAC, rasdaemon, a BMC message in JSON or a
    metric label) -> an event of ``snap.room``, judged with the SEL's events by the room checks (one
    definition of each failure: the room event classes).  False when no event class matches."""
    from gpuclinic.facts import room as R
    from gpuclinic.knowledge.room import classify_event

    gd = m.groupdict()
    msg = (gd.get("msg") or gd.get("msg2") or m.group(0)).strip()
    ec = classify_event(None, None, msg)
    if ec is None:
        return False
    room = snap.room if snap.room is not None else R.RoomFacts()
    snap.room = room
    mine = f"{origin}:"
    if any(msg in e.description for e in room.events if not e.id.startswith(mine)):
        return True  # a format reader already has this entry
    room.events.append(
        R.BmcEvent(id=f"{origin}:{n}", description=msg[:400], kind=ec.kind, source=sig.title)
    )
    room.events_read = True
    room.add_source(sig.title)
    return True


# explain's error signatures that another reader already reports with the doctor's own code
def _read_elsewhere(snap: Snapshot, code: str) -> bool:
    """Did the reader that gives ``code`` (a signature's ``covered_by``) read this input's line itself?"""
    if "|" in code:  # any of these readers
        return any(_read_elsewhere(snap, c) for c in code.split("|"))
    if code == "xid.":
        return any(ev.kind == "xid" for ev in snap.kernel_events)
    if code == "gpu.fallen_off_bus":  # the driver's "fallen off the bus" message, with or without an Xid
        return any(ev.kind == "fallen_off_bus" for ev in snap.kernel_events)
    if code == "driver.library_mismatch":
        return _mismatch_known(snap)
    if code == "gpu.missing":
        return snap.software is not None and bool(snap.software.nvidia_smi_errors)
    if code == "gpu.init_failed":  # the kernel-log reader's init_failed event, per GPU
        return any(ev.kind == "init_failed" for ev in snap.kernel_events)
    if code == "driver.kernel_module":  # a module-load problem it judges (probe not called: nouveau...)
        return any(ev.kind == "module" and ev.detail.get("severity") in ("critical", "warning")
                   for ev in snap.kernel_events)
    raise KeyError(f"covered_by {code!r}: no reader known for it")


def scan_error_signatures(snap: Snapshot, lines: Sequence[tuple[int, str]], origin: str) -> set[int]:
    """The ``explain`` error signatures (CUDA/NCCL/NVML/driver/OOM...) over prose lines -> signals."""
    if not lines:
        return set()
    text = "\n".join(t for _, t in lines)
    numbers = [n for n, _ in lines]
    claimed: set[int] = set()
    for sm in match_error_signatures(text):
        taken = covered_by().get(sm.id)
        if taken and _read_elsewhere(snap, taken):
            continue
        n = numbers[sm.line_no - 1] if 0 < sm.line_no <= len(numbers) else None
        if n is not None:
            claimed.add(n)
        snap.signals.append(
            Signal(
                code=f"error.{sm.id}",
                severity=sm.severity,
                family=CATEGORY_FAMILY.get(sm.category, "software"),
                title=sm.title,
                line=sm.matched_line,
                input=origin,
                lineno=n,
                pci_bus_id=normalize_bus_id(str(sm.data["pci_bus_id"]))
                if sm.data.get("pci_bus_id")
                else None,
                remedy=sm.fix,
                source=sm.source,
                data={
                    "signature": sm.id,
                    "category": sm.category,
                    "count": sm.count,
                    "hints": list(sm.hints),
                    **{k: sm.data[k] for k in ("gpu_index",) if k in sm.data},  # the GPU the error names
                },
            )
        )
    return claimed


def _mismatch_known(snap: Snapshot) -> bool:
    sw = snap.software
    if sw is not None and any("mismatch" in e.lower() for e in sw.nvidia_smi_errors):
        return True
    return any(ev.kind == "module" and ev.detail.get("module") == "api_mismatch" for ev in snap.kernel_events)
