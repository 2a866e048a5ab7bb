"""Compiled regexes kept across runs, the way Python keeps compiled bytecode.

``explain`` on a big log compiles ~250 patterns (the kernel-log, signature and format readers'), ~20 ms
of its run, and compiles them again on every run.  ``re`` cannot pickle a compiled pattern, but what it
compiles is plain data: its parser and code generator turn a pattern into a list of integers, its flags
and its groups, which ``_sre.compile`` makes into the ``re.Pattern``.  :func:`compile` keeps that data in
a file (where the package's bytecode goes, ``__pycache__`` or ``PYTHONPYCACHEPREFIX``, else under
``$XDG_CACHE_HOME/gpuclinic``), keyed
by the pattern, its flags and the exact Python build, and on the next run hands it to ``_sre.compile``
again.  The pattern built either way is equal (``==``) to ``re.compile``'s: tests/core compare them.

Python's own switches apply: with ``PYTHONDONTWRITEBYTECODE`` (``sys.dont_write_bytecode``) nothing is
written; ``GPUCLINIC_RECACHE=0`` turns the cache off.  Anything unexpected (another Python, a damaged or
foreign file, an unwritable directory, a changed internal API) falls back to ``re.compile`` silently:
the cache can only save time, never change an answer or fail a command.
"""

from __future__ import annotations

import atexit
import marshal
import os
import re
import sys
from typing import Any

Entry = tuple[int, list[int], int, dict[str, int], tuple[str | None, ...]]

_FILE = f"recache-{sys.implementation.cache_tag}.marshal"
_MAX_ENTRIES = 3000  # (every fixture through explain compiles ~670 patterns: a 0.6 MB file)
# flags whose patterns are kept (DEBUG prints while compiling, the deprecated TEMPLATE warns: re's own)
_PLAIN_FLAGS = int(re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII | re.UNICODE | re.LOCALE)
_state: dict[str, Any] = {"entries": None, "new": {}, "off": False, "registered": False}


def _key() -> tuple[str, int, int]:
    import _sre

    return (sys.version, int(_sre.MAGIC), int(_sre.CODESIZE))


def paths(name: str = _FILE) -> list[str]:
    """Where the cache file ``name`` may live, first choice first (``GPUCLINIC_RECACHE_DIR`` replaces
    both)."""
    override = os.environ.get("GPUCLINIC_RECACHE_DIR")
    if override:
        return [os.path.join(override, name)]
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.pycache_prefix:  # PYTHONPYCACHEPREFIX: where this package's bytecode goes, the cache goes too
        first = os.path.join(sys.pycache_prefix, here.lstrip(os.sep), name)
    else:
        first = os.path.join(here, "__pycache__", name)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [first, os.path.join(xdg, "gpuclinic", name)]


def switched_on() -> bool:
    """``GPUCLINIC_RECACHE=0`` turns off the caches kept beside the bytecode (these compiled regexes, and
    explain's scan plan: ``scanplan``)."""
    return os.environ.get("GPUCLINIC_RECACHE", "1") != "0"


def writable() -> bool:
    """Whether a cache file may be written: switched on, and bytecode writing not turned off."""
    return switched_on() and not sys.dont_write_bytecode


def write_atomic(path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` through a temporary file and a rename (a reader never sees half a file);
    False, leaving nothing behind, where that cannot be done."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return True
    except (OSError, ValueError):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def _enabled() -> bool:
    return (
        not _state["off"]
        and sys.version_info >= (3, 11)  # (re._parser and re._compiler: the 3.11+ layout)
        and switched_on()
    )


def _read(path: str) -> dict[tuple[str, int], Entry]:
    try:
        with open(path, "rb") as fh:
            blob = marshal.loads(fh.read())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not (isinstance(blob, tuple) and len(blob) == 2 and blob[0] == _key() and isinstance(blob[1], dict)):
        return {}
    return blob[1]


def _entries() -> dict[tuple[str, int], Entry]:
    known = _state["entries"]
    if known is None:
        known = {}
        for path in paths():
            known = _read(path)
            if known:
                break
        _state["entries"] = known
    return known  # type: ignore[no-any-return]


def _build(pattern: str, flags: int) -> Entry:
    """What ``re._compiler.compile`` hands ``_sre.compile`` for ``pattern`` (3.11+)."""
    from re import _compiler, _parser  # type: ignore[attr-defined]

    p = _parser.parse(pattern, flags)
    code = _compiler._code(p, flags)
    groupindex = dict(p.state.groupdict)
    indexgroup: list[str | None] = [None] * p.state.groups
    for name, i in groupindex.items():
        indexgroup[i] = name
    # (ints: the opcodes are an int subclass, which marshal does not write)
    groups = int(p.state.groups) - 1
    return (int(flags | p.state.flags), [int(c) for c in code], groups, groupindex, tuple(indexgroup))


def _make(pattern: str, e: Entry) -> re.Pattern[str]:
    import _sre

    flags, code, groups, groupindex, indexgroup = e
    made: re.Pattern[str] = _sre.compile(pattern, flags, code, groups, groupindex, indexgroup)
    return made


def compile(pattern: str, flags: int | re.RegexFlag = 0) -> re.Pattern[str]:
    """``re.compile(pattern, flags)`` for a ``str`` pattern, from the cache when it holds it."""
    flags = int(flags)
    if not _enabled() or flags & ~_PLAIN_FLAGS or not isinstance(pattern, str):
        return re.compile(pattern, flags)
    key = (pattern, flags)
    try:
        e = _entries().get(key)
        if e is not None:
            return _make(pattern, e)
        e = _build(pattern, flags)
        made = _make(pattern, e)
    except re.error:
        raise  # a bad pattern: the same error re.compile gives
    except Exception:  # an internal API that changed, a damaged entry: stop using the cache
        _state["off"] = True
        return re.compile(pattern, flags)
    _state["new"][key] = e
    if not _state["registered"]:
        _state["registered"] = True
        atexit.register(save)
    return made


def save() -> None:
    """Write the patterns compiled in this run that the cache lacked (atomically; never raises)."""
    new: dict[tuple[str, int], Entry] = _state["new"]
    if not new or not writable() or not _enabled():
        return
    _state["new"] = {}
    for path in paths():
        merged = {**_read(path), **_entries(), **new}  # (another process may have written meanwhile)
        if len(merged) > _MAX_ENTRIES:
            merged = dict(list(merged.items())[-_MAX_ENTRIES:])
        try:
            blob = marshal.dumps((_key(), merged))
        except ValueError:
            return
        if write_atomic(path, blob):
            return
