"""Generic dataclass <-> JSON conversion so snapshots round-trip through captures and ``--from``.

Type hints drive decoding, so fact classes stay plain dataclasses and unknown keys written by a
newer gpuclinic are ignored rather than fatal.
"""

from __future__ import annotations

import enum
import sys
import types
import typing
from typing import Any, TypeVar, Union

from gpuclinic.record import fields_of, has_default

T = TypeVar("T")

_HINTS: dict[type, dict[str, Any]] = {}


_PLAIN = frozenset({str, int, bool, type(None)})  # exact types: str/int enums must still become .value
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses, enums, tuples and dicts into JSON-ready values."""
    t = type(obj)
    if t in _PLAIN:  # the common case first: snapshots are mostly numbers and strings
        return obj
    if t is float:
        return None if obj != obj else obj  # NaN is not JSON
    names = _FIELD_NAMES.get(t)
    if names is None:
        names = _field_names(t)
    if names is not None:
        return {n: to_jsonable(getattr(obj, n)) for n in names}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def _field_names(t: type) -> tuple[str, ...] | None:
    """Field names of a record or dataclass type (cached), None for any other type.

    Records answer without ``dataclasses`` (whose import, with ``inspect``, costs every run ~10 ms).
    """
    rf = fields_of(t)
    if rf is not None:
        names = tuple(f[0] for f in rf)
    elif hasattr(t, "__dataclass_fields__"):
        import dataclasses

        names = tuple(f.name for f in dataclasses.fields(t))
    else:
        return None
    _FIELD_NAMES[t] = names
    return names


def _init_fields(t: type) -> list[tuple[str, bool]]:
    """(name, has a default) of the fields ``t.__init__`` takes."""
    rf = fields_of(t)
    if rf is not None:
        return [(f[0], has_default(f)) for f in rf]
    import dataclasses

    return [
        (f.name, f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
        for f in dataclasses.fields(t)
        if f.init
    ]


def _hints(cls: type) -> dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        rf = fields_of(cls)
        h = _record_hints(cls, rf) if rf is not None else typing.get_type_hints(cls)
        _HINTS[cls] = h
    return h


_ANNOTATION_CODE: dict[str, Any] = {}


def _record_hints(cls: type, rf: tuple[tuple[str, Any, int, Any], ...]) -> dict[str, Any]:
    """``typing.get_type_hints`` for a record class (no bases; plain annotations), evaluated the same
    way (module names first, then the class's), but each distinct annotation text compiled once: the
    fact classes repeat ``str | None`` and friends, and get_type_hints compiled every one of them again
    (~6% of a doctor run).  tests/core/test_record.py checks both agree on every record class."""
    module = sys.modules[cls.__module__].__dict__
    names = dict(vars(cls))
    out: dict[str, Any] = {}
    for name, tp, _, _ in rf:
        if isinstance(tp, str):
            code = _ANNOTATION_CODE.get(tp)
            if code is None:
                code = _ANNOTATION_CODE[tp] = compile(tp, "<annotation>", "eval")
            tp = eval(code, names, module)
        out[name] = type(None) if tp is None else tp
    return out


def from_jsonable(tp: Any, value: Any) -> Any:
    """Decode ``value`` as type ``tp`` (best effort: wrong shapes become None/defaults, never raise)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin is Union or (hasattr(types, "UnionType") and isinstance(tp, types.UnionType)):
        return _union(tp, value)
    if origin in (list, tuple, set, frozenset):
        return _collection(tp, origin, value)
    if origin is dict:
        dargs = typing.get_args(tp)
        vt = dargs[1] if len(dargs) == 2 else Any
        if not isinstance(value, dict):
            return {}
        return {k: from_jsonable(vt, v) for k, v in value.items()}
    if tp is Any:
        return value
    if isinstance(tp, type) and (fields_of(tp) is not None or hasattr(tp, "__dataclass_fields__")):
        return _dataclass(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    return _scalar(tp, value)


def _union(tp: Any, value: Any) -> Any:
    """The first member type of ``tp`` that decodes ``value`` to something."""
    for a in (a for a in typing.get_args(tp) if a is not type(None)):
        try:
            out = from_jsonable(a, value)
        except (TypeError, ValueError):
            continue
        if out is not None:
            return out
    return None


def _collection(tp: Any, origin: Any, value: Any) -> Any:
    targs = typing.get_args(tp)
    arg = targs[0] if targs else Any
    if not isinstance(value, list):
        return [] if origin is list else origin()
    items = [from_jsonable(arg, v) for v in value]
    return items if origin is list else origin(items)


def _dataclass(tp: type, value: Any) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"expected object for {tp.__name__}")
    hints = _hints(tp)
    kwargs = {}
    for name, optional in _init_fields(tp):
        if name in value:
            kwargs[name] = from_jsonable(hints[name], value[name])
            if kwargs[name] is None and optional:
                del kwargs[name]
    return tp(**kwargs)


def _scalar(tp: Any, value: Any) -> Any:
    """float/int/bool/str checked strictly (a bool is not a number); any other type passes through."""
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("not a number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("not an int")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError("not a bool")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise TypeError("not a string")
        return value
    return value
