"""Reading a BMC dump that was cut off: the complete part of a truncated JSON text, and why it is partial.

People paste Redfish documents and ``sensors -j`` output into issues and chats, and the paste often
ends early (a size limit, a terminal scroll-back, a copy that stopped at the screen's edge).  A reader
that gives up on the first syntax error would then drop every event the paste does hold - and call the
node healthy.  :func:`loads_partial` keeps each member that is complete before the cut and closes the
brackets left open; the caller reports the input as partly read (``RoomFacts.partial``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuclinic.facts.snapshot import Snapshot

PARTIAL = "evidence.partial"

MAX_TRIES = 64  # cut points tried from the end: each is one json.loads of the text before it
_CLOSE = {"{": "}", "[": "]"}


def _cut_points(text: str) -> list[tuple[int, str]]:
    """(position, closing brackets) where the text can end after a complete value, last first.

    A cut point is the end of the text, the place before each ``,`` separating members, and the place
    after each ``}``/``]``; the closers are those of the brackets open there (outside strings)."""
    stack: list[str] = []
    points: list[tuple[int, str]] = []
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if not stack or _CLOSE[stack[-1]] != ch:
                break  # not JSON from here on: what came before may still be
            stack.pop()
            points.append((i + 1, "".join(_CLOSE[b] for b in reversed(stack))))
        elif ch == ",":
            points.append((i, "".join(_CLOSE[b] for b in reversed(stack))))
    else:
        if not in_str:
            points.append((len(text), "".join(_CLOSE[b] for b in reversed(stack))))
    points.reverse()
    return points


def loads_partial(text: str, lead: str = "") -> tuple[Any, str | None]:
    """``(data, why)``: the parsed JSON and None when it is whole, else the complete part before the
    cut and a sentence saying how much was read.  ``lead`` is put before ``text`` (``"["``: members
    copied out of a list).  Raises ``ValueError`` when nothing before the cut parses."""
    try:
        return json.loads(lead + text), None
    except ValueError:
        pass
    body = lead + text.rstrip()
    for pos, closers in _cut_points(body)[:MAX_TRIES]:
        head = body[:pos].rstrip().rstrip(",")
        try:
            data = json.loads(head + closers)
        except ValueError:
            continue
        if data in ({}, []):
            break  # nothing complete before the cut
        if pos >= len(body):
            n = len(closers) - len(lead)
            return data, f"JSON is cut off ({n} bracket(s) never closed): read what it holds"
        return data, (
            f"JSON is cut off or broken at character {pos - len(lead)} of {len(body) - len(lead)}: read "
            f"what is complete before it, the last {len(body) - pos} characters are not read"
        )
    raise ValueError("not JSON, and no complete member before the first error")


def cut_last_row(text: str) -> str | None:
    """Why a table or CSV dump (ipmitool, FreeIPMI, a BMC's CSV export) looks cut off: its last line has
    fewer separators than the rows above (``17,2024/07/04 07`` under ``16,2024/07/04 07:09:29,FANA,Fan,...``).
    None when it ends on a whole row."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 3:
        return None
    last = lines[-1]
    for sep in ("|", ","):
        counts = [ln.count(sep) for ln in lines[:-1] if ln.count(sep) >= 2]
        if len(counts) < 2:
            continue
        usual = max(set(counts), key=counts.count)
        if 0 < last.count(sep) < usual and counts.count(usual) * 2 > len(counts):
            return (f"the last line has {last.count(sep) + 1} of the {usual + 1} fields of the rows above it "
                    f"(cut off?): {last.strip()[:80]}")
        return None
    return None


def note_partial(snap: Snapshot, origin: str, why: str) -> None:
    """Say on ``snap`` that ``origin`` was read only in part: a note and an INFO finding
    (``evidence.partial``), so a report of it never reads as if the whole input had been judged."""
    from gpuclinic.facts.evidence import Signal
    from gpuclinic.knowledge import codes

    snap.notes.append(f"{origin}: {why}")
    ci = codes.require(PARTIAL)
    snap.signals.append(
        Signal(
            code=PARTIAL,
            severity=codes.severity(PARTIAL).name.lower(),
            family=ci.family.value,
            title=ci.title,
            line=why,
            input=origin,
            remedy="Get the whole output (the paste or file ends early) and run this again on it; "
            "what was read is judged above.",
            source=ci.source,
            data={"signature": PARTIAL},
        )
    )
