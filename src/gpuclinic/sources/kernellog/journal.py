"""Journal records a line reader cannot use, made into one-line ``journalctl -o json`` records.

``journalctl -o json-pretty`` spreads a record over many lines, ``-o export`` and ``-o verbose`` give one
field a line, and a MESSAGE that is not valid UTF-8 (a driver message with a stray byte) comes as a list of
byte values that no keyword test can see.  :func:`unfold` rewrites such a record into the one-line JSON
form that :func:`.formats.split_prefix` already reads (message, realtime stamp, host) on the line of its
MESSAGE field, and blanks its other lines: line numbers stay those of the input, so evidence still points
at the right line.  Only kernel records are rewritten (``_TRANSPORT=kernel`` or a kernel message); every
other line is returned as it was.
"""

from __future__ import annotations

import datetime as _dt
import json

from gpuclinic import lazyre
from gpuclinic.sources.kernellog.formats import is_kernel_line

# "Mon 2024-03-04 10:11:12.123456 UTC [s=...;i=...]": the head of a journalctl -o verbose record
_RE_VERBOSE_HEAD = lazyre.compile(r"^[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[s=")
# its stamp, when the zone is one we can place (UTC, GMT or a numeric offset)
_RE_VERBOSE_STAMP = lazyre.compile(
    r"^[A-Z][a-z]{2} (\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))? (UTC|GMT|[+-]\d{4}) "
)
_RE_FIELD = lazyre.compile(r"^(?P<ind>\s*)(?P<key>_{0,2}[A-Z][A-Z0-9_]*)=(?P<val>.*)$")
_MAX_RECORD_LINES = 200  # a json-pretty record has a few dozen fields; more means it is not one


def unfold(lines: list[str]) -> list[str]:
    """``lines`` with every kernel journal record in json-pretty, export or verbose form, or with a
    byte-array MESSAGE, rewritten as one-line JSON at its MESSAGE line (other lines of it blank)."""
    hits = [i for i, ln in enumerate(lines) if "MESSAGE" in ln]  # cheap: most inputs have none
    if not hits:
        return lines
    out: list[str] | None = None
    done = -1  # records end before this index once read
    for i in hits:
        if i < done:
            continue
        ln = lines[i]
        s = ln.strip()
        start: int | None = None
        if s.startswith("{") and s.rstrip(",").endswith("}") and '"MESSAGE"' in s:
            one = _one_line(s.rstrip(","))
            if one is not None:
                out = out or list(lines)
                out[i] = one
            continue
        if s.startswith('"MESSAGE"'):  # a json-pretty field: its record opens at the last "{" above
            start = next((k for k in range(i - 1, max(-1, i - _MAX_RECORD_LINES), -1)
                          if lines[k].strip() == "{"), None)
            if start is not None:
                out = out or list(lines)
                done = _pretty(lines, out, start)
        elif (m := _RE_FIELD.match(ln)) and m["key"] == "MESSAGE":  # export / verbose field
            start = i
            while start > 0 and i - start < _MAX_RECORD_LINES and _RE_FIELD.match(lines[start - 1]):
                start -= 1
            if start > 0 and _RE_VERBOSE_HEAD.match(lines[start - 1].strip()):
                start -= 1
            out = out or list(lines)
            done = _fields(lines, out, start)
    return out if out is not None else lines


def _decoded(rec: dict[str, object]) -> dict[str, object] | None:
    """The record with a byte-array MESSAGE decoded; None when it has no usable MESSAGE."""
    msg = rec.get("MESSAGE")
    if isinstance(msg, list):
        try:
            msg = bytes(int(b) & 0xFF for b in msg).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
        rec = {**rec, "MESSAGE": msg}
    return rec if isinstance(msg, str) else None


def _kernel(rec: dict[str, object]) -> bool:
    msg = rec.get("MESSAGE")
    return rec.get("_TRANSPORT") == "kernel" or (isinstance(msg, str) and is_kernel_line(msg))


def _dump(rec: dict[str, object]) -> str:
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False)


def _one_line(s: str) -> str | None:
    """A one-line record whose MESSAGE is a byte array, with the message decoded."""
    if '"MESSAGE":[' not in s.replace(" ", ""):
        return None
    try:
        rec = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict):
        return None
    dec = _decoded(rec)
    return _dump(dec) if dec is not None and _kernel(dec) else None


def _pretty(lines: list[str], out: list[str], start: int) -> int:
    """A json-pretty record opening at ``start``; return the index after it (or after ``start``)."""
    end = min(len(lines), start + _MAX_RECORD_LINES)
    for j in range(start + 1, end):
        t = lines[j].strip()
        if t in ("}", "},"):
            break
        if t == "{":  # a new record began: this one never closed
            return start + 1
    else:
        return start + 1
    try:
        rec = json.loads("\n".join(lines[start : j + 1]).rstrip().rstrip(","))
    except (ValueError, RecursionError):
        return start + 1
    if not isinstance(rec, dict):
        return start + 1
    dec = _decoded(rec)
    if dec is None or not _kernel(dec):
        return j + 1
    msg_at = next((k for k in range(start, j + 1) if '"MESSAGE"' in lines[k]), start)
    for k in range(start, j + 1):
        out[k] = ""
    out[msg_at] = _dump(dec)
    return j + 1


def _fields(lines: list[str], out: list[str], start: int) -> int:
    """An export (``KEY=value`` a line, records split by a blank line) or verbose (a head line, then
    indented fields) record at ``start``; return the index after it."""
    rec: dict[str, object] = {}
    at: dict[str, int] = {}
    j = start
    if _RE_VERBOSE_HEAD.match(lines[j].strip()):
        stamp = _verbose_stamp(lines[j].strip())
        if stamp is not None:
            at["__REALTIME_TIMESTAMP"] = j
            rec["__REALTIME_TIMESTAMP"] = stamp
        j += 1
    while j < len(lines) and j - start < _MAX_RECORD_LINES:
        m = _RE_FIELD.match(lines[j])
        if not m:
            break
        rec.setdefault(m["key"], m["val"])
        at.setdefault(m["key"], j)
        j += 1
    if "MESSAGE" not in rec or not _kernel(rec):
        return max(j, start + 1)
    for k in range(start, j):
        out[k] = ""
    out[at["MESSAGE"]] = _dump(rec)
    return j


def _verbose_stamp(head: str) -> str | None:
    """The realtime stamp (microseconds since the epoch) a verbose record's head line shows, or None."""
    m = _RE_VERBOSE_STAMP.match(head)
    if not m:
        return None
    g = m.groups()
    zone = g[7]
    off = 0
    if zone not in ("UTC", "GMT"):
        off = (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[3:5]))
    try:
        t = _dt.datetime(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]),
                         int((g[6] or "0").ljust(6, "0")), tzinfo=_dt.timezone(_dt.timedelta(minutes=off)))
    except ValueError:
        return None
    return str(int(t.timestamp()) * 1_000_000 + t.microsecond)
