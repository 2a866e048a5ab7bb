"""``doctor --from ... --show-unread``: how each input was split, and the lines no parser read."""

from __future__ import annotations

from gpuclinic.facts.snapshot import Snapshot


def unread_text(snap: Snapshot) -> str:
    out: list[str] = []
    for rec in snap.input_records:
        segs = ", ".join(
            f"{s.kind} {s.first}-{s.last}" if s.first is not None else (s.title or s.kind)
            for s in rec.segments[:40]
        )
        more = f" (+{len(rec.segments) - 40} more)" if len(rec.segments) > 40 else ""
        out.append(
            f"{rec.input}: {rec.kind}, {rec.lines} line(s); read by {', '.join(rec.readers) or 'nothing'}"
        )
        if segs:
            out.append(f"  segments: {segs}{more}")
        if rec.streamed:
            out.append(
                "  streamed through the kernel-log scan (too large to segment); other formats in it are not "
                "read"
            )
        out.append(f"  unread lines: {rec.unclaimed}")
        for n, line in rec.unread:
            out.append(f"  {n:>6}: {line}")
        if rec.unclaimed > len(rec.unread):
            out.append(f"  ... {rec.unclaimed - len(rec.unread)} more")
    return "\n".join(out) if out else "no evidence inputs"
