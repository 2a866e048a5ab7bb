"""Saved evidence -> snapshot, for ``doctor --from`` and ``explain``.

Every input is recognised by its *content*, never its name: ``nvidia-smi -q`` text or XML, the plain
``nvidia-smi`` table (and its error statements), kernel logs, ``nvidia-bug-report.log(.gz)``, lspci
output, a gpuclinic capture bundle (tar.gz) or snapshot/report JSON.  Several inputs merge into one
snapshot (GPUs matched by UUID, then PCI bus id), so a customer's ``nvidia-smi -q`` and ``dmesg``
together give one diagnosis.  An input we cannot use is a one-line :class:`InputError`, unless other
inputs were usable: then it is recorded in ``snap.skipped`` and the rest is diagnosed.
"""

from __future__ import annotations

import datetime
import gzip
import io
import json
import os
import re
import sys
from collections.abc import Callable, Sequence

from gpuclinic.errors import InputError
from gpuclinic.facts.evidence import InputRecord, Segment
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.facts.software import SoftwareFacts
from gpuclinic.sources import (
    bugreport,
    kernellog,
    lspci,
    segments,
    signals,
    smi_csv,
    smi_nvlink,
    smi_table,
    smi_text,
    smi_topo,
    smi_xml,
)
from gpuclinic.sources.bmc import formats as bmc_formats
from gpuclinic.sources.kernellog.grepscan import iter_keyword_lines
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
MAX_DUMP_BYTES = 64 * 1024 * 1024  # nvidia-smi outputs are KBs; a 64 MB "dump" is something else
MAX_JSON_BYTES = 256 * 1024 * 1024
MAX_BUNDLE_MEMBER = 256 * 1024 * 1024
MAX_FILES = 10_000
EXPECTED = (
    "nvidia-smi -q (text or XML), an nvidia-smi table, --query-gpu CSV, nvlink -s/-e or topo -m output, a "
    "kernel log, "
    "nvidia-bug-report.log(.gz), lspci output, ipmitool/FreeIPMI/Redfish/sensors output or a gpuclinic "
    "capture"
)


def new_snapshot() -> Snapshot:
    return Snapshot(origin="evidence", software=SoftwareFacts())


# ---------------------------------------------------------------------------------------------- detection

_QUOTE_RE = re.compile(r"^[ \t]*(?:>[ \t]?)+", re.M)


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


def detect(sample: str) -> str | None:
    """The kind of evidence ``sample`` (the start of a text) is, or None.

    Kinds: ``bugreport``, ``smi_xml``, ``smi_text``, ``smi_table``, ``smi_csv``, ``kernel_log``, ``lspci``,
    ``json``.
    """
    sample = unquote(sample)
    head = sample.lstrip("\ufeff \t\r\n")
    if bugreport.looks_like(sample):
        return "bugreport"
    if head.startswith("{"):
        return bmc_formats.detect(sample) or "json"  # a Redfish document or sensors -j is JSON too
    if smi_xml.looks_like(sample):
        return "smi_xml"
    if smi_text.looks_like(sample):
        return "smi_text"
    if smi_table.has_table(sample):
        return "smi_table"
    if smi_csv.looks_like(sample):
        return "smi_csv"
    if smi_nvlink.looks_like(sample):
        return "smi_nvlink"
    if smi_topo.looks_like(sample):
        return "smi_topo"
    if _is_kernel_log(sample):
        return "kernel_log"
    if smi_table.has_errors(sample):  # after the kernel log: a syslog may quote "No devices were found"
        return "smi_table"
    if lspci.looks_like(sample):
        return "lspci"
    return bmc_formats.detect(sample)  # ipmitool, FreeIPMI, sensors (room:<format>)


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
    snap.kernel_events.extend(rep.kernel_events)
    if rep.kernel_sections:
        snap.kernel_log_read = True
        for s in rep.kernel_sections:
            src = f"{rep.path} [{s[:80]}]"
            if src not in snap.kernel_log_sources:
                snap.kernel_log_sources.append(src)
    for n in rep.notes:
        snap.notes.append(f"{rep.path}: {n}")
    if not (rep.smi or rep.kernel_sections or rep.pci_devices or rep.driver_version):
        snap.notes.append(
            f"{rep.path}: bug report had no nvidia-smi, kernel-log, lspci or driver-version section"
        )


def snapshot_from_text(text: str, origin: str = "<stdin>", *, error_signatures: bool = False) -> Snapshot:
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
    snap: Snapshot, text: str, origin: str, *, error_signatures: bool = True, year: int | None = None
) -> str:
    """Add one text input to ``snap`` through the segmenting reader; returns its kind."""
    text = unquote(text)
    kind = _whole_kind(text[:SAMPLE_BYTES])
    if kind is None and text.lstrip("\ufeff \t\r\n").startswith("{") and '"gpuclinic.' in text[-4096:]:
        kind = "json"  # a snapshot writes its schema key last
    if kind is None and text.lstrip("\ufeff \t\r\n").startswith("{"):
        kind = bmc_formats.detect(
            text[:SAMPLE_BYTES]
        )  # a Redfish document or sensors -j: one JSON, read whole
    if kind is not None:
        try:
            _apply_text(snap, kind, text, origin)
        except _Unrecognised as e:
            raise InputError(f"{origin}: {e}") from None
        if kind == "json" or kind.startswith(bmc_formats.PREFIX):  # a bug report records its sections itself
            snap.input_records.append(
                InputRecord(input=origin, kind=kind, lines=text.count("\n") + 1, readers=[kind])
            )
        return kind
    try:
        rec = segments.read_lines(
            snap,
            text.splitlines(),
            origin,
            detect=lambda t: detect(t[:SAMPLE_BYTES]),
            apply_rest=_apply_text,
            error_signatures=error_signatures,
            year=year,
            text=text,
            sample=SAMPLE_BYTES,
        )
    except ValueError:
        raise InputError(f"{origin}: not recognised; expected {EXPECTED}") from None
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


# ---------------------------------------------------------------------------------------------- files


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Files named, with directories expanded to the files below them (sorted, hidden ones skipped)."""
    out: list[str] = []
    for p in paths:
        if p == "-":
            out.append(p)  # standard input
        elif os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                if is_capture_dir(root):
                    out.append(root)  # an extracted capture is one input
                    dirs[:] = []
                    continue
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if not f.startswith("."):
                        out.append(os.path.join(root, f))
                        if len(out) > MAX_FILES:
                            raise InputError(
                                f"{p}: more than {MAX_FILES} files; point --from at the evidence files"
                            )
        else:
            out.append(p)
    return out


def _read_head(path: str) -> tuple[bytes, bool]:
    """First bytes of the (decompressed) file and whether it is gzip-compressed."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic == b"\x1f\x8b":
            try:
                with gzip.GzipFile(fileobj=fh) as gz:
                    return gz.read(SAMPLE_BYTES), True
            except (OSError, EOFError) as e:
                raise _Unrecognised(f"gzip data is corrupt ({e})") from None
        return fh.read(SAMPLE_BYTES), False


def utf16_encoding(head: bytes) -> str | None:
    """ "utf-16" when the bytes are UTF-16 text (a BOM, or NULs in every other byte of ASCII), else None."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    probe = head[:512]
    if len(probe) >= 16:
        odd_nuls = probe[1::2].count(0)
        even_nuls = probe[0::2].count(0)
        if odd_nuls > len(probe) * 0.4 and even_nuls == 0:
            return "utf-16-le"
        if even_nuls > len(probe) * 0.4 and odd_nuls == 0:
            return "utf-16-be"
    return None


def _read_all(path: str, limit: int, encoding: str) -> str:
    with open(path, "rb") as fh:
        data = fh.read(limit * 2 + 2)
    if len(data) > limit * 2:
        raise _Unrecognised(f"UTF-16 text larger than {limit // (1024 * 1024)} MB")
    return data.decode(encoding, errors="replace").lstrip("\ufeff")


def _decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _looks_binary(b: bytes) -> bool:
    if not b:
        return False
    if b"\x00" in b[:8192]:
        return True
    text = _decode(b[:8192])
    bad = text.count("\ufffd")
    return bad > max(8, len(text) // 20)


def add_file(snap: Snapshot, path: str) -> str:
    """Add one file to ``snap``; returns its kind.  Raises ``_Unrecognised``/``OSError``."""
    if os.path.isdir(path) and is_capture_dir(path):
        from gpuclinic.sources.bundle import apply_bundle_dir

        apply_bundle_dir(snap, path)
        snap.input_records.append(InputRecord(input=path, kind="capture", readers=["capture"]))
        return "capture"
    head, gz = _read_head(path)
    if _is_tar(path, head, gz):
        from gpuclinic.sources.bundle import apply_bundle

        apply_bundle(snap, path)
        snap.input_records.append(InputRecord(input=path, kind="capture", readers=["capture"]))
        return "capture"
    if not head.strip():
        raise _Unrecognised("file is empty")
    enc = utf16_encoding(head)
    if enc is not None:  # `nvidia-smi -q > out.txt` in Windows PowerShell writes UTF-16
        return _add_text_or_unrecognised(snap, _read_all(path, MAX_DUMP_BYTES, enc), path)
    if _looks_binary(head):
        raise _Unrecognised("binary data")
    sample = _decode(head)
    kind = detect(sample)
    if kind == "bugreport":
        rep = bugreport.parse_path(path)
        _apply_bugreport(snap, rep)
        snap.input_records.append(bugreport_record(rep))
        return kind
    limit = MAX_JSON_BYTES if kind == "json" else MAX_DUMP_BYTES
    big = kind == "kernel_log" and unquote(sample) is sample
    with bugreport.open_text(path) as fh:
        text = fh.read((SEGMENT_LIMIT if big else limit) + 1)
    if big and len(text) > SEGMENT_LIMIT:
        # a large log (plain or compressed): stream it through the kernel-log scan (memmem, flat memory)
        snap.kernel_events.extend(kernellog.scan_path(path))
        snap.kernel_log_read = True
        if path not in snap.kernel_log_sources:
            snap.kernel_log_sources.append(path)
        readers = ["kernellog.scan"]
        if _stream_signatures(snap, path):
            readers.append("fault signatures")
        snap.input_records.append(
            InputRecord(
                input=path,
                kind="kernel_log",
                readers=readers,
                streamed=True,
                segments=[Segment(kind="kernel_log")],
            )
        )
        return "kernel_log"
    if len(text) > limit:
        raise _Unrecognised(
            f"starts like {(kind or 'text').replace('_', ' ')} but is larger than {limit // (1024 * 1024)} MB"
        )
    return _add_text_or_unrecognised(snap, text, path, year=_mtime_year(path))


SEGMENT_LIMIT = 32 * 1024 * 1024  # larger kernel logs are streamed, not segmented


def _stream_signatures(snap: Snapshot, path: str) -> bool:
    """A streamed log still meets every fault signature: the lines holding any signature's literal needle
    (found at grep speed) go through the evidence and error signatures, with their line numbers."""
    numbered = list(iter_keyword_lines(path, signals.signature_needles()))
    if not numbered:
        return False
    # Xid lines the kernel scan already turned into events must not count twice
    parsed = {
        n
        for n, ln in numbered
        if "xid" in ln.lower() and any(ev.kind in ("xid", "sxid") for ev in kernellog.parse_lines([ln]))
    }
    got = signals.scan_lines(snap, numbered, path, parsed_xid_lines=parsed)
    got |= signals.scan_error_signatures(snap, numbered, path)
    return bool(got)


def _mtime_year(path: str) -> int | None:
    try:
        return datetime.datetime.fromtimestamp(os.stat(path).st_mtime).year
    except (OSError, ValueError, OverflowError):
        return None


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
            if "nvidia-smi" in low
            else "lspci"
            if "lspci" in low
            else "driver_version"
            if "/proc/driver/nvidia/version" in title
            else "other"
        )
        segs.append(Segment(kind="bugreport_section", title=title, readers=[] if kind == "other" else [kind]))
    return InputRecord(
        input=rep.path,
        kind="bugreport",
        segments=segs,
        readers=["bugreport"],
        unclaimed=sum(1 for sg in segs if not sg.readers),
    )


def _add_text_or_unrecognised(snap: Snapshot, text: str, origin: str, *, year: int | None = None) -> str:
    try:
        return add_text(snap, text, origin, year=year)
    except InputError as e:
        raise _Unrecognised(str(e).removeprefix(f"{origin}: ").split(";")[0]) from None


def _add_stdin(snap: Snapshot) -> str:
    """``--from -``: read piped output, e.g. ``nvidia-smi -q | gpuclinic doctor --from -``."""
    data = sys.stdin.buffer.read(MAX_DUMP_BYTES + 1)
    if len(data) > MAX_DUMP_BYTES:
        raise _Unrecognised(f"more than {MAX_DUMP_BYTES // (1024 * 1024)} MB on standard input")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)[:MAX_DUMP_BYTES]
        except (OSError, EOFError) as e:
            raise _Unrecognised(f"gzip data is corrupt ({e})") from None
    if not data.strip():
        raise _Unrecognised("nothing on standard input")
    enc = utf16_encoding(data[:SAMPLE_BYTES])
    text = data.decode(enc, errors="replace").lstrip("\ufeff") if enc else _decode(data)
    if enc is None and _looks_binary(data[:SAMPLE_BYTES]):
        raise _Unrecognised("binary data")
    return _add_text_or_unrecognised(snap, text, "<stdin>")


def _is_tar(path: str, head: bytes, gz: bool) -> bool:
    # ustar magic at offset 257 of the (decompressed) first block
    return len(head) >= 262 and head[257:262] == b"ustar"


def is_capture_dir(path: str) -> bool:
    """True for an extracted capture bundle (snapshot.json + a gpuclinic.capture manifest.json)."""
    man = os.path.join(path, "manifest.json")
    if not (os.path.isfile(man) and os.path.isfile(os.path.join(path, "snapshot.json"))):
        return False
    try:
        with open(man, encoding="utf-8", errors="replace") as fh:
            return '"gpuclinic.capture/' in fh.read(4096)
    except OSError:
        return False


def _dedupe_kernel_events(snap: Snapshot) -> None:
    """The same stamped log line read twice (a dmesg file and the bug report holding it) counts once."""
    seen: set[tuple[str, str, str | None]] = set()
    out = []
    for ev in snap.kernel_events:
        if ev.time is None and ev.uptime_s is None:
            out.append(ev)  # unstamped lines may legitimately repeat
            continue
        key = (ev.kind, ev.line.strip(), ev.pci_bus_id)
        if key in seen:
            continue
        seen.add(key)
        out.append(ev)
    snap.kernel_events = out


def _names_gpus_by_index_only(path: str) -> bool:
    """True for ``nvidia-smi nvlink`` output: it joins other GPUs by index, so it is read after them."""
    if path == "-" or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return smi_nvlink.looks_like(unquote(_decode(head)))


def load_evidence(paths: Sequence[str]) -> Snapshot:
    """Build one snapshot from saved evidence files and directories (``doctor --from``)."""
    if not paths:
        raise InputError("no evidence given")
    files = expand_paths(paths)
    if not files:
        raise InputError(f"{', '.join(paths)}: no files found")
    files.sort(key=_names_gpus_by_index_only)  # stable: everything else keeps its order
    snap = new_snapshot()
    failures: list[str] = []
    for name in files:
        path = "<stdin>" if name == "-" else name
        try:
            kind = _add_stdin(snap) if name == "-" else add_file(snap, path)
        except FileNotFoundError:
            failures.append(f"{path}: no such file")
            continue
        except IsADirectoryError:
            continue
        except PermissionError:
            failures.append(f"{path}: permission denied")
            continue
        except _Unrecognised as e:
            failures.append(f"{path}: {e}; expected {EXPECTED}")
            continue
        except InputError as e:
            failures.append(str(e))
            continue
        except OSError as e:
            failures.append(f"{path}: could not read ({e.strerror or e})")
            continue
        snap.inputs.append(path)
        snap.notes.append(f"input {path}: {kind}")
    if not snap.inputs:
        raise InputError(
            failures[0]
            if len(failures) == 1
            else f"{failures[0]} (and {len(failures) - 1} more unusable input(s))"
        )
    for f in failures:
        what, _, why = f.partition(": ")
        snap.skip(f"evidence {what}", why or f)
    _dedupe_kernel_events(snap)
    finish(snap)
    link_facts_from_pci(snap)
    skipped = {s.what for s in snap.skipped}
    if snap.nvml_available is None and not snap.gpus and "GPUs through NVML" not in skipped:
        snap.skip("GPUs through NVML", "the evidence has no nvidia-smi output or capture")
    if not snap.kernel_log_read and "the kernel log" not in skipped:
        snap.skip("the kernel log", "the evidence has no kernel log")
    snap.origin = "evidence"
    return snap
