"""Reader for ``nvidia-bug-report.log`` and ``nvidia-bug-report.log.gz``.

A bug report is a concatenation of sections separated by lines of underscores; each starts with
a title such as ``*** /proc/driver/nvidia/version``, ``*** /var/log/kern.log``, ``/usr/bin/nvidia-smi
--query`` or ``*** /usr/bin/lspci -nnDvvvxxxx``.  Reports reach hundreds of MB, so the file is
streamed: kernel-log sections flow line by line into the kernel-log parser and only the small
sections we parse as a whole (nvidia-smi, lspci, driver version) are held, each with a size cap.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import IO

from gpuclinic import lazyre
from gpuclinic.facts.gpu import PciDevice
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.record import field, record
from gpuclinic.sources import lspci, smi_table, smi_text, smi_xml
from gpuclinic.sources.kernellog import parse_lines
from gpuclinic.sources.smi_common import SmiDump

MARKER = "nvidia-bug-report.sh"
MAX_SECTION_LINES = 200_000  # nvidia-smi/lspci sections are far smaller; more is not what we think it is
MAX_LINE = 64 * 1024
# Kernel-log sections.  journalctl sections count only when they select kernel messages: bug reports
# also carry `journalctl -b -0 _COMM=Xorg` and similar, which are not the kernel log.
_KERNEL_TITLE_RE = lazyre.compile(
    r"kern\.log|/var/log/messages|/var/log/syslog|\bdmesg\b|journalctl\b.*(?:\s-k\b|--dmesg|_TRANSPORT=kernel)",
    re.I,
)
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
    return ("Start of NVIDIA" in head or "nvidia-bug-report.sh " in head) and bool(_PROLOGUE_RE.search(head))


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
        if first:
            first = False
            _header(rep, title, rd)
            continue
        if _KERNEL_TITLE_RE.search(title) and not title.lower().startswith("*** ls:"):
            rep.kernel_sections.append(title)
            rep.kernel_events.extend(parse_lines(rd.section(), origin=f"{origin} [{title[:80]}]"))
            continue
        if (
            "nvidia-smi" in title.lower()
            or "lspci" in title.lower()
            or "/proc/driver/nvidia/version" in title
        ):
            body: list[str] = []
            for ln in rd.section():
                if len(body) < MAX_SECTION_LINES:
                    body.append(ln)
            _small_section(rep, title, body)
            continue
        for _ in rd.section():  # a section we do not read: stream past it
            pass
    return rep


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
    if "/proc/driver/nvidia/version" in title:
        m = _NVRM_VERSION_RE.search(text)
        if m:
            rep.driver_version = m.group("ver")
        return
    if "lspci" in low:
        rep.pci_devices.extend(lspci.parse(body))
        return
    if smi_xml.looks_like(text):
        try:
            rep.smi.append(smi_xml.parse(text, f"{rep.path} [{title[:60]}]"))
        except Exception as e:  # a broken embedded XML must not lose the rest of the report
            rep.notes.append(f"{title[:60]}: {e}")
        return
    if smi_text.MARKER in text:
        rep.smi.append(smi_text.parse(body))
        return
    if smi_table.looks_like(text):
        rep.smi.append(smi_table.parse(body))
