"""What makes a kernel-log line a candidate: the few byte strings every useful line holds, the qualifiers
some need, and the AER context rules, plus the scan's size limits.

Kept apart from the prefix grammar (:mod:`.formats`) because the big-file scan (:mod:`.scan`,
:mod:`.grepscan`) needs only these constants before it starts grep: importing them must cost nothing
(no regex compiled, no other module loaded).
"""

from __future__ import annotations

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
