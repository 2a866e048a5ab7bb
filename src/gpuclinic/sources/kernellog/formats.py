"""Kernel-log line formats: timestamp/host/level prefixes of every dmesg, journal, syslog and kmsg
variant, glued lines, and the cheap keyword tests that pick candidate lines."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable

# Candidate selection: the constants live in keywords.py (imported by the scan before grep starts).
from gpuclinic import lazyre
from gpuclinic.sources.kernellog.keywords import (
    _CONTEXT_MARKERS,
    _QUALIFY,
    LINE_KEYWORDS,
    WINDOW,
)

# --------------------------------------------------------------------------------------------------
# Line prefixes (timestamps, hosts, levels)
# --------------------------------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_LEVELS = r"(?:emerg|alert|crit|err|warn|warning|notice|info|debug)"
_FACILITIES = r"(?:kern|user|daemon|syslog|auth|authpriv|mail|lpr|news|uucp|cron|ftp|local\d)"

_RE_ANSI = lazyre.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Talos/remote syslog: "192.168.11.119: kern: warning: [2026-04-22T21:27:51.291660856Z]: NVRM: ..."
_RE_TALOS = lazyre.compile(
    rf"^(\S+): {_FACILITIES}: {_LEVELS}: "
    rf"\[(\d{{4}})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?\]:\s?"
)
_RE_KMSG = lazyre.compile(r"^(\d{1,3}),(\d+),(\d+),[^;]*;")  # /dev/kmsg: prio,seq,usec,flags;msg
# an editor's or `grep -n`'s line number before a dmesg stamp: "1701 [   22.325345] ...", "1700:[ ...]"
_RE_LINENO = lazyre.compile(r"^\d{1,7}[:-]? ?(?=\[\s*\d{1,10}\.\d{1,9}\])")
_RE_PRIO = lazyre.compile(r"^<\d{1,3}>")
# RFC 5424 syslog (rsyslog RSYSLOG_SyslogProtocol23Format, syslog-ng, journald forwarders):
# "<3>1 2024-03-04T10:11:12.123456+00:00 host kernel - - - NVRM: ..." (app, procid, msgid, structured data)
_RE_5424 = lazyre.compile(
    r"^<\d{1,3}>1 (\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)? "
    r"(\S+) \S+ \S+ \S+ (?:-|(?:\[(?:[^\]\\]|\\.)*\])+) ?"
)
_RE_FACLEV = lazyre.compile(rf"^{_FACILITIES}\s*:\s*{_LEVELS}\s*:\s?")
# "[ 1234.567890]", "dmesg -d" "[ 1234.567890 <    0.000123>]", and a CONFIG_PRINTK_CALLER "[ T1234]" after it
_RE_UPTIME = lazyre.compile(r"^\[\s*(\d{1,10}\.\d{1,9})(?:\s*<\s*[\d.]+>)?\]\s?(?:\[\s*[TC]\d+\]\s?)?")
# "dmesg --time-format reltime/delta": "[Mar 4 10:11]", "[  +0.000123]" (relative: no usable time)
_RE_RELTIME = lazyre.compile(
    r"^\[(?:\s*\+\d+\.\d+|[A-Z][a-z]{2}\s*\d{1,2} \d\d:\d\d|\s*\+\d+\.\d+ [a-z]+)\]\s?"
)
_RE_CTIME = lazyre.compile(
    r"^\[(?:[A-Z][a-z]{2},? )?([A-Z][a-z]{2})\s+(\d{1,2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,]\d+)? (\d{4})\]\s?"
)
_RE_ISO = lazyre.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?\s+"
)
_RE_FULL = lazyre.compile(  # journal short-full: "Mon 2024-03-04 10:11:12 UTC host kernel: ..."
    r"^[A-Z][a-z]{2} (\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.\d+)? ([A-Z]{2,5}|[+-]\d{4})\s+"
)
_RE_SYSLOG = lazyre.compile(r"^([A-Z][a-z]{2})\s{1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s+")
# the same in a non-English locale ("фев 12 00:48:02 kernel:", "jan. 29 20:50:17 host kernel:", "Okt  3 ..."):
# the month name is not read (no time), only the stamp is taken off, and only before a kernel tag
_RE_SYSLOG_LOCALE = lazyre.compile(
    r"^([^\W\d_]{2,5}\.?)\s{1,2}\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d{1,9})?\s+"
    r"(?=(?:\S+ )?(?:kernel|vmunix)(?:\[\d+\])?:)"
)
# journalctl -o short-unix: "1709547072.123456 host kernel: ..." (seconds since the epoch, UTC)
_RE_UNIX = lazyre.compile(r"^(\d{9,11})\.(\d{1,9})\s+(?=\S+ (?:kernel|vmunix)(?:\[\d+\])?:)")
_RE_HOST = lazyre.compile(r"^(\S+) (?:kernel|vmunix)(?:\[\d+\])?:\s?")
_RE_KERNEL_TAG = lazyre.compile(r"^(?:kernel|vmunix)(?:\[\d+\])?:\s?")

# Splits text where a second log record starts (bug reports, forum pastes lose newlines).
_RE_GLUE = lazyre.compile(
    r"\s+(?=\[\s*\d{1,10}\.\d{6}\]"
    r"|(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ kernel:)"
    r"|(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* \S+ kernel:)"
    rf"|(?:{_FACILITIES}\s*:\s*{_LEVELS}\s*:))"
    r"|(?<![\]:\s])\s+(?=NVRM: )"
)


class _Prefix:
    """What a line's prefixes said (one per parsed line: a slotted class, not a dataclass, is cheapest to
    make and keeps ``dataclasses`` out of the scan's imports)."""

    __slots__ = ("host", "time", "time_text", "uptime")

    def __init__(self) -> None:
        self.time: str | None = None
        self.uptime: float | None = None
        self.host: str | None = None
        self.time_text: str | None = None


def _tz(s: str | None) -> str:
    if not s or s in ("UTC", "GMT", "Z"):
        return "+00:00" if s else ""
    if re.fullmatch(r"[+-]\d{4}", s):
        return f"{s[:3]}:{s[3:]}"
    if re.fullmatch(r"[+-]\d{2}:\d{2}", s):
        return s
    return ""


def _iso(
    y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None = None, tz: str = ""
) -> str | None:
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
    import json  # here: a plain log never needs it

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


_RE_CRI = lazyre.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (?:stdout|stderr) [FP] "
)


def _docker_json(s: str) -> str | None:
    import json

    try:
        rec = json.loads(s)
    except (ValueError, RecursionError):
        return None
    log = rec.get("log") if isinstance(rec, dict) else None
    return log.rstrip("\r\n") if isinstance(log, str) else None


def split_prefix(line: str, year: int | None = None) -> tuple[str, _Prefix]:
    """Strip the timestamp/host/level prefixes of any known format; return (message, prefix facts)."""
    p = _Prefix()
    s = line.lstrip("\x00 \t\ufeff")
    if s[:1] == "{" or "\x1b[" in s or s.startswith("MESSAGE="):
        s, msg = _unwrap(s, p)
        if msg is not None:
            return msg, p
    m = _RE_CRI.match(s) if s[:1].isdigit() else None  # (cheap tests first: each regex starts with them)
    if m:  # Kubernetes CRI log wrapper: "2024-03-04T10:11:12.123Z stdout F <line>"
        s = s[m.end() :]
    m = _RE_TALOS.match(s) if "]:" in s else None
    if m:
        g = m.groups()
        p.host = g[0]
        p.time = _iso(int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), int(g[6]), g[7], _tz(g[8]))
        s = s[m.end() :]
    for _ in range(8):
        # each prefix regex is anchored and starts with one kind of character: try only those that can match
        c0 = s[:1]
        rest = None
        for rx, take, guard in _PREFIXES.get(c0) or _prefixes_for(c0):
            if guard is _NO_TIME_YET and (p.time is not None or p.time_text is not None):
                continue
            if guard is _HOST_AFTER_STAMP and (p.host is not None or (p.uptime is None and p.time is None)):
                continue
            m = rx.match(s)
            if m:
                rest = take(s, m, p, year)
                if rest is not None:
                    break
        if rest is None:
            break
        s = rest
    return s.rstrip("\r\n"), p


def _unwrap(s: str, p: _Prefix) -> tuple[str, str | None]:
    """Take off colour escapes and a journal/docker JSON or journal export wrapper; a journal JSON
    record is read whole: (rest, its message)."""
    if "\x1b[" in s:  # dmesg --color=always pasted with its escapes
        s = _RE_ANSI.sub("", s).lstrip()
    if s.startswith("{") and '"MESSAGE"' in s:
        msg = _journal_json(s.rstrip(), p)
        if msg is not None:
            return s, msg.rstrip("\r\n")
    if s.startswith("{") and '"log"' in s:  # docker json-file log: {"log":"[ 12.3] NVRM: ...\n","stream":..}
        inner = _docker_json(s.rstrip())
        if inner is not None:
            s = inner.lstrip()
    if s.startswith("MESSAGE="):  # journalctl -o export / -o verbose field
        s = s[8:]
    return s, None


# What each prefix takes from a line once its regex matched: the rest of the line, or None when the match
# does not count after all (a month name that is not one), so the next candidate is tried.
_Take = Callable[[str, "re.Match[str]", _Prefix, "int | None"], "str | None"]


def _skip(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    return s[m.end() :]


def _kmsg(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    p.uptime = int(m.group(3)) / 1e6
    return s[m.end() :]


def _uptime(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    p.uptime = float(m.group(1))
    return s[m.end() :]


def _iso_stamp(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    g = m.groups()
    p.time = _iso(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6], _tz(g[7]))
    return _strip_host(s[m.end() :], p)


def _unix_stamp(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    secs = int(m.group(1)) + int(m.group(2).ljust(6, "0")[:6]) / 1e6
    p.time = _dt.datetime.fromtimestamp(secs, _dt.timezone.utc).isoformat()
    return _strip_host(s[m.end() :], p)


def _rfc5424_stamp(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    g = m.groups()
    p.time = _iso(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), g[6], _tz(g[7]))
    p.host = None if g[8] == "-" else g[8]
    return s[m.end() :]


def _full_stamp(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    g = m.groups()
    p.time = _iso(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]), None, _tz(g[6]))
    return _strip_host(s[m.end() :], p)


def _ctime_stamp(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    if m.group(1) not in _MONTHS:
        return None
    g = m.groups()
    p.time = _iso(int(g[5]), _MONTHS[g[0]], int(g[1]), int(g[2]), int(g[3]), int(g[4]))
    return s[m.end() :]


# A stamp seen before, with the year it was read with -> (time_text, time); None: not a month name.
# Consecutive lines of a burst share their stamp (an AER record's four lines, an Xid and its GSP lines).
_SYSLOG_SEEN: dict[tuple[str, int | None], tuple[str, str | None] | None] = {}


def _syslog_stamp(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    end = m.end()
    key = (s[:end], year)
    try:
        got = _SYSLOG_SEEN[key]
    except KeyError:
        got = _SYSLOG_SEEN[key] = _read_syslog_stamp(m, key[0], year)
        if len(_SYSLOG_SEEN) > 4096:  # a log of distinct stamps must not grow it without bound
            _SYSLOG_SEEN.clear()
    if got is None:
        return None
    p.time_text, t = got
    if t is not None:
        p.time = t
    return _strip_host(s[end:], p)


def _read_syslog_stamp(m: re.Match[str], text: str, year: int | None) -> tuple[str, str | None] | None:
    if m.group(1) not in _MONTHS:
        return None
    g = m.groups()
    t = None if year is None else _iso(year, _MONTHS[g[0]], int(g[1]), int(g[2]), int(g[3]), int(g[4]), g[5])
    return text.strip(), t


def _locale_syslog_stamp(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    p.time_text = s[: m.end()].strip()
    return _strip_host(s[m.end() :], p)


def _host(s: str, m: re.Match[str], p: _Prefix, year: int | None) -> str | None:
    p.host = m.group(1)  # journalctl -o short-monotonic: "[  12.345678] host kernel: ..."
    return s[m.end() :]


_ALWAYS, _NO_TIME_YET, _HOST_AFTER_STAMP = object(), object(), object()  # when a candidate may be tried
_Candidates = tuple[tuple[lazyre.LazyPattern, _Take, object], ...]
_TAIL: _Candidates = ((_RE_KERNEL_TAG, _skip, _ALWAYS), (_RE_HOST, _host, _HOST_AFTER_STAMP))


def _prefixes_for(c0: str) -> _Candidates:
    """The prefixes a line starting with ``c0`` may have, in the order they are tried."""
    if c0.isdigit():
        head: _Candidates = (
            (_RE_KMSG, _kmsg, _ALWAYS),
            (_RE_LINENO, _skip, _ALWAYS),
            (_RE_ISO, _iso_stamp, _NO_TIME_YET),
            (_RE_UNIX, _unix_stamp, _NO_TIME_YET),
        )
    elif c0 == "<":
        head = ((_RE_5424, _rfc5424_stamp, _NO_TIME_YET), (_RE_PRIO, _skip, _ALWAYS))
    elif c0.islower():
        head = ((_RE_FACLEV, _skip, _ALWAYS), (_RE_SYSLOG_LOCALE, _locale_syslog_stamp, _NO_TIME_YET))
    elif c0 == "[":
        head = (
            (_RE_UPTIME, _uptime, _ALWAYS),
            (_RE_RELTIME, _skip, _ALWAYS),
            (_RE_CTIME, _ctime_stamp, _NO_TIME_YET),
        )
    elif c0.isupper():
        head = (
            (_RE_FULL, _full_stamp, _NO_TIME_YET),
            (_RE_SYSLOG, _syslog_stamp, _NO_TIME_YET),
            (_RE_SYSLOG_LOCALE, _locale_syslog_stamp, _NO_TIME_YET),
        )
    else:
        head = ()
    return head + _TAIL


_PREFIXES: dict[str, _Candidates] = {chr(i): _prefixes_for(chr(i)) for i in range(128)}
_PREFIXES[""] = _TAIL


def _strip_host(s: str, p: _Prefix) -> str:
    m = _RE_HOST.match(s)
    if m:
        p.host = m.group(1)
        return s[m.end() :]
    return s


def _starts_new(msg: str) -> bool:
    return any(
        k in msg
        for k in ("Xid", "The NVIDIA GPU", "API mismatch", "GPU at PCI", "RmInitAdapter", "loading NVIDIA")
    )


_RE_LATER_STAMP = lazyre.compile(r"\[\s*\d{1,10}\.\d{6}\]")


def _looks_glued(text: str) -> bool:
    """A second record start inside one line: a later uptime stamp or a second "kernel:" tag."""
    if text.count("[") > 1:  # two stamps need two brackets (most lines have one: no regex)
        first = _RE_LATER_STAMP.search(text)
        if first and _RE_LATER_STAMP.search(text, first.end()):
            return True
    return text.count("kernel:") > 1


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


# A line that is part of a kernel log whatever wraps it: a kernel-log prefix, or an NVIDIA kernel message.
_RE_KERNEL_LINE = lazyre.compile(
    r"^\s*(?:\d{1,7}[:-]? ?(?=\[))?(?:<\d{1,3}>)?(?:\[\s*\d{1,10}\.\d{1,9}(?:\s*<\s*[\d.]+>)?\]"
    r"|\[\s*\+\d+\.\d+\]|\[[A-Z][a-z]{2}\s*\d{1,2} \d\d:\d\d\]"  # dmesg --time-format delta / reltime
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} [\d:]{8} \d{4}\]"
    r"|\d{1,3},\d+,\d+,[^;]*;"
    rf"|{_FACILITIES}\s*:\s*{_LEVELS}\s*:"
    r"|(?:[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*|"
    r"[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+|"
    r"\d{9,11}\.\d{1,9}) \S+ (?:kernel|vmunix)(?:\[\d+\])?:"  # ... journalctl -o short-unix
    # syslog/journal in a non-English locale: "фев 12 00:48:02 kernel:", "jan. 29 20:50:17 host kernel:"
    r"|[^\W\d_]{2,5}\.?\s{1,2}\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)? (?:\S+ )?(?:kernel|vmunix)(?:\[\d+\])?:"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[,.]\d+(?:Z|[+-]\d\d:?\d\d)\s+(?:NVRM|nvidia|pci|pcieport)"
    # device messages pasted without their stamps: "pcieport 0000:00:01.1: AER: ...", "nvidia 0000:3b:00.0:
    # ..."
    r"|(?:pcieport|nvidia|pci|nvidia-nvswitch\d*) [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: )"
)
_KERNEL_MARKS = (
    "NVRM",
    "Xid (",
    "nvidia-nvswitch",
    "nvidia-modeset",
    "nvidia-nvlink",
    '"_TRANSPORT":"kernel"',
    "MESSAGE=NVRM",
    "MESSAGE=nvidia",
)


def is_kernel_line(line: str) -> bool:
    """True for a kernel-log line in any wrapper (dmesg, -T, journal, syslog, kmsg, journal JSON/export),
    or an NVIDIA kernel message without a prefix (pasted ``NVRM:`` lines, wrapped continuation lines)."""
    if any(k in line for k in _KERNEL_MARKS):
        return True
    return bool(_RE_KERNEL_LINE.match(line))
