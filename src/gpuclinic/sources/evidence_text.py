"""One text -> snapshot facts: the content-based reader shared by ``explain`` and every evidence file.

:mod:`gpuclinic.sources.evidence` finds and opens the files, directories, captures and standard input of
``doctor --from``; this module reads the text each one holds (``explain`` reads a paste with it
directly, without loading the file machinery).  A text is recognised by its *content*, never its name:
``nvidia-smi -q`` text or XML, the plain ``nvidia-smi`` table (and its error statements), kernel logs,
``nvidia-bug-report.log``, lspci output, BMC output or gpuclinic snapshot/report JSON; anything else
goes through the segmenting reader (:mod:`gpuclinic.sources.segments`), which reads every part it knows.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable

from gpuclinic import lazyre, textscan
from gpuclinic.bigtext import Text, as_str, head, tail
from gpuclinic.errors import InputError
from gpuclinic.facts.evidence import InputRecord, Segment
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id
from gpuclinic.facts.software import SoftwareFacts
from gpuclinic.sources import (
    bugreport,
    kernellog,
    lspci,
    segments,
    smi_csv,
    smi_nvlink,
    smi_table,
    smi_text,
    smi_topo,
    smi_xml,
    sniffgates,
)
from gpuclinic.sources.bmc import formats as bmc_formats
from gpuclinic.sources.merge import (
    _apply_nvlink,
    _merge_pci,
    _merge_snapshot,
    _Unrecognised,
    apply_dump,
    link_facts_from_pci,
)
from gpuclinic.sources.smi_common import SmiDump, iso_time, mark_lost, scan_error_lines

SAMPLE_BYTES = 256 * 1024
EXPECTED = (
    "nvidia-smi -q (text or XML), an nvidia-smi table, --query-gpu CSV, nvlink -s/-e or topo -m output, a "
    "kernel log, "
    "nvidia-bug-report.log(.gz), lspci output, ipmitool/FreeIPMI/Redfish/sensors output or a gpuclinic "
    "capture"
)


def new_snapshot() -> Snapshot:
    return Snapshot(origin="evidence", software=SoftwareFacts())


# ---------------------------------------------------------------------------------------------- detection

_QUOTE_RE = lazyre.compile(r"^[ \t]*(?:>[ \t]?)+", re.M)


def unquote(text: str) -> str:
    """A paste quoted in Markdown or e-mail ("> | NVIDIA-SMI 560.35 ...") without its quote markers.

    Only when most non-blank lines of the start are quoted, so a log line that happens to start with ">"
    is left alone.
    """
    if ">" not in text[:SAMPLE_BYTES]:  # no line is quoted
        return text
    lines = [ln for ln in text[:SAMPLE_BYTES].splitlines()[:200] if ln.strip()]
    if len(lines) < 2:
        return text
    quoted = sum(1 for ln in lines if ln.lstrip().startswith(">"))
    if quoted * 10 < len(lines) * 6:
        return text
    return _QUOTE_RE.sub("", text)


def _unquote_text(text: Text) -> Text:
    """:func:`unquote` of a text given whole or as a BigText (whose start decides, as for a string)."""
    if isinstance(text, str):
        return unquote(text)
    sample = text.head(SAMPLE_BYTES)
    return text if unquote(sample) is sample else unquote(as_str(text))


def _starts_json(text: Text) -> bool:
    """``text.lstrip("\\ufeff \\t\\r\\n").startswith("{")``, from its start when that is not all blank."""
    start = head(text, 4096)
    rest = start.lstrip("\ufeff \t\r\n")
    if rest or len(start) < 4096:
        return rest.startswith("{")
    return as_str(text).lstrip("\ufeff \t\r\n").startswith("{")


def _may(absent: frozenset[str]) -> Callable[[tuple[str, ...]], bool]:
    """Whether a sniffer needing one of ``gate`` (sniffgates; none: ungated) may claim a sample that lacks
    every literal in ``absent``."""
    return lambda gate: not gate or not absent.issuperset(gate)


def detect(sample: str, absent: frozenset[str] = frozenset()) -> str | None:
    """The kind of evidence ``sample`` (the start of a text) is, or None.

    Kinds: ``bugreport``, ``smi_xml``, ``smi_text``, ``smi_table``, ``smi_csv``, ``kernel_log``, ``lspci``,
    ``json``.  ``absent``: as for :func:`detect_structured`.
    """

    may = _may(absent)
    sample = unquote(sample)
    head = sample.lstrip("\ufeff \t\r\n")
    if may(sniffgates.BUGREPORT) and bugreport.looks_like(sample):
        return "bugreport"
    if head.startswith("{"):
        return bmc_formats.detect(sample, absent) or "json"  # a Redfish document or sensors -j is JSON too
    if may(sniffgates.SMI_XML) and smi_xml.looks_like(sample):
        return "smi_xml"
    if may(sniffgates.SMI_TEXT) and smi_text.looks_like(sample):
        return "smi_text"
    if smi_table.has_table(sample):
        return "smi_table"
    if smi_csv.looks_like(sample):
        return "smi_csv"
    if may(sniffgates.SMI_NVLINK) and smi_nvlink.looks_like(sample):
        return "smi_nvlink"
    if may(sniffgates.SMI_TOPO) and smi_topo.looks_like(sample):
        return "smi_topo"
    if _is_kernel_log(sample):
        return "kernel_log"
    # after the kernel log: a syslog may quote "No devices were found"
    if may(sniffgates.SMI_ERRORS) and smi_table.has_errors(sample):
        return "smi_table"
    if may(sniffgates.LSPCI) and lspci.looks_like(sample):
        return "lspci"
    return bmc_formats.detect(sample, absent)  # ipmitool, FreeIPMI, sensors (room:<format>)


def detect_structured(sample: str, absent: frozenset[str] = frozenset()) -> str | None:
    """``detect(sample)`` when that is a structured kind (what labels a run of prose lines), else None.

    The same sniffers in the same order, but a kernel log is not a structured kind: the sniffers after it
    are asked first, and the kernel-log sniff (a regex per line, the dearest) only when one of them claims
    the sample, to tell whether ``detect`` would have stopped at it.  A run of training-log prose is
    ruled out without it.  ``absent``: literals of ``sniffgates`` known not to be in ``sample`` (the
    segmenting reader's whole-text search); a sniffer that needs only those is not asked."""

    may = _may(absent)
    sample = unquote(sample)  # (cutting quote markers adds no literal: ``absent`` still holds)
    if may(sniffgates.BUGREPORT) and bugreport.looks_like(sample):
        return None
    if sample.lstrip("\ufeff \t\r\n").startswith("{"):
        return bmc_formats.detect(sample, absent)  # (else "json")
    for kind, looks, gate in _STRUCTURED_FIRST:
        if may(gate) and looks(sample):
            return kind
    later = (
        "smi_table"
        if may(sniffgates.SMI_ERRORS) and smi_table.has_errors(sample)
        else "lspci"
        if may(sniffgates.LSPCI) and lspci.looks_like(sample)
        else None
    ) or bmc_formats.detect(sample, absent)
    return None if later is None or _is_kernel_log(sample) else later


_STRUCTURED_FIRST: tuple[tuple[str, Callable[[str], bool], tuple[str, ...]], ...] = (
    ("smi_xml", smi_xml.looks_like, sniffgates.SMI_XML),
    ("smi_text", smi_text.looks_like, sniffgates.SMI_TEXT),
    ("smi_table", smi_table.has_table, ()),
    ("smi_csv", smi_csv.looks_like, ()),
    ("smi_nvlink", smi_nvlink.looks_like, sniffgates.SMI_NVLINK),
    ("smi_topo", smi_topo.looks_like, sniffgates.SMI_TOPO),
)


def _is_kernel_log(sample: str) -> bool:
    return kernellog.looks_like_kernel_log(sample)


# ---------------------------------------------------------------------------------------------- text


def _apply_topo(snap: Snapshot, text: str, origin: str) -> None:
    topo = smi_topo.parse(text)
    if not topo.devices:
        raise _Unrecognised("nvidia-smi topo -m matrix lists no GPU")
    snap.notes.extend(f"{origin}: {n}" for n in topo.notes())


def _apply_lspci(snap: Snapshot, text: str, origin: str) -> None:
    devs = lspci.parse(text.splitlines())
    if not devs:
        raise _Unrecognised("lspci output lists no NVIDIA device")
    _merge_pci(snap, devs)
    if "Capabilities: <access denied>" in text:  # lspci without root: no LnkSta/DevSta/AER lines in it
        from gpuclinic.sources.bmc.salvage import note_partial

        note_partial(snap, origin, "lspci ran without root (`Capabilities: <access denied>`): the PCIe link "
                     "speed/width and error status are not in it; rerun it with sudo")


def _apply_kernel_log(snap: Snapshot, text: str, origin: str) -> None:
    snap.kernel_events.extend(kernellog.parse_lines(text.splitlines(), origin=origin))
    snap.kernel_log_read = True
    if origin not in snap.kernel_log_sources:
        snap.kernel_log_sources.append(origin)


def _apply_bugreport_text(snap: Snapshot, text: str, origin: str) -> None:
    rep = bugreport.parse_stream(io.StringIO(text), origin)
    _apply_bugreport(snap, rep)
    snap.input_records.append(bugreport_record(rep))


def _apply_room(snap: Snapshot, kind: str, text: str, origin: str) -> None:
    try:
        bmc_formats.apply(snap, kind, text, origin)
    except ValueError as e:
        raise _Unrecognised(str(e)) from None


# kind -> reader of a whole text of that kind (the parsers are looked up when called)
_TEXT_READERS: dict[str, Callable[[Snapshot, str, str], None]] = {
    "smi_xml": lambda snap, text, origin: apply_dump(snap, smi_xml.parse(text, origin), origin),
    "smi_text": lambda snap, text, origin: apply_dump(snap, smi_text.parse(text), origin),
    "smi_table": lambda snap, text, origin: apply_dump(snap, smi_table.parse(text), origin),
    "smi_csv": lambda snap, text, origin: apply_dump(snap, smi_csv.parse(text), origin),
    "smi_nvlink": lambda snap, text, origin: _apply_nvlink(snap, smi_nvlink.parse(text), origin),
    "smi_topo": _apply_topo,
    "lspci": _apply_lspci,
    "kernel_log": _apply_kernel_log,
    "bugreport": _apply_bugreport_text,
    "json": lambda snap, text, origin: _apply_json(snap, text, origin),
}
_SECONDARY = ("smi_text", "smi_table", "smi_csv", "kernel_log", "lspci")  # mixtures: read the other parts too


def _apply_text(snap: Snapshot, kind: str, text: str, origin: str) -> None:
    text = unquote(text)
    if kind.startswith(bmc_formats.PREFIX):
        _apply_room(snap, kind, text, origin)
        return
    reader = _TEXT_READERS.get(kind)
    if reader is None:  # pragma: no cover - detect() returns only the kinds above
        raise _Unrecognised(kind)
    reader(snap, text, origin)
    if kind in _SECONDARY:
        _apply_secondary(snap, kind, text, origin)


def _apply_secondary(snap: Snapshot, kind: str, text: str, origin: str) -> None:
    """People paste mixtures (an nvidia-smi table followed by dmesg lines): read every part we know."""
    lines = text.splitlines()
    kl = kernellog
    if kind != "kernel_log" and ("NVRM" in text or "pcieport" in text or "nvswitch" in text):
        events = list(kl.parse_lines(lines, origin=origin))
        if events:
            snap.kernel_events.extend(events)
            snap.kernel_log_read = True
            if origin not in snap.kernel_log_sources:
                snap.kernel_log_sources.append(origin)
    if kind != "smi_table" and smi_table.has_table(text):
        apply_dump(snap, smi_table.parse(lines), origin)
    if kind not in ("smi_text", "smi_xml") and smi_text.MARKER in text:
        apply_dump(snap, smi_text.parse(lines), origin)
    if kind == "kernel_log":
        errors, lost = scan_error_lines(lines)
        if errors:
            dump = SmiDump(kind="smi_table", errors=errors)
            mark_lost(dump.gpus, lost)
            apply_dump(snap, dump, origin)


def _apply_json(snap: Snapshot, text: str, origin: str) -> None:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise _Unrecognised(f"not valid JSON ({e.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise _Unrecognised("JSON is not a gpuclinic snapshot or report")
    schema = str(data.get("schema", ""))
    if schema.startswith("gpuclinic.report") and isinstance(data.get("facts"), dict):
        data = data["facts"]
        schema = str(data.get("schema", ""))
    if not schema.startswith("gpuclinic.snapshot"):
        raise _Unrecognised("JSON is not a gpuclinic snapshot or report (no gpuclinic schema)")
    try:
        other = Snapshot.from_dict(data)
    except (TypeError, ValueError, KeyError) as e:
        raise _Unrecognised(f"gpuclinic snapshot JSON could not be read ({e})") from None
    _merge_snapshot(snap, other, origin)


def _apply_bugreport(snap: Snapshot, rep: bugreport.BugReport) -> None:
    for d in rep.smi:
        apply_dump(snap, d, rep.path)
    if rep.driver_version:
        snap.driver_version = snap.driver_version or rep.driver_version
        if snap.software is not None:
            snap.software.driver_version = snap.software.driver_version or rep.driver_version
    if rep.hostname and not snap.hostname:
        snap.hostname = rep.hostname
    if rep.date and not snap.taken_at:
        snap.taken_at = iso_time(rep.date)
    _merge_pci(snap, rep.pci_devices)
    if not snap.gpus and rep.proc_gpus:  # no nvidia-smi output: the GPUs the driver itself listed
        for i, pg in enumerate(rep.proc_gpus):
            bus = pg.get("bus")
            snap.gpus.append(GpuFacts(index=i, name=pg["name"], uuid=pg.get("uuid") or None,
                                      pci_bus_id=normalize_bus_id(bus) if bus else None))
        snap.notes.append(f"{rep.path}: {len(rep.proc_gpus)} GPU(s) known from /proc/driver/nvidia only (no "
                          "nvidia-smi readings in the report)")
    snap.kernel_events.extend(rep.kernel_events)
    if rep.kernel_sections:
        snap.kernel_log_read = True
        for s in rep.kernel_sections:
            src = f"{rep.path} [{s[:80]}]"
            if src not in snap.kernel_log_sources:
                snap.kernel_log_sources.append(src)
    for n in rep.notes:
        snap.notes.append(f"{rep.path}: {n}")
    if rep.service_logs:  # Fabric Manager / IMEX / persistenced lines meet the evidence signatures
        from gpuclinic.sources import signals

        for title, numbered in rep.service_logs:
            signals.scan_lines(snap, numbered, f"{rep.path} [{title[:80]}]")
    _bugreport_gaps(snap, rep)


def _bugreport_gaps(snap: Snapshot, rep: bugreport.BugReport) -> None:
    """What the report does not hold is said, never taken as healthy: a part the script could not collect
    is a "could not check", a report without its epilogue (cut off, or the script hung) is read in part."""
    from gpuclinic.sources.bmc.salvage import note_partial

    for what, why in rep.not_collected:
        snap.skip(f"{what} (nvidia-bug-report)", why)
    missing = [w for w, _ in rep.not_collected if w in ("nvidia-smi", "kernel log")]
    if not rep.smi and "nvidia-smi" in missing:
        why = next(w for k, w in rep.not_collected if k == "nvidia-smi")
        note_partial(snap, rep.path, f"the report has no nvidia-smi output ({why}): GPU state not judged")
    if not (rep.smi or rep.kernel_sections or rep.pci_devices or rep.driver_version):
        snap.notes.append(
            f"{rep.path}: bug report had no nvidia-smi, kernel-log, lspci or driver-version section"
        )
    if not rep.complete:
        read = ", ".join(
            k for k, ok in (("nvidia-smi", rep.smi), ("kernel log", rep.kernel_sections),
                            ("lspci", rep.pci_devices), ("driver version", rep.driver_version)) if ok
        ) or "none of nvidia-smi, kernel log, lspci, driver version"
        note_partial(snap, rep.path, "the report ends before its epilogue (\"End of NVIDIA bug report log "
                     f"file.\"): cut off, or the script hung; read: {read}")


def snapshot_from_text(text: Text, origin: str = "<stdin>", *, error_signatures: bool = False) -> Snapshot:
    """Build a snapshot from pasted text (``explain``, which runs the error signatures itself, so they are
    off by default here).  Raises :class:`InputError` if nothing in it could be read."""
    snap = new_snapshot()
    add_text(snap, text, origin, error_signatures=error_signatures)
    snap.inputs.append(origin)
    finish(snap)
    link_facts_from_pci(snap)
    return snap


def _whole_kind(head: str) -> str | None:
    """Inputs read as a whole, never segmented: a bug report (sections) and gpuclinic JSON."""
    if bugreport.looks_like(head):
        return "bugreport"
    h = head.lstrip("\ufeff \t\r\n")
    if h.startswith("{") and '"gpuclinic.' in head:
        return "json"
    return None


def add_text(
    snap: Snapshot, text: Text, origin: str, *, error_signatures: bool = True, year: int | None = None
) -> str:
    """Add one text input to ``snap`` through the segmenting reader; returns its kind.  (A big input may
    come as a :class:`~gpuclinic.bigtext.BigText`: split into lines, it is never one string unless a
    format reads it whole.)"""
    text = _unquote_text(text)
    kind = _whole_kind(head(text, SAMPLE_BYTES))
    if kind is None and _starts_json(text) and '"gpuclinic.' in tail(text, 4096):
        kind = "json"  # a snapshot writes its schema key last
    if kind is None and _starts_json(text):
        kind = bmc_formats.detect(
            head(text, SAMPLE_BYTES)
        )  # a Redfish document or sensors -j: one JSON, read whole
    if kind is not None:
        textscan.cancel_scans()  # (scans started on a big input's bytes: this kind is read whole, not split)
        whole = as_str(text)
        try:
            _apply_text(snap, kind, whole, origin)
        except _Unrecognised as e:
            raise InputError(f"{origin}: {e}") from None
        if kind == "json" or kind.startswith(bmc_formats.PREFIX):  # a bug report records its sections itself
            snap.input_records.append(
                InputRecord(input=origin, kind=kind, lines=whole.count("\n") + 1, readers=[kind])
            )
        return kind
    ahead = len(text) >= segments.PREFETCH_CHARS
    if ahead:  # grep scans the text while it is split into lines
        segments.prefetch(text)
    try:
        rec = segments.read_lines(
            snap,
            textscan.splitlines(text),
            origin,
            detect=lambda t, absent: detect(t[:SAMPLE_BYTES], absent),
            label=lambda t, absent: detect_structured(t[:SAMPLE_BYTES], absent),
            apply_rest=_apply_text,
            error_signatures=error_signatures,
            year=year,
            text=text,
            sample=SAMPLE_BYTES,
        )
    except ValueError:
        raise InputError(f"{origin}: not recognised; expected {EXPECTED}") from None
    finally:
        textscan.cancel_scans()  # (also scans started on the bytes of a text read some other way)
    snap.input_records.append(rec)
    return rec.kind


def finish(snap: Snapshot) -> None:
    """Facts that follow from everything read: driver versions from kernel lines, GPUs from lspci."""
    sw = snap.software or SoftwareFacts()
    snap.software = sw
    for ev in snap.kernel_events:
        if ev.kind != "module":
            continue
        d = ev.detail
        if d.get("driver_version"):
            snap.driver_version = snap.driver_version or str(d["driver_version"])
            sw.proc_driver_version = sw.proc_driver_version or str(d["driver_version"])
        if d.get("module") == "api_mismatch":
            if d.get("kernel_version"):
                sw.proc_driver_version = sw.proc_driver_version or str(d["kernel_version"])
            client = d.get("client_version")
            if client and client not in sw.user_lib_versions:
                sw.user_lib_versions.append(str(client))
    if snap.attached_gpus and 0 < len(snap.gpus) < snap.attached_gpus:
        # "Attached GPUs : 8" above one pasted GPU block: the other GPUs exist, their facts were not pasted
        missing = snap.attached_gpus - len(snap.gpus)
        for _ in range(missing):
            idx = max(g.index for g in snap.gpus) + 1
            snap.gpus.append(
                GpuFacts(
                    index=idx,
                    unreadable={
                        "evidence": f"not in the pasted output (nvidia-smi reported {snap.attached_gpus} "
                                    "attached GPUs)"
                    },
                )
            )
    if not snap.gpus:
        for i, dev in enumerate(x for x in snap.pci_devices if x.is_gpu):
            snap.gpus.append(GpuFacts(index=i, pci_bus_id=dev.bus_id))
        if snap.gpus:
            snap.notes.append(
                f"{len(snap.gpus)} GPU(s) known from lspci only (no nvidia-smi output in the evidence)"
            )


def bugreport_record(rep: bugreport.BugReport) -> InputRecord:
    """A bug report's sections as segments: which were read (kernel log, nvidia-smi, lspci, driver
    version)."""
    segs = []
    for title in rep.sections:
        low = title.lower()
        kind = (
            "kernel_log"
            if title in rep.kernel_sections
            else "nvidia-smi"
            if "nvidia-smi" in low and not title.startswith("Skipping")
            else "lspci"
            if "lspci" in low and not title.startswith("Skipping")
            else bugreport.section_kind(title)
        )
        segs.append(Segment(kind="bugreport_section", title=title, readers=[] if kind == "other" else [kind]))
    return InputRecord(
        input=rep.path,
        kind="bugreport",
        segments=segs,
        readers=["bugreport"],
        unclaimed=sum(1 for sg in segs if not sg.readers),
    )
