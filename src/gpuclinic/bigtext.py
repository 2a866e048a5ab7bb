"""A big text input held as its UTF-8 bytes and its lines, never as one string unless something asks.

A 19 MB training log with one box-drawing character decodes into 38 MB of UCS-2: ~40 ms to decode and
~10 ms more to split into its 230,000 lines.  Decoded in pieces of whole lines instead, every piece
without such a character is one byte per character (the decoder's fast path), and the lines come from the
pieces.  Almost everything ``explain`` does with a big input goes through its lines, grep's scans of its
bytes and identity-keyed caches (``textscan``); what needs the whole string (a regex over all of it, a
fallback path) calls ``str()`` and gets it built once, by joining the pieces.

``Text`` (``str | BigText``) is what the explain path takes: mypy then names every place that used a
text as a string, and each either has an exact answer from the lines or bytes or builds the string.
"""

from __future__ import annotations

PIECE = 64 * 1024  # bytes per piece (then on to the end of that line)


class BigText:
    """The text whose UTF-8 bytes are ``data`` (valid UTF-8, no NUL, no carriage return: what
    :func:`from_bytes` accepts), in pieces of whole lines."""

    __slots__ = ("_len", "_lines", "_str", "data", "pieces")

    def __init__(self, data: bytes, pieces: tuple[str, ...]) -> None:
        self.data = data
        self.pieces = pieces  # each ends with a newline but the last
        self._lines: list[str] | None = None
        self._str: str | None = None
        self._len: int | None = None

    def __str__(self) -> str:
        """The whole text (built on the first call, then kept)."""
        if self._str is None:
            self._str = "".join(self.pieces)
        return self._str

    def __len__(self) -> int:
        """Its length in characters, as ``len(str(self))``."""
        if self._len is None:
            self._len = sum(map(len, self.pieces))
        return self._len

    def __repr__(self) -> str:
        return f"BigText({len(self.data)} bytes, {len(self.pieces)} pieces)"

    def lines(self, only_newlines: bool) -> list[str]:
        """``str(self).splitlines()``, from the pieces (each ends at a line's end, so a break never straddles
        two).  ``only_newlines``: the bytes hold no other line break than ``\\n`` (``textscan``): then
        ``split("\\n")``, cheaper.  The list is kept and shared: not to be modified."""
        if self._lines is None:
            out: list[str] = []
            if only_newlines:
                for p in self.pieces:
                    out += p.split("\n")
                    if p.endswith("\n"):
                        out.pop()  # (the empty string after the piece's last newline)
            else:
                for p in self.pieces:
                    out += p.splitlines()
            self._lines = out
        return self._lines

    def head(self, n: int) -> str:
        """``str(self)[:n]`` without building the whole string."""
        if self._str is not None:
            return self._str[:n]
        got, size = [], 0
        for p in self.pieces:
            if size >= n:
                break
            got.append(p)
            size += len(p)
        return "".join(got)[:n]

    def tail(self, n: int) -> str:
        """``str(self)[-n:]`` (n > 0) without building the whole string."""
        if self._str is not None:
            return self._str[-n:]
        got, size = [], 0
        for p in reversed(self.pieces):
            if size >= n:
                break
            got.append(p)
            size += len(p)
        return "".join(reversed(got))[-n:]

    def endswith_newline(self) -> bool:
        return self.data.endswith(b"\n")


Text = str | BigText


def from_bytes(data: bytes) -> BigText | None:
    """``data`` as a :class:`BigText`, or None when it is not valid UTF-8 (the caller's decoder then
    replaces what is not).  The caller has checked it holds no NUL and no carriage return."""
    pieces: list[str] = []
    pos, n = 0, len(data)
    try:
        while pos < n:
            cut = data.find(b"\n", pos + PIECE)
            end = n if cut < 0 else cut + 1
            pieces.append(data[pos:end].decode("utf-8"))  # (whole lines: no character is split)
            pos = end
    except UnicodeDecodeError:
        return None
    return BigText(data, tuple(pieces))


def as_str(text: Text) -> str:
    """The whole text as a string (built once for a :class:`BigText`)."""
    return text if isinstance(text, str) else str(text)


def head(text: Text, n: int) -> str:
    return text[:n] if isinstance(text, str) else text.head(n)


def tail(text: Text, n: int) -> str:
    return text[-n:] if isinstance(text, str) else text.tail(n)


__all__ = ["PIECE", "BigText", "Text", "as_str", "from_bytes", "head", "tail"]
