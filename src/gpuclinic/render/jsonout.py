"""``--json``: the versioned report schema (``gpuclinic.report/2``).

The text is exactly ``json.dumps(d, indent=2, default=str)``.  With ``indent`` the standard library
uses its pure-Python encoder (generators per container), which was ~2 ms of a ~50 ms doctor run for a
~100 kB report; :func:`dumps_indented` writes the same text directly, with the C string escaper.
tests/core/test_jsonout.py compares the two on every scenario and on awkward values.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

from gpuclinic.diagnose import Report


def render_json(report: Report, *, include_facts: bool = True) -> str:
    return dumps_indented(report.to_dict(include_facts=include_facts))


def dumps_indented(obj: Any) -> str:
    """``json.dumps(obj, indent=2, default=str)``, faster."""
    out: list[str] = []
    try:
        _encode(obj, out, "\n")
    except (TypeError, ValueError, RecursionError):  # what the standard encoder reports, in its words
        return json.dumps(obj, indent=2, default=str)
    return "".join(out)


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == float("inf"):
        return "Infinity"
    if o == -float("inf"):
        return "-Infinity"
    return float.__repr__(o)


def _key(k: Any) -> str:
    """A dict key as the standard encoder converts it (str, float, bool, None, int; else TypeError)."""
    if isinstance(k, str):
        return k
    if isinstance(k, float):
        return _float(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return int.__repr__(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def _encode(o: Any, out: list[str], nl: str) -> None:
    """Append ``o`` at the indentation ``nl`` (newline + the current indent), in json's type order."""
    if isinstance(o, str):
        out.append(encode_basestring_ascii(o))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif isinstance(o, int):
        out.append(int.__repr__(o))
    elif isinstance(o, float):
        out.append(_float(o))
    elif isinstance(o, (list, tuple)):
        if not o:
            out.append("[]")
            return
        inner = nl + "  "
        out.append("[")
        for i, v in enumerate(o):
            out.append(inner if i == 0 else "," + inner)
            _encode(v, out, inner)
        out.append(nl + "]")
    elif isinstance(o, dict):
        if not o:
            out.append("{}")
            return
        inner = nl + "  "
        out.append("{")
        for i, (k, v) in enumerate(o.items()):
            out.append((inner if i == 0 else "," + inner) + encode_basestring_ascii(_key(k)) + ": ")
            _encode(v, out, inner)
        out.append(nl + "}")
    else:
        _encode(str(o), out, nl)  # default=str
