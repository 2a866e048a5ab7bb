"""Kernel log source: NVIDIA Xid/SXid, fallen-off-bus, init and GSP failures, NVLink, PCIe AER.

The kernel log is where a GPU tells why it died: NVML only says "GPU is lost", the log says Xid 79
and which PCIe error came before it.  This module parses every format seen in the wild (dmesg with
uptime, ``-T``/``--ctime``, ``--time-format iso`` and ``-x`` level prefixes; syslog and RFC 3339
syslog; journalctl short/short-iso/short-precise/short-full; ``/dev/kmsg`` records; lines glued
together in bug reports) and streams files of any size: candidate lines are located with
``bytes.find`` over a few keywords in large chunks, and only those lines reach the regexes.

Public interface (shared with other areas): :func:`parse_lines`, :func:`scan_path`,
:func:`looks_like_kernel_log`, :func:`follow`, and :func:`collect` for live use.
"""

from __future__ import annotations

import bz2
import datetime as _dt
import errno
import gzip
import io
import json
import lzma
import os
import re
import select
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, cast

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot, normalize_bus_id

if TYPE_CHECKING:
    from gpuclinic.collect import CollectOptions

# --------------------------------------------------------------------------------------------------
# Candidate selection
# --------------------------------------------------------------------------------------------------

# Every line the parser can use contains one of these (case-sensitive) byte strings.  Few and
# distinctive on purpose: each is one ``bytes.find`` pass over a chunk.
SCAN_KEYWORDS: tuple[bytes, ...] = (b"NVRM", b"nvidia", b"AER", b"Bus Error", b"bandwidth")
# After a hit on these, the next lines are candidates too: AER bit lines ("[ 0] RxErr") and the
# firmware-first "aer_status" lines carry no keyword of their own.
CONTEXT_KEYWORDS: tuple[bytes, ...] = (b"AER", b"Bus Error")
# Line-level filter for parse_lines: a superset of the scan keywords, cheap ``in`` tests.
LINE_KEYWORDS: tuple[str, ...] = ("NVRM", "nvidia", "AER", "PCIe", "Xid", "aer_", "NVLink", "GSP", "[10de:",
                                  "bandwidth")

MAX_LINE_CHARS = 4000  # longer candidate text is windowed around the keyword
WINDOW = 2000
CHUNK = 4 << 20
MAX_CARRY = 1 << 20
CONTEXT_LINES = 10
# A hit on these keywords counts only when the line also holds one of these (cheap ``in`` tests on
# the hit line alone): "PCIe" and "bandwidth" are common in messages that mean nothing here.
_QUALIFY: dict[bytes, tuple[bytes, ...]] = {
    b"PCIe": (b"Bus Error", b"bandwidth", b"PCIe error", b"[10de:"),
    b"bandwidth": (b"limited by",),
}
# Only an AER record's detail header pulls in the following lines (bit lines carry no keyword).
# ("received" covers old kernels, whose "PCIe Bus Error" detail line has no "AER:" prefix.)
_CONTEXT_MARKERS: tuple[bytes, ...] = (b"Bus Error", b"aer_status", b"status/mask", b"received")
# What a line following an AER header must hold to be part of its record.
_CONTEXT_LINE_MARKS: tuple[bytes, ...] = (b"   [", b"status/mask", b"Bus Error", b"aer_", b"TLP", b"AER")

# --------------------------------------------------------------------------------------------------
# Line prefixes (timestamps, hosts, levels)
# --------------------------------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_LEVELS = r"(?:emerg|alert|crit|err|warn|warning|notice|info|debug)"
_FACILITIES = r"(?:kern|user|daemon|syslog|auth|authpriv|mail|lpr|news|uucp|cron|ftp|local\d)"

_RE_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Talos/remote syslog: "192.168.11.119: kern: warning: [2026-04-22T21:27:51.291660856Z]: NVRM: ..."
_RE_TALOS = re.compile(
    rf"^(\S+): {_FACILITIES}: {_LEVELS}: \[(\d{{4}})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?\]:\s?")
_RE_KMSG = re.compile(r"^(\d{1,3}),(\d+),(\d+),[^;]*;")  # /dev/kmsg: prio,seq,usec,flags;msg
_RE_PRIO = re.compile(r"^<\d{1,3}>")
_RE_FACLEV = re.compile(rf"^{_FACILITIES}\s*:\s*{_LEVELS}\s*:\s?")
# "[ 1234.567890]", "dmesg -d" "[ 1234.567890 <    0.000123>]", and a CONFIG_PRINTK_CALLER "[ T1234]" after it
_RE_UPTIME = re.compile(r"^\[\s*(\d{1,10}\.\d{1,9})(?:\s*<\s*[\d.]+>)?\]\s?(?:\[\s*[TC]\d+\]\s?)?")
# "dmesg --time-format reltime/delta": "[Mar 4 10:11]", "[  +0.000123]" (relative: no usable time)
_RE_RELTIME = re.compile(r"^\[(?:\s*\+\d+\.\d+|[A-Z][a-z]{2}\s*\d{1,2} \d\d:\d\d|\s*\+\d+\.\d+ [a-z]+)\]\s?")
_RE_CTIME = re.compile(
    r"^\[(?:[A-Z][a-z]{2},? )?([A-Z][a-z]{2})\s+(\d{1,2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,]\d+)? (\d{4})\]\s?")
_RE_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?\s+")
_RE_FULL = re.compile(  # journal short-full: "Mon 2024-03-04 10:11:12 UTC host kernel: ..."
    r"^[A-Z][a-z]{2} (\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.\d+)? ([A-Z]{2,5}|[+-]\d{4})\s+")
_RE_SYSLOG = re.compile(r"^([A-Z][a-z]{2})\s{1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s+")
_RE_HOST = re.compile(r"^(\S+) (?:kernel|vmunix)(?:\[\d+\])?:\s?")
_RE_KERNEL_TAG = re.compile(r"^(?:kernel|vmunix)(?:\[\d+\])?:\s?")

# Splits text where a second log record starts (bug reports, forum pastes lose newlines).
_RE_GLUE = re.compile(
    r"\s+(?=\[\s*\d{1,10}\.\d{6}\]"
    r"|(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ kernel:)"
    r"|(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* \S+ kernel:)"
    rf"|(?:{_FACILITIES}\s*:\s*{_LEVELS}\s*:))"
    r"|(?<![\]:\s])\s+(?=NVRM: )")


@dataclass
class _Prefix:
    time: str | None = None
    uptime: float | None = None
    host: str | None = None
    time_text: str | None = None


def _tz(s: str | None) -> str:
    if not s or s in ("UTC", "GMT", "Z"):
        return "+00:00" if s else ""
    if re.fullmatch(r"[+-]\d{4}", s):
        return f"{s[:3]}:{s[3:]}"
    if re.fullmatch(r"[+-]\d{2}:\d{2}", s):
        return s
    return ""


def _iso(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None = None, tz: str = "") -> str | None:
    try:
        _dt.datetime(y, mo, d, h, mi, s)
    except ValueError:
        return None
    out = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"
    if frac:
        out += "." + frac[:6].ljust(6, "0")
    return out + tz


def _journal_json(s: str, p: _Prefix) -> str | None:
    """``journalctl -o json`` record: its MESSAGE, with realtime/monotonic stamps and host."""
    try:
        rec = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict):
        return None
    msg = rec.get("MESSAGE")
    if isinstance(msg, list):  # binary-safe form: a list of byte values
        try:
            msg = bytes(int(b) & 0xFF for b in msg).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
    if not isinstance(msg, str):
        return None
    try:
        rt = int(rec.get("__REALTIME_TIMESTAMP") or 0)
        if rt:
            p.time = _dt.datetime.fromtimestamp(rt / 1e6, _dt.timezone.utc).isoformat()
        mono = rec.get("_SOURCE_MONOTONIC_TIMESTAMP") or rec.get("__MONOTONIC_TIMESTAMP")
        if mono:
            p.uptime = int(mono) / 1e6
    except (TypeError, ValueError, OverflowError, OSError):
        pass
    host = rec.get("_HOSTNAME")
    if isinstance(host, str):
        p.host = host
    return msg


def split_prefix(line: str, year: int | None = None) -> tuple[str, _Prefix]:
    """Strip the timestamp/host/level prefixes of any known format; return (message, prefix facts)."""
    p = _Prefix()
    s = line.lstrip("\x00 \t\ufeff")
    if "\x1b[" in s:  # dmesg --color=always pasted with its escapes
        s = _RE_ANSI.sub("", s).lstrip()
    if s.startswith("{") and '"MESSAGE"' in s:
        msg = _journal_json(s.rstrip(), p)
        if msg is not None:
            return msg.rstrip("\r\n"), p
    m = _RE_TALOS.match(s)
    if m:
        g = m.groups()
        p.host = g[0]
        p.time = _iso(int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), int(g[6]), g[7], _tz(g[8]))
        s = s[m.end():]
    for _ in range(8):
        m = _RE_KMSG.match(s)
        if m:
            p.uptime = int(m.group(3)) / 1e6
            s = s[m.end():]
            continue
        m = _RE_PRIO.match(s) or _RE_FACLEV.match(s)
        if m:
            s = s[m.end():]
            continue
        m = _RE_UPTIME.match(s)
        if m:
            p.uptime = float(m.group(1))
            s = s[m.end():]
            continue
        m = _RE_RELTIME.match(s)
        if m:
            s = s[m.end():]
            continue
        if p.time is None and p.time_text is None:
            m = _RE_ISO.match(s)
            if m:
                g = m.groups()
                p.time = _iso(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6], _tz(g[7]))
                s = _strip_host(s[m.end():], p)
                continue
            m = _RE_FULL.match(s)
            if m:
                g = m.groups()
                p.time = _iso(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), None, _tz(g[6]))
                s = _strip_host(s[m.end():], p)
                continue
            m = _RE_CTIME.match(s)
            if m and m.group(1) in _MONTHS:
                g = m.groups()
                p.time = _iso(int(g[5]), _MONTHS[g[0]], int(g[1]), int(g[2]), int(g[3]), int(g[4]))
                s = s[m.end():]
                continue
            m = _RE_SYSLOG.match(s)
            if m and m.group(1) in _MONTHS:
                g = m.groups()
                p.time_text = s[: m.end()].strip()
                if year is not None:
                    p.time = _iso(year, _MONTHS[g[0]], int(g[1]), int(g[2]), int(g[3]), int(g[4]), g[5])
                s = _strip_host(s[m.end():], p)
                continue
        m = _RE_KERNEL_TAG.match(s)
        if m:
            s = s[m.end():]
            continue
        if p.host is None and (p.uptime is not None or p.time is not None):
            m = _RE_HOST.match(s)  # journalctl -o short-monotonic: "[  12.345678] host kernel: ..."
            if m:
                p.host = m.group(1)
                s = s[m.end():]
                continue
        break
    return s.rstrip("\r\n"), p


def _strip_host(s: str, p: _Prefix) -> str:
    m = _RE_HOST.match(s)
    if m:
        p.host = m.group(1)
        return s[m.end():]
    return s


# --------------------------------------------------------------------------------------------------
# Message patterns
# --------------------------------------------------------------------------------------------------

_BDF = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_DEV = rf"(?P<drv>[\w.-]+) (?P<dev>{_BDF}):\s*"

_RE_XID = re.compile(
    rf"(?<!S)Xid \((?:PCI:)?(?P<bus>{_BDF})(?:\s+GPU-I:(?P<gi>\w+))?(?:\s+GPU-CI:(?P<ci>\w+))?\):\s*"
    r"(?P<xid>\d{1,4})\b,?\s*(?P<rest>.*)$")
_RE_PID = re.compile(r"^pid=(?P<pid>'?<unknown>'?|'?\d+'?)\s*(?:,\s*|$)")
_RE_NAME = re.compile(r"^name=(?P<name>.*?)(?:,\s+|,$|$)")
_RE_CAUSED = re.compile(r"caused by previous Xid (\d+)", re.I)
_RE_LINK = re.compile(r"\b[Ll]ink\s*(?:#\s*)?(\d{1,3})\b")
_RE_NVL5 = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]+)\s+(?P<sev>Fatal|Nonfatal|Non-fatal|NonFatal)\s+(?P<xc>XC\d+)\s+(?P<inst>i\d+)\s+"
    r"Link\s+(?P<link>-?\d+)\s*\((?P<words>[^)]*)\)")
_RE_SXID = re.compile(
    rf"SXid \((?:PCI:)?(?P<bus>{_BDF})\):\s*(?P<sxid>\d{{1,6}}),\s*(?P<rest>.*)$")
_RE_NVSWITCH = re.compile(r"nvidia-nvswitch(\d+)")
_RE_UUID = re.compile(rf"NVRM: GPU at (?:PCI:)?(?P<bus>{_BDF}): (?P<uuid>GPU-[0-9a-fA-F-]{{36}})")
_RE_FOB_ONE = re.compile(
    rf"(?:GPU (?:at )?(?:PCI:)?(?P<bus>{_BDF}):? (?:GPU )?has fallen off the bus)")
_RE_FOB_MULTI = re.compile(
    rf"The NVIDIA GPU (?:at )?(?:PCI:)?(?P<bus>{_BDF})\s*(?:\(PCI ID: (?P<pciid>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{4}})\))?"
    r".*?fallen\s+off\s+the\s+bus", re.S)
_RE_NOT_SUPPORTED = re.compile(
    rf"The NVIDIA GPU (?:at )?(?:PCI:)?(?P<bus>{_BDF})\s*(?:\(PCI ID: (?P<pciid>[0-9a-fA-F:]+)\))?"
    r".*?installed in this system is\s+not supported by\s+(?P<rest>.*)", re.S)
_RE_INIT = re.compile(
    rf"(?:GPU (?P<bus>{_BDF}):\s*)?(?P<what>RmInitAdapter failed!?|rm_init_adapter failed)"
    r"(?:\s*\((?P<code>0x[0-9a-fA-F:x]+)\))?")
_RE_PROBE = re.compile(rf"probe of (?P<bus>{_BDF}) failed with error (?P<err>-?\d+)")
_RE_POWER_CABLES = re.compile(
    rf"GPU (?P<bus>{_BDF}):.*(?:power cables?|auxiliary power).*not connected|"
    rf"GPU (?P<bus2>{_BDF}):.*does not have the necessary power", re.I)
_RE_GSP_TIMEOUT = re.compile(r"Timeout after (?P<secs>\d+)s of waiting for RPC response from GPU(?P<gpu>\d+) GSP!"
                             r"(?:\s*Expected function (?P<fn>\d+) \((?P<fname>\w+)\))?")
_RE_GSP = re.compile(
    r"(?P<what>GSP RPC|RPC history|heartbeat|GSP crashed|GSP[- ]RM.*?(?:halt|crash|error|fail)|kgspLogXid\w*|"
    r"GSP Timeout|GSP Error|GSP task exception|kgsp\w*(?:Fail|Error|Timeout)\w*|"
    r"Cannot initialize GSP|GSP firmware|GSP init|bootstrap GSP|GSP\b.*?(?:fail|error|timeout|crash))", re.I)
_RE_GPU_N = re.compile(r"\bGPU(\d{1,3})\b")
_RE_NVLINK = re.compile(r"NVLink|nvlink|NVLINK")
_RE_NVLINK_BAD = re.compile(r"error|fatal|fail|down|timeout|fault|training", re.I)
_RE_LIMITED = re.compile(
    rf"(?:{_DEV})?(?P<avail>[\d.]+) Gb/s available PCIe bandwidth, limited by (?P<speed>[\d.]+) GT/s "
    rf"(?:PCIe )?x(?P<width>\d+) link at (?P<at>{_BDF}) \(capable of (?P<cap>[\d.]+) Gb/s with "
    r"(?P<capspeed>[\d.]+) GT/s (?:PCIe )?x(?P<capwidth>\d+) link\)")
_RE_PCI_ENUM = re.compile(rf"pci (?P<dev>{_BDF}): \[10de:(?P<did>[0-9a-fA-F]{{4}})\] type \d+ class 0x(?P<cls>[0-9a-fA-F]+)")
_RE_API_MISMATCH = re.compile(
    r"client(?: '(?P<who>[^']*)'(?: \(pid \d+\))?)? has the version (?P<client>\d+(?:\.\d+)*),? but .*?"
    r"kernel module has\s+(?:NVRM:\s+)?the version (?P<kernel>\d+(?:\.\d+)*)")
_RE_DRIVER_LOADED = re.compile(r"NVRM: loading NVIDIA UNIX (?:Open )?(?:[\w-]+ )?Kernel Module(?: for \w+)?\s+"
                               r"(?P<ver>\d+\.\d+(?:\.\d+)?)")

# nvidia module problems: (regex, sub-kind, severity hint)
_MODULE_PATTERNS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"API mismatch"), "api_mismatch", "critical"),
    (re.compile(r"nvidia(?:[\w-]*): Unknown symbol (?P<sym>\S+)"), "unknown_symbol", "critical"),
    (re.compile(r"nvidia(?:[\w-]*): disagrees about version of symbol (?P<sym>\S+)"), "symbol_version", "critical"),
    (re.compile(r"No NVIDIA GPU found|No NVIDIA devices probed|No NVIDIA graphics adapter (?:found|probed)"),
     "no_gpu_found", "critical"),
    (re.compile(r"NVIDIA init module failed"), "insert_failed", "critical"),
    (re.compile(r"Direct firmware load for nvidia/\S+ failed|No firmware image found"), "firmware_missing",
     "critical"),
    (re.compile(r"The NVIDIA probe routine failed for (?P<n>\d+) device"), "probe_failed", "critical"),
    (re.compile(r"The NVIDIA probe routine was not called for (?P<n>\d+) device"), "probe_not_called", "warning"),
    (re.compile(r"This PCI I/O region assigned to your NVIDIA device is invalid"), "bar_invalid", "critical"),
    (re.compile(r"failed to copy vbios to system memory"), "vbios_copy_failed", "critical"),
    (re.compile(r"nvidia(?:[\w-]*): module verification failed"), "verification_failed", "info"),
    (re.compile(r"nvidia(?:[\w-]*): module license '[^']*' taints kernel"), "taints_kernel", "info"),
    (re.compile(r"nvidia-modeset: (?:ERROR|WARNING)[:\s]"), "modeset_error", "info"),
    (re.compile(r"nvidia(?:[\w-]*): (?:Unknown parameter|unknown parameter)"), "unknown_parameter", "warning"),
    (re.compile(r"NVRM: (?:request_mem_region failed|RmInitAdapter|failed to allocate) ", re.I), "resource", "warning"),
    (re.compile(r"NVRM: Failed to (?:create|initialize|register|load) [^\n]*", re.I), "load_failure", "warning"),
    (re.compile(r"insmod: ERROR: could not insert module nvidia|modprobe: (?:FATAL|ERROR):.*nvidia"),
     "insert_failed", "critical"),
)

# AER (drivers/pci/pcie/aer.c across kernel versions, and APEI firmware-first output)
_RE_AER_RECV = re.compile(
    rf"{_DEV}(?:AER: )?(?P<multi>Multiple )?(?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)"
    r"(?: \((?P<fatal>Non-Fatal|Fatal)\))? error (?:message )?received(?: from|:)\s*(?:id=)?(?P<src>[0-9a-fA-F:.]+)")
_RE_AER_BUS = re.compile(
    rf"(?:{_DEV})?(?:AER: )?PCIe Bus Error: severity=(?P<sev>[A-Za-z]+)(?: \((?P<fatal>Non-Fatal|Fatal)\))?,?"
    r"\s*type=(?P<type>[^,]+?)\s*(?:,\s*(?:id=(?P<id>[0-9a-fA-F]+))?\s*\((?P<agent>[^)]+)\))?\s*$")
_RE_AER_STATUS = re.compile(
    rf"{_DEV}(?:AER: )?\s*device \[(?P<vd>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{4}})\] error status/mask="
    r"(?P<status>[0-9a-fA-F]+)/(?P<mask>[0-9a-fA-F]+)")
_RE_AER_BIT = re.compile(
    rf"{_DEV}(?:AER: )?\s*\[\s*(?P<bit>\d{{1,2}})\s*\]\s+(?P<name>[A-Za-z][\w ]*?)\s*(?P<first>\(First\))?\s*$")
_RE_AER_FW_STATUS = re.compile(
    rf"{_DEV}(?:AER: )?aer_status: 0x(?P<status>[0-9a-fA-F]+), aer_mask: 0x(?P<mask>[0-9a-fA-F]+)")
_RE_AER_FW_LAYER = re.compile(rf"{_DEV}(?:AER: )?aer_layer=(?P<type>[^,]+), aer_agent=(?P<agent>.+?)\s*$")
# AER recovery naming the devices below the port that reported the error (the GPU, usually)
_RE_AER_DOWNSTREAM = re.compile(
    rf"{_DEV}(?:AER: )?(?:device has no AER-aware driver|can't recover \(no error_detected callback\)|"
    r"(?:PCI )?error_detected\b|device recovery (?:successful|failed))")
_RE_HW_SEV = re.compile(r"\[Hardware Error\]:\s+(?:event severity|Error \d+, type): (?P<sev>\w+)")
_RE_AER_RECOVERY = re.compile(rf"{_DEV}(?:AER: )?[Dd]evice recovery (?P<res>successful|failed)")

_CORRECTABLE_BITS = {
    "RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF",
    # names printed by older kernels
    "Receiver Error", "Bad TLP", "Bad DLLP", "RELAY_NUM Rollover", "Replay Timer Timeout", "Advisory Non-Fatal",
}


def _norm_sev(sev: str, fatal: str | None) -> str:
    s = sev.lower()
    if s.startswith("corr"):
        return "corrected"
    if fatal:
        return "fatal" if fatal.lower() == "fatal" else "nonfatal"
    if s in ("fatal",):
        return "fatal"
    if s.startswith("uncorr") or s in ("recoverable", "nonfatal"):
        return "nonfatal"
    return s


def _bus(s: str | None) -> str | None:
    return normalize_bus_id(s) if s else None


# --------------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------------


@dataclass
class _Aer:
    event: KernelEvent
    device: str | None


@dataclass
class _Multi:
    """An NVRM message printed over several lines (fallen off the bus, API mismatch, unsupported GPU)."""

    kind: str
    parts: list[str]
    line: str
    prefix: _Prefix
    lineno: int | None


class KernelLogParser:
    """Turns kernel log lines into :class:`KernelEvent` objects; keeps state for multi-line messages.

    Feed lines with :meth:`feed`; call :meth:`flush` at the end (or when a live log goes quiet) to
    emit messages still waiting for continuation lines.
    """

    def __init__(self, origin: str | None = None, year: int | None = None) -> None:
        self.origin = origin
        self.year = year
        self._aer: _Aer | None = None
        self._recv: KernelEvent | None = None  # "error message received from X": waits for its details
        self._multi: _Multi | None = None
        self._hw_sev: str | None = None  # APEI "[Hardware Error]: event severity: corrected"
        self._last_reporter: tuple[str, int] | None = None  # (root port, lines it stays valid)
        self._last_aer: KernelEvent | None = None  # the last AER error event, for recovery lines naming devices
        self._last_xid_bus: str | None = None
        self._last_xid_countdown = 0
        self.nvidia_devices: set[str] = set()
        self.boot = 0  # how many reboots (uptime resets) were seen so far
        self._last_uptime: float | None = None

    # -- public ---------------------------------------------------------------------------------
    def feed(self, line: str, lineno: int | None = None) -> list[KernelEvent]:
        out: list[KernelEvent] = []
        if len(line) > MAX_LINE_CHARS:
            texts = _windows(line)
        else:
            texts = [line]
        for text in texts:
            if "#012" in text:  # rsyslog escapes the newlines of multi-line messages as "#012"
                text = text.replace("#012", " ")
            parts = _RE_GLUE.split(text) if text.count("NVRM") > 1 or _looks_glued(text) else [text]
            for part in parts:
                if part.strip():
                    self._feed_one(part, lineno, out)
        return out

    def flush(self) -> list[KernelEvent]:
        out: list[KernelEvent] = []
        self._flush_multi(out)
        self._flush_aer(out)
        self._flush_recv(out)
        return out

    # -- internals ------------------------------------------------------------------------------
    def _ev(self, kind: str, line: str, msg: str, p: _Prefix, lineno: int | None, **kw: Any) -> KernelEvent:
        if p.uptime is not None:
            # uptime going backwards means the machine rebooted between these lines
            if self._last_uptime is not None and p.uptime + 30 < self._last_uptime:
                self.boot += 1
            self._last_uptime = p.uptime
        kw.setdefault("detail", {})
        if self.boot:
            kw["detail"]["boot"] = self.boot
        ev = KernelEvent(kind=kind, line=line.strip()[:MAX_LINE_CHARS], time=p.time, uptime_s=p.uptime,
                         message=msg.strip()[:MAX_LINE_CHARS], origin=self.origin, lineno=lineno, **kw)
        if p.time_text:
            ev.detail["time_text"] = p.time_text  # syslog stamp without a year (any year in time is a guess)
        if p.host:
            ev.detail["host"] = p.host
        return ev

    def _feed_one(self, raw: str, lineno: int | None, out: list[KernelEvent]) -> None:
        aer, recv = self._aer, self._recv
        if aer is None and recv is None and self._multi is None and not _is_candidate(raw):
            return  # a context line with nothing waiting for it
        mark = len(out)
        self._feed_one_inner(raw, lineno, out)
        if len(out) > mark and (aer is not None or recv is not None):
            # a new message arrived while an AER record waited for detail lines: it is complete
            first = [ev for ev in out[mark:] if ev.kind == "aer"]
            if (aer is not None and self._aer is aer) or (recv is not None and self._recv is recv):
                if not first:
                    tmp: list[KernelEvent] = []
                    if self._aer is aer:
                        self._flush_aer(tmp)
                    if self._recv is recv:
                        self._flush_recv(tmp)
                    out[mark:mark] = tmp

    def _feed_one_inner(self, raw: str, lineno: int | None, out: list[KernelEvent]) -> None:
        msg, p = split_prefix(raw, self.year)
        line = raw.rstrip("\r\n")
        if self._last_xid_countdown > 0:
            self._last_xid_countdown -= 1
        if self._last_reporter is not None:
            self._last_reporter = (self._last_reporter[0], self._last_reporter[1] - 1)

        # Multi-line NVRM messages: continuation lines start with "NVRM: " and match nothing else.
        if self._multi is not None:
            if msg.startswith("NVRM:") and not _starts_new(msg):
                self._multi.parts.append(msg[5:].strip())
                if self._try_complete_multi(out):
                    return
                if len(self._multi.parts) >= 6:
                    self._flush_multi(out)
                return
            self._flush_multi(out)

        # AER continuation lines (status/mask, bits, firmware-first layer)
        if self._aer is not None and self._aer_continue(msg, p, out):
            return
        if "Hardware Error" in msg:
            hw = _RE_HW_SEV.search(msg)
            if hw:
                self._hw_sev = hw.group("sev").lower()
                return
        aerish = "AER" in msg or "Bus Error" in msg or "aer_" in msg

        if "Xid" in msg:
            m = _RE_XID.search(msg)
            if m:
                self._flush_aer(out)
                out.append(self._xid(m, line, msg, p, lineno))
                return
            m = _RE_SXID.search(msg)
            if m:
                ev = self._sxid(m, line, msg, p, lineno)
                if ev is not None:
                    out.append(ev)
                return

        if ("NVRM" in msg or "nvidia" in msg or "NVIDIA" in msg) and not aerish:
            if self._nvrm(line, msg, p, lineno, out):
                return

        if aerish or "PCIe" in msg:
            if aerish and self._aer_start(line, msg, p, lineno, out):
                return
            m = _RE_LIMITED.search(msg)
            if m:
                dev = _bus(m.group("dev"))
                out.append(self._ev(
                    "pcie_limited", line, msg, p, lineno, pci_bus_id=dev,
                    detail={
                        "available_gbps": float(m.group("avail")), "speed_gts": float(m.group("speed")),
                        "width": int(m.group("width")), "limited_at": _bus(m.group("at")),
                        "capable_gbps": float(m.group("cap")), "capable_speed_gts": float(m.group("capspeed")),
                        "capable_width": int(m.group("capwidth")),
                        "nvidia": bool(dev and dev in self.nvidia_devices),
                    }))
                return
            m = _RE_PCI_ENUM.search(msg)
            if m:
                self.nvidia_devices.add(normalize_bus_id(m.group("dev")))
                return
        m = _RE_PCI_ENUM.search(msg) if "10de" in msg else None
        if m:
            self.nvidia_devices.add(normalize_bus_id(m.group("dev")))

    def _xid(self, m: re.Match[str], line: str, msg: str, p: _Prefix, lineno: int | None) -> KernelEvent:
        bus = normalize_bus_id(m.group("bus"))
        rest = m.group("rest").strip()
        pid: int | None = None
        proc: str | None = None
        detail: dict[str, Any] = {}
        mp = _RE_PID.match(rest)
        if mp:
            v = mp.group("pid").strip("'")
            pid = int(v) if v.isdigit() else None
            rest = rest[mp.end():]
        mn = _RE_NAME.match(rest)
        if mn:
            nm = mn.group("name").strip()
            proc = None if nm in ("<unknown>", "'<unknown>'", "") else nm
            rest = rest[mn.end():]
        if m.group("gi"):
            detail["gpu_instance"] = m.group("gi")
        if m.group("ci"):
            detail["compute_instance"] = m.group("ci")
        mc = _RE_CAUSED.search(rest)
        if mc:
            detail["caused_by_xid"] = int(mc.group(1))
        m5 = _RE_NVL5.match(rest)
        if m5:
            detail.update({
                "unit": m5.group("unit"), "fatal": m5.group("sev") == "Fatal", "xc": m5.group("xc"),
                "instance": m5.group("inst"), "link": int(m5.group("link")),
                "words": m5.group("words").split(),
            })
        else:
            ml = _RE_LINK.search(rest)
            if ml and ("NVLink" in rest or "nvlink" in rest.lower() or "Link" in rest):
                detail["link"] = int(ml.group(1))
        self._last_xid_bus = bus
        self._last_xid_countdown = 40
        return self._ev("xid", line, msg, p, lineno, pci_bus_id=bus, xid=int(m.group("xid")), pid=pid,
                        process=proc, detail={"text": rest.strip(), **detail})

    def _sxid(self, m: re.Match[str], line: str, msg: str, p: _Prefix, lineno: int | None) -> KernelEvent | None:
        rest = m.group("rest").strip()
        if re.match(r"^(?:Severity \d|Data \{|Data\s*0x)", rest):
            return None  # continuation of the previous SXid record
        detail: dict[str, Any] = {"sxid": int(m.group("sxid")), "text": rest}
        low = rest.lower()
        if low.startswith("non-fatal") or low.startswith("nonfatal"):
            detail["fatal"] = False
        elif low.startswith("fatal"):
            detail["fatal"] = True
        ml = _RE_LINK.search(rest)
        if ml:
            detail["link"] = int(ml.group(1))
        sw = _RE_NVSWITCH.search(msg)
        if sw:
            detail["nvswitch"] = int(sw.group(1))
        return self._ev("sxid", line, msg, p, lineno, pci_bus_id=normalize_bus_id(m.group("bus")), detail=detail)

    def _nvrm(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        m = _RE_UUID.search(msg)
        if m:
            out.append(self._ev("uuid_map", line, msg, p, lineno, pci_bus_id=normalize_bus_id(m.group("bus")),
                                detail={"uuid": m.group("uuid")}))
            return True
        m = _RE_FOB_ONE.search(msg)
        if m:
            out.append(self._ev("fallen_off_bus", line, msg, p, lineno, pci_bus_id=normalize_bus_id(m.group("bus"))))
            return True
        if "The NVIDIA GPU" in msg or "API mismatch" in msg:
            kind = "api_mismatch" if "API mismatch" in msg else "gpu_message"
            idx = msg.find("The NVIDIA GPU") if kind == "gpu_message" else msg.find("API mismatch")
            self._multi = _Multi(kind=kind, parts=[msg[idx:].strip()], line=line, prefix=p, lineno=lineno)
            self._try_complete_multi(out)
            return True
        m = _RE_GSP_TIMEOUT.search(msg)
        if m:
            d: dict[str, Any] = {"gsp": "rpc_timeout", "timeout_s": int(m.group("secs")),
                                 "gpu_instance": int(m.group("gpu"))}
            if m.group("fn"):
                d["function"] = f"{m.group('fn')} ({m.group('fname')})"
            out.append(self._ev("gsp", line, msg, p, lineno, pci_bus_id=self._context_bus(), detail=d))
            return True
        m = _RE_INIT.search(msg)
        if m:
            d = {"what": m.group("what").rstrip("!")}
            if m.group("code"):
                d["code"] = m.group("code")
            mm = re.search(r"minor number (\d+)", msg)
            if mm:
                d["minor"] = int(mm.group(1))
            out.append(self._ev("init_failed", line, msg, p, lineno, pci_bus_id=_bus(m.group("bus")), detail=d))
            return True
        m = _RE_PROBE.search(msg)
        if m and "nvidia" in msg:
            out.append(self._ev("init_failed", line, msg, p, lineno, pci_bus_id=normalize_bus_id(m.group("bus")),
                                detail={"what": "probe failed", "error": int(m.group("err"))}))
            return True
        m = _RE_POWER_CABLES.search(msg) if ("ower" in msg or "POWER" in msg) else None
        if m:
            out.append(self._ev("init_failed", line, msg, p, lineno,
                                pci_bus_id=_bus(m.group("bus") or m.group("bus2")),
                                detail={"what": "power cables not connected"}))
            return True
        if "GSP" in msg or "gsp" in msg or "Gsp" in msg or "heartbeat" in msg:
            m = _RE_GSP.search(msg)
            if m:
                low = msg.lower()
                kind = ("heartbeat" if "heartbeat" in low else
                        "crash" if ("crash" in low or "halt" in low or "exception" in low) else
                        "reset_required" if "needs to be reset" in low or "reset required" in low else
                        "rpc_timeout" if ("gsp timeout" in low or ("timeout" in low and "rpc" in low)) else
                        "init" if ("init" in low or "bootstrap" in low or "gsp firmware" in low) else
                        "xid_report" if ("logxid" in low or "gsp error" in low) else "rpc")
                d = {"gsp": kind}
                mg = _RE_GPU_N.search(msg)
                if mg:
                    d["gpu_instance"] = int(mg.group(1))
                mb = re.search(rf"(?:PCI:)?({_BDF})", msg)
                bus = normalize_bus_id(mb.group(1)) if mb else self._context_bus()
                out.append(self._ev("gsp", line, msg, p, lineno, pci_bus_id=bus, detail=d))
                return True
        if _RE_NVLINK.search(msg) and _RE_NVLINK_BAD.search(msg) and "Nvlink Core is being initialized" not in msg:
            d = {}
            ml = _RE_LINK.search(msg)
            if ml:
                d["link"] = int(ml.group(1))
            mb = re.search(rf"(?:PCI:)?({_BDF})", msg)
            out.append(self._ev("nvlink", line, msg, p, lineno,
                                pci_bus_id=normalize_bus_id(mb.group(1)) if mb else self._context_bus(), detail=d))
            return True
        m = _RE_DRIVER_LOADED.search(msg)
        if m:
            out.append(self._ev("module", line, msg, p, lineno,
                                detail={"module": "loaded", "driver_version": m.group("ver"), "severity": "info"}))
            return True
        for rx, sub, sev in _MODULE_PATTERNS:
            mm2 = rx.search(msg)
            if mm2:
                d = {"module": sub, "severity": sev}
                gd = mm2.groupdict()
                if gd.get("sym"):
                    d["symbol"] = gd["sym"]
                if gd.get("n"):
                    d["devices"] = int(gd["n"])
                mb = re.search(rf"({_BDF})", msg)
                out.append(self._ev("module", line, msg, p, lineno, pci_bus_id=_bus(mb.group(1)) if mb else None,
                                    detail=d))
                return True
        return False

    def _context_bus(self) -> str | None:
        return self._last_xid_bus if self._last_xid_countdown > 0 else None

    def _try_complete_multi(self, out: list[KernelEvent]) -> bool:
        mu = self._multi
        if mu is None:
            return False
        text = " ".join(mu.parts)
        if mu.kind == "gpu_message":
            m = _RE_FOB_MULTI.search(text)
            if m:
                d: dict[str, Any] = {"multiline": len(mu.parts) > 1}
                if m.group("pciid"):
                    d["pci_id"] = m.group("pciid").lower()
                out.append(self._ev("fallen_off_bus", mu.line, "NVRM: " + text, mu.prefix, mu.lineno,
                                    pci_bus_id=normalize_bus_id(m.group("bus")), detail=d))
                self._multi = None
                return True
            m = _RE_NOT_SUPPORTED.search(text)
            if m and re.search(r"driver\b|release\b|nvidia\.ko|GSP", m.group("rest")):
                out.append(self._ev("module", mu.line, "NVRM: " + text, mu.prefix, mu.lineno,
                                    pci_bus_id=normalize_bus_id(m.group("bus")),
                                    detail={"module": "gpu_not_supported", "severity": "critical",
                                            "pci_id": (m.group("pciid") or "").lower() or None}))
                self._multi = None
                return True
        elif mu.kind == "api_mismatch":
            m = _RE_API_MISMATCH.search(text)
            if m:
                d = {"module": "api_mismatch", "severity": "critical", "client_version": m.group("client"),
                     "kernel_version": m.group("kernel")}
                if m.group("who"):
                    d["client_process"] = m.group("who")
                out.append(self._ev("module", mu.line, "NVRM: " + text, mu.prefix, mu.lineno, detail=d))
                self._multi = None
                return True
        return False

    def _flush_multi(self, out: list[KernelEvent]) -> None:
        mu = self._multi
        self._multi = None
        if mu is None:
            return
        if mu.kind == "api_mismatch":
            out.append(self._ev("module", mu.line, "NVRM: " + " ".join(mu.parts), mu.prefix, mu.lineno,
                                detail={"module": "api_mismatch", "severity": "critical"}))

    # -- AER ------------------------------------------------------------------------------------
    def _aer_start(self, line: str, msg: str, p: _Prefix, lineno: int | None, out: list[KernelEvent]) -> bool:
        m = _RE_AER_RECV.search(msg)
        if m:
            self._flush_aer(out)
            sev = _norm_sev(m.group("sev"), m.group("fatal"))
            src = m.group("src")
            src_bus = normalize_bus_id(src) if ":" in src else None
            prev = self._recv
            if (prev is not None and prev.detail.get("reporter") == normalize_bus_id(m.group("dev"))
                    and (prev.pci_bus_id, prev.detail.get("source_id")) == (src_bus, None if src_bus else src)):
                # "Multiple ... received" right after the single report of the same source: one record
                self._recv = None
                multiple = bool(m.group("multi")) or bool(prev.detail.get("multiple"))
            else:
                self._flush_recv(out)
                multiple = bool(m.group("multi"))
            self._last_reporter = (normalize_bus_id(m.group("dev")), 12)
            self._recv = self._ev("aer", line, msg, p, lineno, pci_bus_id=src_bus, detail={
                "severity": sev, "reporter": normalize_bus_id(m.group("dev")), "device": src_bus,
                "multiple": multiple, "source_id": None if src_bus else src})
            return True
        m = _RE_AER_BUS.search(msg)
        if m:
            self._flush_aer(out)
            dev = _bus(m.group("dev"))
            sev = _norm_sev(m.group("sev"), m.group("fatal"))
            d: dict[str, Any] = {"severity": sev, "type": m.group("type").strip(), "agent": m.group("agent"),
                                 "device": dev, "driver": m.group("drv")}
            if m.group("id"):
                d["requester_id"] = m.group("id")
            recv = self._recv
            self._recv = None
            evline, evmsg = line, msg
            if recv is not None:
                d["reporter"] = recv.detail.get("reporter")
                d["multiple"] = recv.detail.get("multiple", False)
                d["received_line"] = recv.line
                if dev is None:
                    dev = recv.pci_bus_id
                    d["device"] = dev
            elif self._last_reporter is not None and self._last_reporter[1] > 0:
                d["reporter"] = self._last_reporter[0]  # same burst as the last "received" line
            else:
                d["reporter"] = dev
            self._aer = _Aer(self._ev("aer", evline, evmsg, p, lineno, pci_bus_id=dev, detail=d), dev)
            return True
        m = _RE_AER_FW_STATUS.search(msg)
        if m:
            self._flush_aer(out)
            dev = normalize_bus_id(m.group("dev"))
            d = {"severity": self._hw_sev and _norm_sev(self._hw_sev, None), "device": dev, "reporter": dev,
                 "driver": m.group("drv"), "status": m.group("status"), "mask": m.group("mask"),
                 "firmware_first": True}
            self._hw_sev = None
            self._aer = _Aer(self._ev("aer", line, msg, p, lineno, pci_bus_id=dev, detail=d), dev)
            return True
        m = _RE_AER_DOWNSTREAM.search(msg)
        la = self._aer.event if self._aer is not None else self._last_aer
        if m and la is not None and "recovery" not in msg:
            dev = normalize_bus_id(m.group("dev"))
            if dev not in (la.pci_bus_id, la.detail.get("reporter")):
                below = la.detail.setdefault("downstream", [])
                if dev not in below:
                    below.append(dev)
                if m.group("drv") == "nvidia":
                    la.detail.setdefault("downstream_nvidia", []).append(dev)
            return True
        m = _RE_AER_RECOVERY.search(msg)
        if m:
            self._flush_aer(out)
            self._flush_recv(out)
            out.append(self._ev("aer", line, msg, p, lineno, pci_bus_id=normalize_bus_id(m.group("dev")), detail={
                "severity": "recovery", "recovery": m.group("res"), "device": normalize_bus_id(m.group("dev"))}))
            return True
        return False

    def _aer_continue(self, msg: str, p: _Prefix, out: list[KernelEvent]) -> bool:
        a = self._aer
        if a is None:
            return False
        m = _RE_AER_STATUS.search(msg)
        if m and normalize_bus_id(m.group("dev")) == a.device:
            a.event.detail["vendor_device"] = m.group("vd").lower()
            a.event.detail["status"] = m.group("status")
            a.event.detail["mask"] = m.group("mask")
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        m = _RE_AER_BIT.search(msg)
        if m and normalize_bus_id(m.group("dev")) == a.device:
            bits = a.event.detail.setdefault("bits", [])
            bits.append(m.group("name").strip())
            if m.group("first"):
                a.event.detail["first"] = m.group("name").strip()
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        m = _RE_AER_FW_LAYER.search(msg)
        if m and normalize_bus_id(m.group("dev")) == a.device:
            a.event.detail["type"] = m.group("type").strip()
            a.event.detail["agent"] = m.group("agent").strip()
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        if m is None and ("TLP Header" in msg or "aer_uncor_severity" in msg or "tlp_header" in msg.lower()):
            a.event.detail.setdefault("lines", []).append(msg.strip())
            return True
        return False

    def _flush_aer(self, out: list[KernelEvent]) -> None:
        a = self._aer
        self._aer = None
        if a is None:
            return
        d = a.event.detail
        if not d.get("severity"):
            bits = set(d.get("bits") or [])
            d["severity"] = "corrected" if bits and bits <= _CORRECTABLE_BITS else "unknown"
        if d.get("vendor_device", "").startswith("10de:") and a.device:
            self.nvidia_devices.add(a.device)
        d["nvidia"] = bool(d.get("vendor_device", "").startswith("10de:") or d.get("driver") == "nvidia"
                           or (a.device in self.nvidia_devices))
        self._last_aer = a.event
        out.append(a.event)

    def _flush_recv(self, out: list[KernelEvent]) -> None:
        r = self._recv
        self._recv = None
        if r is not None:
            r.detail["nvidia"] = bool(r.pci_bus_id and r.pci_bus_id in self.nvidia_devices)
            out.append(r)


def _starts_new(msg: str) -> bool:
    return any(k in msg for k in ("Xid", "The NVIDIA GPU", "API mismatch", "GPU at PCI", "RmInitAdapter",
                                  "loading NVIDIA"))


_RE_LATER_STAMP = re.compile(r"\[\s*\d{1,10}\.\d{6}\]")


def _looks_glued(text: str) -> bool:
    """A second record start inside one line: a later uptime stamp or a second "kernel:" tag."""
    first = _RE_LATER_STAMP.search(text)
    return bool((first and _RE_LATER_STAMP.search(text, first.end())) or text.count("kernel:") > 1)


def _windows(line: str) -> list[str]:
    """Cut an overlong line into windows around each keyword hit (the rest is noise)."""
    out: list[str] = []
    pos = 0
    n = len(line)
    while pos < n:
        best = -1
        for kw in LINE_KEYWORDS:
            i = line.find(kw, pos)
            if i != -1 and (best == -1 or i < best):
                best = i
        if best == -1:
            break
        start = max(pos, best - 200)
        end = min(n, best + WINDOW)
        out.append(line[start:end])
        pos = end
        if len(out) > 10000:
            break
    return out


_QUALIFY_STR = {k.decode(): tuple(q.decode() for q in v) for k, v in _QUALIFY.items()}
_CONTEXT_STR = tuple(q.decode() for q in _CONTEXT_MARKERS)


def _is_candidate(line: str) -> bool:
    for k in LINE_KEYWORDS:
        if k in line:
            quals = _QUALIFY_STR.get(k)
            if quals is None or any(q in line for q in quals):
                return True
    return False


def _wants_context(line: str) -> bool:
    return any(q in line for q in _CONTEXT_STR)


def parse_lines(lines: Iterable[str], origin: str | None = None, *, year: int | None = None) -> Iterator[KernelEvent]:
    """Parse kernel log lines (any format) into events; stateful across lines for multi-line messages.

    ``year`` completes syslog timestamps that carry none ("Mar  4 10:11:12"); without it such events
    keep the text in ``detail["time_text"]`` and ``time`` stays None.
    """
    parser = KernelLogParser(origin, year)
    ctx = 0
    for lineno, line in enumerate(lines, start=1):
        if _is_candidate(line):
            ctx = CONTEXT_LINES if _wants_context(line) else ctx
        elif ctx > 0:
            ctx -= 1
        else:
            continue
        yield from parser.feed(line, lineno)
    yield from parser.flush()


def mark_previous_boots(events: list[KernelEvent]) -> None:
    """Flag events logged before the last reboot seen in the same log (``detail["previous_boot"]``)."""
    last = max((int(ev.detail.get("boot", 0)) for ev in events), default=0)
    if last:
        for ev in events:
            if int(ev.detail.get("boot", 0)) < last:
                ev.detail["previous_boot"] = True


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------


_DECOMPRESS_ERRORS = (EOFError, OSError, lzma.LZMAError, ValueError, zlib.error)


def _open_binary(path: str) -> IO[bytes]:
    """Open a plain, gzip, xz or bzip2 file, recognised by its first bytes (not its name).

    A file that only starts like a compressed one (garbage, a truncated header) is read as plain text.
    """
    fh: IO[bytes] = open(path, "rb")
    head = fh.read(6)
    fh.seek(0)
    kind = ("gz" if head[:2] == b"\x1f\x8b" else "xz" if head[:6] == b"\xfd7zXZ\x00"
            else "bz2" if head[:3] == b"BZh" else None)
    if kind is None:
        return fh
    try:
        _decompressor(kind, fh).read(1)
    except _DECOMPRESS_ERRORS:
        fh.seek(0)
        return fh
    fh.seek(0)
    return cast(IO[bytes], _Tolerant(_decompressor(kind, fh), fh))


def _decompressor(kind: str, fh: IO[bytes]) -> IO[bytes]:
    if kind == "gz":
        return cast(IO[bytes], gzip.GzipFile(fileobj=fh, mode="rb"))
    if kind == "xz":
        return cast(IO[bytes], lzma.LZMAFile(fh, "rb"))
    return cast(IO[bytes], bz2.BZ2File(fh, "rb"))


class _Tolerant(io.RawIOBase):
    """A decompressing reader that ends quietly at a corrupt or truncated tail (keeps what was read)."""

    def __init__(self, inner: IO[bytes], raw: IO[bytes]) -> None:
        super().__init__()
        self._inner = inner
        self._raw = raw
        self.truncated = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if self.truncated:
            return b""
        want = size if size is not None and size > 0 else 1 << 20
        parts: list[bytes] = []
        got = 0
        read1 = getattr(self._inner, "read1", self._inner.read)
        while got < want:
            try:
                b = read1(want - got)
            except _DECOMPRESS_ERRORS:
                self.truncated = True
                break
            if not b:
                break
            parts.append(b)
            got += len(b)
        return b"".join(parts)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


def _load_memmem() -> Any:
    """libc ``memmem`` through ctypes: 2-4x faster than ``bytes.find`` for short needles (SIMD).

    ``GPUCLINIC_NO_MEMMEM=1`` or a libc without it falls back to ``bytes.find``.
    """
    if os.environ.get("GPUCLINIC_NO_MEMMEM"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        fn = libc.memmem
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return fn


_MEMMEM = _load_memmem()


class _Searcher:
    """Substring search over one buffer (bytes or a fixed-size bytearray), with libc memmem when available."""

    def __init__(self, buf: bytes | bytearray) -> None:
        self.buf = buf
        self._memmem = _MEMMEM
        self._base = 0
        if self._memmem is not None:
            import ctypes

            if isinstance(buf, bytearray):
                self._keep: Any = (ctypes.c_char * len(buf)).from_buffer(buf)  # no copy; pins the size
                self._base = ctypes.addressof(self._keep)
            else:
                self._keep = ctypes.c_char_p(buf)  # points at the bytes object's own storage: no copy
                self._base = ctypes.cast(self._keep, ctypes.c_void_p).value or 0
            if not self._base:
                self._memmem = None

    def find(self, kw: bytes, start: int, end: int) -> int:
        if self._memmem is None:
            return self.buf.find(kw, start, end)
        if end - start < len(kw):
            return -1
        r = self._memmem(self._base + start, end - start, kw, len(kw))
        return -1 if r is None else int(r) - self._base


def iter_candidate_lines(fh: IO[bytes], chunk_size: int = CHUNK) -> Iterator[str]:
    """Yield only the lines of a byte stream that may interest the parser, reading large chunks.

    Chunks are read into one reused buffer (no per-chunk allocation); keyword hits are found with a
    fast substring search (libc memmem or ``bytes.find``; no regex per line); lines after an AER
    header are included as context.  Overlong lines are windowed, so memory stays flat whatever
    the input.
    """
    ba = bytearray(chunk_size + MAX_CARRY + 1)
    mv = memoryview(ba)
    search = _Searcher(ba)
    readinto = getattr(fh, "readinto", None)
    have = 0  # bytes carried over (an unfinished line) at the front of the buffer
    owed = 0  # context lines still owed from the previous chunk
    try:
        while True:
            if readinto is not None:
                got = readinto(mv[have: have + chunk_size]) or 0
            else:
                data = fh.read(chunk_size)
                got = len(data)
                ba[have: have + got] = data
            if not got:
                break
            end = have + got
            last_nl = ba.rfind(b"\n", 0, end)
            if last_nl == -1:
                if end <= MAX_CARRY:
                    have = end
                    continue
                # one enormous line: handle what we have, keep a tail in case a keyword straddles
                yield from _region_candidates(ba, search, 0, end - WINDOW, 0)
                ba[0:WINDOW] = ba[end - WINDOW: end]
                have, owed = WINDOW, 0
                continue
            owed = yield from _region_candidates(ba, search, 0, last_nl + 1, owed)
            tail = end - (last_nl + 1)
            if tail > MAX_CARRY:
                yield from _region_candidates(ba, search, last_nl + 1, end - WINDOW, 0)
                ba[0:WINDOW] = ba[end - WINDOW: end]
                have = WINDOW
            else:
                ba[0:tail] = ba[last_nl + 1: end]
                have = tail
        if have:
            ba[have] = 0x0A
            yield from _region_candidates(ba, search, 0, have + 1, owed)
    finally:
        del search
        mv.release()


def _region_candidates(buf: bytearray, search: _Searcher, lo: int, n: int, owed: int = 0
                       ) -> Generator[str, None, int]:
    """Yield the candidate lines of ``buf[lo:n]`` in order; return how many context lines are still owed."""
    starts: dict[int, int] = {}
    ctx_from: list[tuple[int, int]] = [(lo, owed)] if owed else []
    for kw in SCAN_KEYWORDS:
        i = search.find(kw, lo, n)
        want_ctx = kw in CONTEXT_KEYWORDS
        quals = _QUALIFY.get(kw)
        while i != -1:
            s = buf.rfind(b"\n", lo, i) + 1 or lo
            e = buf.find(b"\n", i, n)
            if e == -1:
                e = n
            if e - s > MAX_LINE_CHARS:  # overlong line: window around the hit
                s = max(s, i - 200)
                e = min(e, i + WINDOW)
            if quals is not None or want_ctx:
                line = bytes(buf[s:e])
                if quals is not None and not any(q in line for q in quals):
                    i = search.find(kw, e, n)  # e.g. "bandwidth" in an unrelated message
                    continue
                if want_ctx and any(q in line for q in _CONTEXT_MARKERS):
                    ctx_from.append((e + 1, CONTEXT_LINES))
            if starts.get(s, -1) < e:
                starts[s] = e
            i = search.find(kw, e, n)
    still_owed = 0
    for pos, count in ctx_from:
        for left in range(count, 0, -1):
            if pos >= n:
                still_owed = max(still_owed, left)
                break
            e = buf.find(b"\n", pos, n)
            if e == -1:
                e = n
            if e - pos > MAX_LINE_CHARS:
                e = pos + MAX_LINE_CHARS
            if pos not in starts:
                seg = bytes(buf[pos:e])
                if any(mk in seg for mk in _CONTEXT_LINE_MARKS):
                    starts[pos] = e
            pos = e + 1
    for s in sorted(starts):
        yield _decode(bytes(buf[s: starts[s]]))
    return still_owed


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace").rstrip("\r")


def _mtime(path: str) -> _dt.datetime | None:
    try:
        return _dt.datetime.fromtimestamp(os.stat(path).st_mtime)
    except OSError:
        return None


def _year_hint(path: str) -> int | None:
    try:
        return _dt.datetime.fromtimestamp(os.stat(path).st_mtime).year
    except OSError:
        return None


def scan_path(path: str | os.PathLike[str], *, tail_bytes: int | None = None) -> list[KernelEvent]:
    """Stream a kernel log file (plain, .gz, .xz, .bz2) and return its events.

    Memory stays flat for any size: the file is read in chunks and only candidate lines are kept.
    ``tail_bytes`` limits a plain file to its last bytes (live runs, where dmesg/journal already
    cover this boot and only recent history is wanted).  Raises OSError when the file cannot be read.
    """
    p = os.fspath(path)
    parser = KernelLogParser(origin=p, year=_year_hint(p))
    out: list[KernelEvent] = []
    with _open_binary(p) as fh:
        if tail_bytes is not None and isinstance(fh, io.BufferedReader):
            size = os.fstat(fh.fileno()).st_size
            if size > tail_bytes:
                fh.seek(size - tail_bytes)
                fh.readline()  # drop the partial first line
        for line in iter_candidate_lines(fh):
            out.extend(parser.feed(line))
    out.extend(parser.flush())
    _fix_syslog_years(out, _mtime(p))
    mark_previous_boots(out)
    return out


def _fix_syslog_years(events: list[KernelEvent], ref: _dt.datetime | None = None) -> None:
    """Syslog stamps carry no year: none may lie after the file was last written (``ref``), and a log
    that crosses New Year gets the earlier year for the old months."""
    guessed = [ev for ev in events if ev.time and "time_text" in ev.detail]
    if ref is not None:
        limit = (ref + _dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S")
        for ev in guessed:
            assert ev.time is not None
            if ev.time[:19] > limit:
                ev.time = f"{int(ev.time[:4]) - 1:04d}{ev.time[4:]}"
    last_month = None
    for ev in reversed(guessed):
        assert ev.time is not None
        mo = int(ev.time[5:7])
        if last_month is not None and mo > last_month + 6:
            ev.time = f"{int(ev.time[:4]) - 1:04d}{ev.time[4:]}"
            continue
        last_month = mo


_RE_SNIFF = re.compile(
    r"(?m)^(?:<\d>)?(?:\[\s*\d+\.\d+\]|\[[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d+ [\d:]+ \d{4}\]|"
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*\s+\S+\s+kernel:|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]\d+[+-]\d\d:?\d\d\s|"
    r"[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)? \S+ kernel:|"
    rf"{_FACILITIES}\s*:\s*{_LEVELS}\s*:|\d{{1,3}},\d+,\d+,[^;]*;)")


def looks_like_kernel_log(text_sample: str) -> bool:
    """True when ``text_sample`` reads like a kernel log (dmesg, journal, syslog kernel lines, kmsg).

    Needs either NVIDIA/AER kernel messages or several lines with kernel-log prefixes, so a
    program's own log or an ``nvidia-smi`` dump is not mistaken for one.
    """
    if not text_sample:
        return False
    sample = text_sample[:200_000]
    if _RE_XID.search(sample) or _RE_SXID.search(sample) or "NVRM:" in sample:
        return True
    if "PCIe Bus Error: severity=" in sample or _RE_AER_RECV.search(sample):
        return True
    if '"_TRANSPORT":"kernel"' in sample or '"_TRANSPORT" : "kernel"' in sample:
        return True  # journalctl -o json(-pretty) of kernel messages
    lines = [ln for ln in sample.splitlines()[:400] if ln.strip()]
    if not lines:
        return False
    hits = sum(1 for ln in lines if _RE_SNIFF.match(ln))
    return hits >= 3 and hits >= 0.5 * len(lines)


# --------------------------------------------------------------------------------------------------
# Live collection
# --------------------------------------------------------------------------------------------------

SYSLOG_FILES = ("/var/log/kern.log", "/var/log/syslog", "/var/log/messages")
SYSLOG_TAIL_BYTES = 64 << 20
_CMD_TIMEOUT_S = 15.0


@dataclass
class _SourceResult:
    name: str
    events: list[KernelEvent] = field(default_factory=list)
    ok: bool = False
    why: str | None = None


def _run_stream(argv: list[str], name: str, timeout_s: float = _CMD_TIMEOUT_S,
                year: int | None = None) -> _SourceResult:
    """Run a log command (no shell) and parse its stdout as it streams; bounded by ``timeout_s``."""
    res = _SourceResult(name)
    exe = shutil.which(argv[0])
    if exe is None:
        res.why = f"{argv[0]} is not installed"
        return res
    try:
        proc = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"})
    except OSError as e:
        res.why = f"cannot run {argv[0]}: {e.strerror or e}"
        return res
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout_s, _kill)
    timer.start()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        parser = KernelLogParser(origin=name, year=year)
        for line in iter_candidate_lines(proc.stdout, chunk_size=1 << 20):
            res.events.extend(parser.feed(line))
        res.events.extend(parser.flush())
        err = proc.stderr.read(4000).decode("utf-8", "replace").strip()
        rc = proc.wait()
    finally:
        timer.cancel()
    if timed_out.is_set():
        res.why = f"{' '.join(argv)} did not finish within {timeout_s:.0f}s (events read so far are kept)"
        res.ok = bool(res.events)
        return res
    if rc != 0:
        first = err.splitlines()[0] if err else f"exit status {rc}"
        if "Operation not permitted" in err or "Permission denied" in err:
            if argv[0] == "dmesg":
                res.why = ("dmesg is restricted (kernel.dmesg_restrict=1) and this user is not root: "
                           f"{first}")
            else:
                res.why = f"{argv[0]}: permission denied ({first})"
        else:
            res.why = f"{' '.join(argv)} failed: {first}"
        return res
    if argv[0] == "journalctl" and not res.events:
        if "not seeing messages" in err or "insufficient permissions" in err or "No journal files" in err:
            res.why = ("this user may not read the system journal (add it to the 'systemd-journal' or 'adm' "
                       "group, or run as root)")
            return res
        if "No entries" in err:
            res.why = "the journal holds no kernel messages for this boot"
            return res
    res.ok = True
    return res


def _read_file_source(path: str, tail_bytes: int | None = None) -> _SourceResult:
    res = _SourceResult(path)
    try:
        res.events = scan_path(path, tail_bytes=tail_bytes)
        res.ok = True
    except FileNotFoundError:
        res.why = "not present"
    except PermissionError:
        res.why = f"{path} is not readable by this user (permission denied)"
    except (OSError, EOFError, lzma.LZMAError) as e:
        res.why = f"cannot read {path}: {e}"
    return res


def _event_key(ev: KernelEvent) -> tuple[Any, ...]:
    msg = ev.message or ev.line
    return (ev.kind, ev.pci_bus_id, ev.xid, msg)


def merge_sources(results: Sequence[Sequence[KernelEvent]]) -> list[KernelEvent]:
    """Merge events of several sources that may show the same kernel messages.

    For every distinct message the source that holds it most often wins (so a message seen once in
    dmesg and once in kern.log counts once, while kern.log's older history is kept).  Ties go to the
    earlier source, so list the source with the best timestamps first.
    """
    best: dict[tuple[Any, ...], tuple[int, int]] = {}  # key -> (count, source index)
    counts: list[dict[tuple[Any, ...], int]] = []
    for i, evs in enumerate(results):
        c: dict[tuple[Any, ...], int] = {}
        for ev in evs:
            k = _event_key(ev)
            c[k] = c.get(k, 0) + 1
        counts.append(c)
        for k, n in c.items():
            if k not in best or n > best[k][0]:
                best[k] = (n, i)
    out: list[KernelEvent] = []
    for i, evs in enumerate(results):
        for ev in evs:
            if best[_event_key(ev)][1] == i:
                out.append(ev)
    return out


def collect(snap: Snapshot, opts: CollectOptions) -> None:
    """Read every kernel log this user can read, plus ``opts.kernel_logs``; fill ``snap.kernel_events``."""
    year = _dt.datetime.now().year
    results: list[_SourceResult] = []
    journal = _run_stream(["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"], "journalctl -k -b",
                          year=year)
    results.append(journal)
    dm = _run_stream(["dmesg", "--time-format", "iso"], "dmesg", year=year)
    if not dm.ok and dm.why and ("unrecognized option" in dm.why or "invalid" in dm.why.lower()):
        dm = _run_stream(["dmesg"], "dmesg", year=year)
    results.append(dm)
    # With this boot already read from the journal or dmesg, the syslog files only add history:
    # read their recent part so a multi-GB syslog cannot slow the run down.
    tail = SYSLOG_TAIL_BYTES if (journal.ok or dm.ok) else None
    for path in SYSLOG_FILES:
        results.append(_read_file_source(path, tail))
    extra: list[_SourceResult] = []
    for path in opts.kernel_logs:
        r = _read_file_source(path)
        if r.why == "not present":
            r.why = f"{path} does not exist"
        extra.append(r)
    ok = [r for r in results + extra if r.ok]
    for r in results:
        if not r.ok and r.why and r.why != "not present":
            snap.skip(f"kernel log via {r.name}", r.why)
    for r in extra:
        if not r.ok:
            snap.skip(f"kernel log {r.name}", r.why or "unreadable")
    if not ok:
        reasons = "; ".join(f"{r.name}: {r.why}" for r in results if r.why)
        snap.skip("the kernel log (Xid, AER, fallen-off-bus messages)",
                  "no kernel log is readable here" + (f" ({reasons})" if reasons else "")
                  + "; run as root, or pass a saved log with --kernel-log FILE")
        return
    snap.kernel_log_read = True
    snap.kernel_log_sources.extend(r.name for r in ok)
    merged = merge_sources([r.events for r in ok])
    mark_before_boot(merged, _boot_time())
    snap.kernel_events.extend(merged)


def _boot_time() -> _dt.datetime | None:
    try:
        with open("/proc/uptime", encoding="ascii") as fh:
            up = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=up)


def mark_before_boot(events: Iterable[KernelEvent], boot: _dt.datetime | None) -> None:
    """Flag events whose absolute time is before this machine's last boot (old kern.log history)."""
    if boot is None:
        return
    for ev in events:
        if not ev.time:
            continue
        try:
            t = _dt.datetime.fromisoformat(ev.time)
        except ValueError:
            continue
        if t.tzinfo is None:
            t = t.astimezone()  # naive syslog/dmesg -T times are local
        if t < boot - _dt.timedelta(seconds=60):
            ev.detail["previous_boot"] = True


# --------------------------------------------------------------------------------------------------
# Following a live log
# --------------------------------------------------------------------------------------------------


def follow(paths: Sequence[str] | None, stop: threading.Event, from_end: bool = True,
           poll_s: float = 0.25) -> Iterator[KernelEvent]:
    """Yield events as kernel log lines are written, until ``stop`` is set.

    With ``paths`` it tails those files, surviving rotation and truncation.  Without, it reads
    ``/dev/kmsg`` if permitted, else ``journalctl -k -f``, else tails the syslog files.
    """
    if paths:
        yield from _follow_files(list(paths), stop, from_end, poll_s)
        return
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            yield from _follow_kmsg(fd, stop, from_end, poll_s)
        finally:
            os.close(fd)
        return
    if shutil.which("journalctl"):
        argv = ["journalctl", "-k", "-f", "--no-pager", "-q", "-o", "short-iso"]
        if from_end:
            argv += ["-n", "0"]
        try:
            yield from _follow_command(argv, stop, poll_s)
            return
        except OSError:
            pass
    files = [p for p in SYSLOG_FILES if os.access(p, os.R_OK)]
    if files:
        yield from _follow_files(files, stop, from_end, poll_s)


def _follow_kmsg(fd: int, stop: threading.Event, from_end: bool, poll_s: float) -> Iterator[KernelEvent]:
    if from_end:
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except OSError:
            pass
    parser = KernelLogParser(origin="/dev/kmsg")
    idle = 0.0
    while not stop.is_set():
        try:
            rec = os.read(fd, 8192)
        except BlockingIOError:
            yield from parser.flush() if idle >= 1.0 else ()
            if idle >= 1.0:
                idle = 0.0
            select.select([fd], [], [], poll_s)
            idle += poll_s
            continue
        except OSError as e:
            if e.errno == errno.EPIPE:  # records overwritten before we read them
                continue
            raise
        if not rec:
            time.sleep(poll_s)
            continue
        idle = 0.0
        # one record per read from /dev/kmsg; lines starting with a space (" DEVICE=+pci:...") are metadata
        for text in rec.decode("utf-8", "replace").splitlines():
            if text and not text.startswith(" ") and (_is_candidate(text) or parser._aer is not None):
                yield from parser.feed(text)
    yield from parser.flush()


def _follow_command(argv: list[str], stop: threading.Event, poll_s: float) -> Iterator[KernelEvent]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    parser = KernelLogParser(origin=" ".join(argv[:3]))
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = b""
    idle = 0.0
    try:
        while not stop.is_set():
            r, _, _ = select.select([fd], [], [], poll_s)
            if not r:
                idle += poll_s
                if idle >= 1.0:
                    yield from parser.flush()
                    idle = 0.0
                if proc.poll() is not None:
                    break
                continue
            data = os.read(fd, 65536)
            if not data:
                break
            idle = 0.0
            buf += data
            *lines, buf = buf.split(b"\n")
            for ln in lines:
                s = _decode(ln)
                if _is_candidate(s) or parser._aer is not None:
                    yield from parser.feed(s)
            if len(buf) > MAX_CARRY:
                buf = buf[-WINDOW:]
        yield from parser.flush()
    finally:
        proc.kill()
        proc.wait()


@dataclass
class _Tail:
    path: str
    fh: IO[bytes] | None = None
    ino: int | None = None
    buf: bytes = b""
    parser: KernelLogParser | None = None
    ctx: int = 0


def _follow_files(paths: list[str], stop: threading.Event, from_end: bool, poll_s: float) -> Iterator[KernelEvent]:
    tails = [_Tail(p, parser=KernelLogParser(origin=p, year=_dt.datetime.now().year)) for p in paths]
    first = True
    idle = 0.0
    while not stop.is_set():
        got = False
        for t in tails:
            yield_from = _tail_step(t, from_end and first)
            for ev in yield_from:
                got = True
                yield ev
        first = False
        if not got:
            idle += poll_s
            if idle >= 1.0:
                for t in tails:
                    assert t.parser is not None
                    yield from t.parser.flush()
                idle = 0.0
            stop.wait(poll_s)
        else:
            idle = 0.0
    for t in tails:
        if t.fh:
            t.fh.close()
        assert t.parser is not None
        yield from t.parser.flush()


def _tail_step(t: _Tail, seek_end: bool) -> list[KernelEvent]:
    """Read what was appended to one followed file; reopen it when rotated or truncated."""
    out: list[KernelEvent] = []
    try:
        st = os.stat(t.path)
    except OSError:
        st = None
    if t.fh is not None and st is not None:
        try:
            pos = t.fh.tell()
        except (OSError, ValueError):
            pos = 0
        if st.st_ino != t.ino or st.st_size < pos:
            # rotated or truncated: finish the old file, then start the new one from its beginning
            out.extend(_tail_read(t))
            t.fh.close()
            t.fh = None
            t.buf = b""
    if t.fh is None and st is not None:
        try:
            t.fh = open(t.path, "rb")
        except OSError:
            return out
        t.ino = os.fstat(t.fh.fileno()).st_ino
        if seek_end:
            t.fh.seek(0, io.SEEK_END)
    if t.fh is not None:
        out.extend(_tail_read(t))
    return out


def _tail_read(t: _Tail) -> list[KernelEvent]:
    out: list[KernelEvent] = []
    assert t.fh is not None and t.parser is not None
    while True:
        data = t.fh.read(1 << 20)
        if not data:
            break
        t.buf += data
        if b"\n" not in t.buf:
            if len(t.buf) > MAX_CARRY:
                t.buf = t.buf[-WINDOW:]
            continue
        *lines, t.buf = t.buf.split(b"\n")
        for ln in lines:
            s = _decode(ln)
            if _is_candidate(s):
                t.ctx = CONTEXT_LINES if _wants_context(s) else t.ctx
            elif t.ctx > 0:
                t.ctx -= 1
            else:
                continue
            out.extend(t.parser.feed(s))
    return out
