"""Reader for ``nvidia-bug-report.log`` and ``nvidia-bug-report.log.gz``.

A bug report is a concatenation of sections separated by lines of underscores; each starts with
a title such as ``*** /proc/driver/nvidia/version``, ``*** /var/log/kern.log``, ``/usr/bin/nvidia-smi
--query`` or ``*** /usr/bin/lspci -nnDvvvxxxx``.  Reports reach hundreds of MB, so the file is
streamed: kernel-log sections flow line by line into the kernel-log parser and only the small
sections we parse as a whole (nvidia-smi, lspci, driver version) are held, each with a size cap.

Every generation of the script is read (its layouts, from nvidia-bug-report.sh itself): titles with
``*** `` (2010 on) or without (2009: ``/etc/issue``, ``/var/log/nvidia-installer.log does not exist``);
the kernel log as ``dmesg:``, as ``*** /var/log/kern.log`` / ``messages`` and as the grep'd NVRM lines of
``Scanning kernel log files for NVIDIA kernel messages:`` (``  /var/log/kern.log:`` and ``  journalctl -b
-1:`` sub-headers, earlier boots included); one nvidia-smi section holding several commands (``--query``,
``--query --unit``, ``nvlink --errorcounters`` ...), or nvidia-smi's own failure ("NVIDIA-SMI has failed
..."); and what the script could not collect (``Skipping nvidia-smi output (nvidia-smi not found)``, the
2025 ``Skipping: X`` / ``Error: X`` sections, ``--safe-mode``, ``X does not exist``), which is reported as
not checked.  A paste may start with prose and a Markdown fence before the prologue.
"""

from __future__ import annotations

import io
import re
from collections import deque
from collections.abc import Iterator
from typing import IO

from gpuclinic import lazyre
from gpuclinic.facts.gpu import PciDevice
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.record import field, record
from gpuclinic.sources import lspci, smi_nvlink, smi_table, smi_text, smi_xml, sniffgates
from gpuclinic.sources.kernellog import parse_lines
from gpuclinic.sources.smi_common import SmiDump, mark_lost, scan_error_lines

MARKER = "nvidia-bug-report.sh"
MAX_SECTION_LINES = 200_000  # nvidia-smi/lspci sections are far smaller; more is not what we think it is
MAX_LINE = 64 * 1024
# Kernel-log sections.  journalctl sections count only when they select kernel messages: bug reports
# also carry `journalctl -b -0 _COMM=Xorg` and similar, which are not the kernel log.
_KERNEL_TITLE_RE = lazyre.compile(
    r"kern\.log|kernel\.log|/var/log/messages|/var/log/syslog|\bdmesg\b|^Scanning kernel log files"
    r"|journalctl\b.*(?:\s-k\b|--dmesg|_TRANSPORT=kernel)",
    re.I,
)
# /proc/driver/nvidia/version, or a module instance's /proc/driver/nvidia/<n|.>/version
_VERSION_TITLE_RE = lazyre.compile(r"/proc/driver/nvidia/(?:[^/\s]+/)?version\b")
# a command echoed inside the nvidia-smi section (the script runs several there, one after another)
_SMI_COMMAND_RE = lazyre.compile(r"^(?:\S*/)?nvidia-smi(?:\s+\S.*)?$")
_MISSING_TAIL = (" does not exist", " is not readable")
# NVIDIA service logs the evidence signatures read (Fabric Manager, IMEX, persistenced: files, status)
_SERVICE_TITLE_RE = lazyre.compile(r"fabricmanager|nvidia-imex|persistenced", re.I)
# what the driver itself lists per GPU: /proc/driver/nvidia/gpus/<bus>/information (older: cards/<n>)
_PROC_GPU_TITLE_RE = lazyre.compile(
    r"/proc/driver/nvidia/(?:[^/\s]+/)?(?:gpus/[^/\s]+/information|cards/\d+)$"
)
_PROLOGUE = "Start of NVIDIA bug report log file"
_EPILOGUE = "End of NVIDIA bug report log file"
_NVRM_VERSION_RE = lazyre.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(?P<ver>\d+\.\d+(?:\.\d+)?)")
_UNAME_RE = lazyre.compile(r"^uname(?: -a)?:\s*\S+\s+(?P<host>\S+)")


_PROLOGUE_RE = lazyre.compile(
    r"^(?:Start of NVIDIA bug report log file|nvidia-bug-report\.sh (?:Version|will now collect))", re.M
)


def looks_like(sample: str) -> bool:
    """The report's own prologue: not merely the name ``nvidia-bug-report.sh``, which the driver's crash
    message ("A GPU crash dump has been created ... please run nvidia-bug-report.sh") also prints."""
    head = sample[:8192]
    # each alternative holds one of these literals; testing them is cheaper than the regex scan
    return any(k in head for k in sniffgates.BUGREPORT) and bool(_PROLOGUE_RE.search(head))


@record
class BugReport:
    """What an ``nvidia-bug-report.log`` holds: its sections and what was read from them."""

    path: str
    sections: list[str] = field(default_factory=list)
    smi: list[SmiDump] = field(default_factory=list)
    kernel_events: list[KernelEvent] = field(default_factory=list)
    kernel_sections: list[str] = field(default_factory=list)
    pci_devices: list[PciDevice] = field(default_factory=list)
    driver_version: str | None = None
    hostname: str | None = None
    date: str | None = None
    notes: list[str] = field(default_factory=list)
    # what the script could not collect: (what, why), e.g. ("nvidia-smi", "nvidia-smi not found")
    not_collected: list[tuple[str, str]] = field(default_factory=list)
    smi_sections: int = 0  # nvidia-smi sections seen (read or failed)
    # NVIDIA service logs (fabricmanager.log, nvidia-imex.log, systemctl status): title -> numbered lines
    service_logs: list[tuple[str, list[tuple[int, str]]]] = field(default_factory=list)
    # GPUs the driver lists in /proc/driver/nvidia: {"name", "bus", "uuid"} as printed
    proc_gpus: list[dict[str, str]] = field(default_factory=list)
    complete: bool = False  # the epilogue ("End of NVIDIA bug report log file.") was reached


class _Lines:
    """Line iterator with one line of push-back, reading text without loading the file."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh
        self._back: str | None = None
        self.eof = False

    def next(self) -> str | None:
        if self._back is not None:
            s, self._back = self._back, None
            return s
        line = self._fh.readline(MAX_LINE)
        if not line:
            self.eof = True
            return None
        if len(line) >= MAX_LINE and not line.endswith("\n"):
            # a giant line: skip the rest of it without holding it
            while True:
                more = self._fh.readline(MAX_LINE)
                if not more or more.endswith("\n"):
                    break
            return ""
        return line.rstrip("\r\n")

    def push(self, line: str) -> None:
        self._back = line

    def section(self) -> Iterator[str]:
        """Lines up to (not including) the next separator.  The hot loop of a big report: kept lean."""
        if self._back is not None:
            first, self._back = self._back, None
            if _is_sep(first):
                self.push(first)
                return
            yield first
        readline = self._fh.readline
        while True:
            line = readline(MAX_LINE)
            if not line:
                self.eof = True
                return
            if line[-1:] != "\n" and len(line) >= MAX_LINE:
                while True:  # a giant line: skip the rest of it without holding it
                    more = readline(MAX_LINE)
                    if not more or more[-1:] == "\n":
                        break
                yield ""
                continue
            if line[:4] == "____" and _is_sep(line):
                self.push(line.rstrip("\r\n"))
                return
            yield line.rstrip("\r\n")


def _is_sep(line: str) -> bool:
    s = line.strip()
    return len(s) >= 20 and s[0] == "_" and not s.strip("_")


def open_text(path: str) -> IO[str]:
    """Open a plain or gzip-compressed file as text (undecodable bytes replaced)."""
    raw = open(path, "rb")  # returned to the caller inside the wrapper, who closes it
    head = raw.read(2)
    raw.seek(0)
    if head == b"\x1f\x8b":
        import gzip  # (only a compressed report pays for its import)

        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8", errors="replace")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def parse_path(path: str) -> BugReport:
    """Stream a bug report from disk (.log or .log.gz)."""
    with open_text(path) as fh:
        return parse_stream(fh, path)


def parse_stream(fh: IO[str], origin: str) -> BugReport:
    rep = BugReport(path=origin)
    rd = _Lines(fh)
    first = True
    while not rd.eof:
        # skip separators and blank lines to the section title
        title: str | None = None
        while True:
            line = rd.next()
            if line is None:
                break
            if _is_sep(line) or not line.strip():
                continue
            title = line.strip()
            break
        if title is None:
            break
        rep.sections.append(title[:200])
        if first or title.startswith(_PROLOGUE):
            first = False
            _header(rep, title, rd)
            continue
        _section(rep, title, rd, origin)
    rep.kernel_events = _one_copy(rep.kernel_events)
    return rep


def _one_copy(events: list[KernelEvent]) -> list[KernelEvent]:
    """Each kernel message once: a report holds it in ``dmesg:``, in the kern.log and journal greps of
    ``Scanning kernel log files`` and in ``*** /var/log/kern.log``; counted three times, one Xid 13 of two
    programs would look like a GPU that repeats it.  A message of a later section is dropped when an earlier
    section (``dmesg:`` first) already holds it at the same time (the uptime, the clock time, whichever both
    copies carry; a ``journalctl -b -1`` line is never the current boot's ``dmesg`` line).  Order is kept."""
    by_section: dict[str, list[int]] = {}
    for i, e in enumerate(events):
        by_section.setdefault(e.origin or "", []).append(i)
    if len(by_section) < 2:
        return events
    kept: dict[tuple[object, ...], list[KernelEvent]] = {}
    drop: set[int] = set()
    for origin in sorted(by_section, key=lambda o: "dmesg" not in o.lower()):
        # both copies run in time order, so each message's twins are looked for from where the last one
        # was found, a few ahead at most: a flood of one AER line stays linear
        cursor: dict[tuple[object, ...], int] = {}
        new: list[KernelEvent] = []
        for i in by_section[origin]:
            e = events[i]
            k = (e.kind, e.xid, e.pci_bus_id, e.message or e.line)
            cands = kept.get(k)
            at = cursor.get(k, 0)
            hit = next((j for j in range(at, min(at + _TWIN_WINDOW, len(cands))) if _same_time(cands[j], e)),
                       None) if cands else None
            if hit is not None:
                cursor[k] = hit + 1
                drop.add(i)
            else:
                new.append(e)
        for e in new:
            kept.setdefault((e.kind, e.xid, e.pci_bus_id, e.message or e.line), []).append(e)
    return [e for i, e in enumerate(events) if i not in drop] if drop else events


_TWIN_WINDOW = 64


def _same_time(a: KernelEvent, b: KernelEvent) -> bool:
    if a.uptime_s is not None and b.uptime_s is not None and abs(a.uptime_s - b.uptime_s) > 0.0005:
        return False
    sa, sb = _stamp(a), _stamp(b)
    if sa and sb:
        return sa == sb
    return bool(a.detail.get("previous_boot")) == bool(b.detail.get("previous_boot"))


_MONTHS = {m: f"{i:02d}" for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_SYSLOG_STAMP_RE = lazyre.compile(r"(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<hms>\d\d:\d\d:\d\d)")


def _stamp(e: KernelEvent) -> str | None:
    """``MM-DD HH:MM:SS`` of a line with a clock time (ISO, or syslog's ``Jun  1`` / journal's ``Jun 01``)."""
    if e.time and len(e.time) >= 19:
        return f"{e.time[5:10]} {e.time[11:19]}"
    m = _SYSLOG_STAMP_RE.match(str(e.detail.get("time_text") or ""))
    if m and m.group("mon") in _MONTHS:
        return f"{_MONTHS[m.group('mon')]}-{int(m.group('day')):02d} {m.group('hms')}"
    return None


def _section(rep: BugReport, title: str, rd: _Lines, origin: str) -> None:
    """Read one section whose title line has been taken."""
    low = title.lower()
    if low.endswith(_MISSING_TAIL) and _VERSION_TITLE_RE.search(title):
        rep.not_collected.append(("driver version", title.lstrip("* ")))
    elif title.startswith(("Skipping", "Error: ")):
        _skip_note(rep, title, rd)
        return
    elif title.startswith(_EPILOGUE):
        rep.complete = True
    elif _PROC_GPU_TITLE_RE.search(title):
        _proc_gpu(rep, rd)
        return
    elif _SERVICE_TITLE_RE.search(title) and not low.endswith(_MISSING_TAIL):
        kept: deque[tuple[int, str]] = deque(maxlen=_CHUNK_LINES)  # a verbose log: its newest lines
        kept.extend((n, ln) for n, ln in enumerate(rd.section(), 1) if ln)
        if kept:
            rep.service_logs.append((title, list(kept)))
        return
    elif _KERNEL_TITLE_RE.search(title) and not low.startswith("*** ls:") and not low.endswith(_MISSING_TAIL):
        rep.kernel_sections.append(title)
        if title.startswith("Scanning kernel log files"):
            _grepped_logs(rep, title, rd, origin)
        else:
            rep.kernel_events.extend(parse_lines(rd.section(), origin=f"{origin} [{title[:80]}]"))
        return
    elif "nvidia-smi" in low or "lspci" in low or _VERSION_TITLE_RE.search(title):
        body: list[str] = []
        for ln in rd.section():
            if len(body) < MAX_SECTION_LINES:
                body.append(ln)
        _small_section(rep, title, body)
        return
    for ln in rd.section():  # a section we do not read: stream past it
        if ln[:8] == "Skipping" and "nvidia-smi" in ln:  # --safe-mode: printed inside the section before it
            rep.not_collected.append(("nvidia-smi", ln.strip()))


def section_kind(title: str) -> str:
    """What the reader took from a /proc/driver/nvidia section (``driver_version``, ``driver_gpus``), or
    ``other`` for a section it streams past."""
    if _VERSION_TITLE_RE.search(title) and not title.endswith(_MISSING_TAIL):
        return "driver_version"
    if _PROC_GPU_TITLE_RE.search(title):
        return "driver_gpus"
    return "other"


def _grepped_logs(rep: BugReport, title: str, rd: _Lines, origin: str) -> None:
    """``Scanning kernel log files ...``: the NVRM lines grep'd from each log under its own sub-header
    (``  /var/log/kern.log:``, ``  journalctl -b -1:``), each read as its own log; what ``journalctl -b -1``
    or ``-b -2`` holds was logged before the last reboot."""
    sub = ""
    chunk: list[str] = []

    def flush() -> None:
        events = list(parse_lines(chunk, origin=f"{origin} [{title[:60]} {sub}]".rstrip()))
        if _EARLIER_BOOT_RE.match(sub):
            for e in events:
                e.detail["previous_boot"] = True
        rep.kernel_events.extend(events)

    for ln in rd.section():
        m = _SUBLOG_RE.match(ln) if ln[:2] == "  " else None
        if m:
            if chunk:
                flush()
            sub, chunk = m.group(1), []
        else:
            chunk.append(ln)
            if len(chunk) >= _CHUNK_LINES:  # a flood of NVRM lines: read in parts, never held whole
                flush()
                chunk = []
    if chunk:
        flush()


_CHUNK_LINES = 50_000
_SUBLOG_RE = lazyre.compile(r"^  (/\S+|journalctl -b -?\d+):\s*$")
_EARLIER_BOOT_RE = lazyre.compile(r"journalctl -b -[1-9]")


def _proc_gpu(rep: BugReport, rd: _Lines) -> None:
    """``Model:``, ``GPU UUID:`` and ``Bus Location:`` of a GPU the driver holds (every generation)."""
    got: dict[str, str] = {}
    for ln in rd.section():
        key, sep, val = ln.partition(":")
        if sep and key.strip() in _PROC_GPU_KEYS and len(got) < 8:
            got[_PROC_GPU_KEYS[key.strip()]] = val.strip()
    if got.get("name"):
        m = _PROC_BUS_RE.fullmatch(got.get("bus", "").lower())
        got["bus"] = (
            f"{m.group('dom') or '0000'}:{m.group('bus')}:{m.group('dev')}.{m.group('fn')}" if m else ""
        )
        rep.proc_gpus.append(got)


_PROC_GPU_KEYS = {"Model": "name", "GPU UUID": "uuid", "Bus Location": "bus"}
# "0000:01:00.0"; before ~2010 "01.00.0" (bus.device.function)
_PROC_BUS_RE = lazyre.compile(
    r"(?:(?P<dom>[0-9a-f]{4}):)?(?P<bus>[0-9a-f]{2})[.:](?P<dev>[0-9a-f]{2})\.(?P<fn>[0-7])"
)


def _skip_note(rep: BugReport, title: str, rd: _Lines) -> None:
    """``Skipping nvidia-smi output (nvidia-smi not found)``; 2025: ``Skipping: nvidia-smi output`` or
    ``Error: <what>`` with the reason on the next line.  Kept when it is a part we read."""
    body = [ln.strip() for ln in rd.section() if ln.strip()]
    text = title
    if title.startswith(("Skipping:", "Error:")):
        text = title.split(":", 1)[1].strip() + (f" ({body[0]})" if body else "")
    low = text.lower()
    for key, what in _COLLECTED:
        if key in low:
            rep.not_collected.append((what, text))
            return
    if title.startswith("Error:") and "nvidia" in low:
        rep.notes.append(f"nvidia-bug-report.sh: {text}")


# the parts we read, by a word of the script's skip message
_COLLECTED = (("nvidia-smi", "nvidia-smi"), ("lspci", "lspci"), ("dmesg", "kernel log"),
              ("journalctl", "kernel log"), ("kernel log", "kernel log"))


def _header(rep: BugReport, title: str, rd: _Lines) -> None:
    lines = [title, *rd.section()]
    for ln in lines[:50]:
        m = _UNAME_RE.match(ln.strip())
        if m:
            rep.hostname = m.group("host")
        if ln.startswith("Date:"):
            rep.date = ln.split(":", 1)[1].strip()



def _small_section(rep: BugReport, title: str, body: list[str]) -> None:
    text = "\n".join(body)
    low = title.lower()
    if _VERSION_TITLE_RE.search(title):
        m = _NVRM_VERSION_RE.search(text)
        if m:
            rep.driver_version = rep.driver_version or m.group("ver")
        return
    if "lspci" in low:
        rep.pci_devices.extend(lspci.parse(body))
        return
    rep.smi_sections += 1
    for cmd, part in _smi_commands(title, body):
        _smi_part(rep, cmd, part)


def _smi_commands(title: str, body: list[str]) -> Iterator[tuple[str, list[str]]]:
    """The nvidia-smi section split at each echoed command (``/usr/bin/nvidia-smi --query``, ``... --query
    --unit``, ``... nvlink --status``): each output is read by what made it."""
    cmd, part = title, list[str]()
    for ln in body:
        if ln[:1] in ("/", "n") and _SMI_COMMAND_RE.match(ln):
            yield cmd, part
            cmd, part = ln, []
        else:
            part.append(ln)
    yield cmd, part


def _smi_part(rep: BugReport, cmd: str, body: list[str]) -> None:
    """One nvidia-smi command's output by what it is: XML, ``-q`` text, a table, or nvidia-smi's error."""
    low = cmd.lower()
    if "--unit" in low or " -u" in low or "conf-compute" in low:
        return  # S-class units, confidential computing: no GPU facts
    text = "\n".join(body)
    if "nvlink" in low:
        if smi_nvlink.looks_like(text):
            rep.smi.append(smi_nvlink.parse(body))
        return
    if smi_xml.looks_like(text):
        try:
            rep.smi.append(smi_xml.parse(text, f"{rep.path} [{cmd[:60]}]"))
        except Exception as e:  # a broken embedded XML must not lose the rest of the report
            rep.notes.append(f"{cmd[:60]}: {e}")
        return
    if smi_table.looks_like(text):  # the table reader reads the error lines in it too
        rep.smi.append(smi_table.parse(body))
        return
    if smi_text.MARKER in text:
        rep.smi.append(smi_text.parse(body))
    # "NVIDIA-SMI has failed ...", "Unable to determine the device handle ...", "No devices were found"
    errors, lost = scan_error_lines(body)
    if errors or lost:
        dump = SmiDump(kind="smi_table", errors=errors)
        mark_lost(dump.gpus, lost)
        rep.smi.append(dump)
