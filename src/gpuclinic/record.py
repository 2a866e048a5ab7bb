"""``@record``: a dataclass that costs next to nothing to define.

``dataclasses.dataclass`` writes ``__init__``, ``__repr__`` and ``__eq__`` (for a frozen class also
``__setattr__``, ``__delattr__`` and ``__hash__``) as source text and compiles it when the class is
created, and importing ``dataclasses`` imports ``inspect``.  For the ~35 classes every
``gpuclinic doctor`` run defines (facts, findings, knowledge entries) that was ~40% of the run's
instructions.  ``record`` reads the fields from the class annotations, installs shared methods that
walk the field list when called, and becomes a real dataclass (``__dataclass_fields__``, so
``dataclasses.fields()``, ``asdict()``, ``replace()``, ``is_dataclass()``) the first time anything
asks for that.  The type checker sees ``dataclasses.dataclass`` and ``dataclasses.field``.
tests/core/test_record.py checks every record class against its dataclass twin.

Supported: plain and ``frozen=True`` classes of fields with defaults and default factories, a
``__post_init__`` without arguments, no dataclass bases; anything else is refused when the class is
defined.  :func:`fields_of` gives
the field list without importing ``dataclasses`` (serialisation uses it).
"""

from __future__ import annotations

import _thread
from typing import TYPE_CHECKING, Any

__all__ = ["field", "fields_of", "has_default", "record"]

_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()
_REQUIRED, _VALUE, _FACTORY = 0, 1, 2
# per field: (name, annotation as written, kind, default value or factory)
RecordField = tuple[str, Any, int, Any]
_running: set[tuple[int, int]] = set()  # repr recursion guard, as dataclasses' _recursive_repr


class _FieldSpec:
    """What ``field(...)`` returns at run time; replaced by the plain default on the class."""

    __slots__ = ("default", "default_factory")

    def __init__(self, default: Any, default_factory: Any) -> None:
        self.default, self.default_factory = default, default_factory


if TYPE_CHECKING:
    from dataclasses import dataclass as record
    from dataclasses import field
else:

    def record(cls: type | None = None, /, *, frozen: bool = False) -> Any:
        """Like ``@dataclass`` / ``@dataclass(frozen=True)``."""

        def wrap(c: type) -> type:
            return _install(c, frozen)

        return wrap if cls is None else wrap(cls)

    def field(*, default: Any = _MISSING, default_factory: Any = _MISSING) -> Any:
        """Like ``dataclasses.field`` with only ``default`` or ``default_factory``."""
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        return _FieldSpec(default, default_factory)


def fields_of(cls: type) -> tuple[RecordField, ...] | None:
    """The fields of a record class (None for anything else), without making it a dataclass."""
    got: tuple[RecordField, ...] | None = cls.__dict__.get("__record_fields__")
    return got


def has_default(f: RecordField) -> bool:
    """Whether a field of :func:`fields_of` may be left out of the constructor call."""
    return f[2] != _REQUIRED


def _plan(cls: type[Any]) -> tuple[RecordField, ...]:
    """The fields from the class body, checked as dataclasses checks them."""
    out: list[RecordField] = []
    for name, tp in cls.__dict__.get("__annotations__", {}).items():
        if str(tp).replace("typing.", "").replace("dataclasses.", "").startswith(("ClassVar", "InitVar")):
            raise TypeError(f"@record {cls.__qualname__}.{name}: ClassVar and InitVar need @dataclass")
        v = cls.__dict__.get(name, _MISSING)
        if isinstance(v, _FieldSpec):
            kind, default = (_VALUE, v.default) if v.default is not _MISSING else (
                (_FACTORY, v.default_factory) if v.default_factory is not _MISSING else (_REQUIRED, None))
        elif v is _MISSING:
            kind, default = _REQUIRED, None
        elif type(v).__module__ == "dataclasses":  # dataclasses.field(): options record does not have
            raise TypeError(f"@record {cls.__qualname__}.{name}: use gpuclinic.record.field or @dataclass")
        elif type(v).__hash__ is None:
            raise ValueError(f"mutable default {type(v)} for field {name}: use default_factory")
        else:
            kind, default = _VALUE, v
        if kind == _REQUIRED and any(k != _REQUIRED for _, _, k, _ in out):
            raise TypeError(f"non-default argument {name!r} follows default argument")
        out.append((name, tp, kind, default))
    return tuple(out)


def _install(cls: type[Any], frozen: bool) -> type[Any]:
    clash = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"} & set(cls.__dict__)
    based = any(hasattr(b, "__dataclass_fields__") for b in cls.__mro__[1:])
    if clash or based:
        raise TypeError(f"@record {cls.__qualname__}: own {sorted(clash)} or dataclass base: use @dataclass")
    plan = _plan(cls)
    for name, _, kind, default in plan:  # the class keeps plain defaults, as a dataclass does
        if kind == _VALUE:
            setattr(cls, name, default)
        elif name in cls.__dict__:
            delattr(cls, name)
    names = tuple(p[0] for p in plan)
    methods: dict[str, Any] = {
        "__record_fields__": plan,
        "__record_frozen__": frozen,
        "__match_args__": names,
        "__init__": _init_fn(cls, plan, post_init=hasattr(cls, "__post_init__")),
        "__repr__": _repr_fn(names),
        "__eq__": _eq_fn(names),
        "__hash__": _hash_fn(names) if frozen else None,  # eq without frozen: unhashable, as dataclass
        "__dataclass_fields__": _AsDataclass(cls, "__dataclass_fields__"),
        "__dataclass_params__": _AsDataclass(cls, "__dataclass_params__"),
    }
    if frozen:
        methods["__setattr__"], methods["__delattr__"] = _frozen_fns(cls, frozenset(names))
    for name, fn in methods.items():
        setattr(cls, name, fn)
    return cls


class _AsDataclass:
    """``__dataclass_fields__``/``__dataclass_params__`` until first read: then the class goes through
    ``dataclasses.dataclass`` (fields only; it keeps the record methods) and the real ones replace it."""

    def __init__(self, cls: type[Any], attr: str) -> None:
        self.cls, self.attr = cls, attr

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        cls = self.cls
        if isinstance(cls.__dict__.get("__dataclass_fields__"), _AsDataclass):
            import dataclasses

            delattr(cls, "__dataclass_fields__")
            delattr(cls, "__dataclass_params__")
            for name, _, kind, default in cls.__record_fields__:
                if kind == _FACTORY:
                    setattr(cls, name, dataclasses.field(default_factory=default))
            dataclasses.dataclass(cls, init=False, repr=False, eq=False)
        return cls.__dict__[self.attr]


def _init_fn(cls: type[Any], plan: tuple[RecordField, ...], *, post_init: bool) -> Any:
    """``__init__`` taking the fields in order, by position or name; values go straight into the
    instance dict (what the generated code does for these plain-attribute classes, frozen or not);
    then ``__post_init__()`` if the class has one, as dataclasses does."""
    order = tuple(p[0] for p in plan)
    steps = tuple((p[0], p[2], p[3]) for p in plan)
    where = f"{cls.__qualname__}.__init__()"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            if len(args) > len(order):
                raise TypeError(f"{where} takes {len(order) + 1} positional arguments, {len(args) + 1} given")
            for name, value in zip(order, args, strict=False):
                if name in kwargs:
                    raise TypeError(f"{where} got multiple values for argument {name!r}")
                kwargs[name] = value
        d = self.__dict__
        for name, kind, default in steps:
            if name in kwargs:
                d[name] = kwargs.pop(name)
            elif kind == _VALUE:
                d[name] = default
            elif kind == _FACTORY:
                d[name] = default()
            else:
                raise TypeError(f"{where} missing required argument: {name!r}")
        if kwargs:
            raise TypeError(f"{where} got an unexpected keyword argument {next(iter(kwargs))!r}")
        if post_init:
            self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _repr_fn(names: tuple[str, ...]) -> Any:
    def __repr__(self: Any) -> str:
        key = (id(self), _thread.get_ident())
        if key in _running:
            return "..."
        _running.add(key)
        try:
            inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
            return f"{self.__class__.__qualname__}({inner})"
        finally:
            _running.discard(key)

    return __repr__


def _eq_fn(names: tuple[str, ...]) -> Any:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)
        return NotImplemented

    return __eq__


def _hash_fn(names: tuple[str, ...]) -> Any:
    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in names))

    return __hash__


def _frozen_fns(cls: type[Any], names: frozenset[str]) -> tuple[Any, Any]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise _frozen_error(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise _frozen_error(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _frozen_error(msg: str) -> Exception:
    from dataclasses import FrozenInstanceError  # imported only when someone tries to assign

    return FrozenInstanceError(msg)
