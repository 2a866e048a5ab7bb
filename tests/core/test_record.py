"""``@record`` classes behave as the dataclasses they replace (gpuclinic/record.py: issue 14 start-up)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import pickle
import pkgutil
from typing import Any

import pytest

import gpuclinic
from gpuclinic.record import fields_of, record


def _record_classes() -> list[type[Any]]:
    out: dict[str, type[Any]] = {}
    for m in pkgutil.walk_packages(gpuclinic.__path__, "gpuclinic."):
        if m.name.startswith(("gpuclinic.cli", "gpuclinic.__main__")):
            continue
        mod = importlib.import_module(m.name)
        for v in vars(mod).values():
            if isinstance(v, type) and fields_of(v) is not None:
                out[f"{v.__module__}.{v.__qualname__}"] = v
    return [out[k] for k in sorted(out)]


CLASSES = _record_classes()


def _frozen(cls: type[Any]) -> bool:
    return getattr(cls.__setattr__, "__module__", "") == "gpuclinic.record"


def _twin(cls: type[Any]) -> type[Any]:
    """The same class made by dataclasses.dataclass, from the record's own field list."""
    rf = fields_of(cls)
    assert rf is not None
    ns: dict[str, Any] = {"__annotations__": {}, "__module__": cls.__module__}
    ns["__qualname__"] = cls.__qualname__
    if "__post_init__" in cls.__dict__:
        ns["__post_init__"] = cls.__dict__["__post_init__"]
    for name, tp, kind, default in rf:
        ns["__annotations__"][name] = tp
        if kind == 1:
            ns[name] = default
        elif kind == 2:
            ns[name] = dataclasses.field(default_factory=default)
    return dataclasses.dataclass(frozen=_frozen(cls))(type(cls.__name__, (), ns))


def _values(cls: type[Any], salt: int = 0) -> dict[str, Any]:
    return {f.name: (i + salt, f"v{i}") for i, f in enumerate(dataclasses.fields(cls))}


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
def test_record_becomes_the_same_dataclass(cls: type[Any]) -> None:
    """dataclasses.fields() (first use turns the record into a dataclass) sees what the twin has."""
    twin = _twin(cls)
    assert dataclasses.is_dataclass(cls) and cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(")

    def view(c: type[Any]) -> list[tuple[Any, ...]]:
        return [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash)
                for f in dataclasses.fields(c)]

    assert view(cls) == view(twin)
    for name, _, kind, default in fields_of(cls) or ():
        assert getattr(cls, name, "absent") == (default if kind == 1 else "absent"), name


def test_the_doctor_path_classes_are_records() -> None:
    names = {c.__qualname__ for c in CLASSES}
    assert {"GpuFacts", "Snapshot", "Finding", "Incident", "GpuRef", "Skipped", "Report", "XidInfo"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
def test_record_behaves_as_its_dataclass_twin(cls: type[Any]) -> None:
    twin = _twin(cls)
    vals = _values(cls)
    a, t = cls(**vals), twin(**vals)
    assert repr(a) == repr(t)
    assert a == cls(*vals.values()) and not (a != cls(**vals))
    if vals:
        assert a != cls(**_values(cls, 1))
    assert a.__eq__(t) is NotImplemented and a != t
    assert dataclasses.asdict(a) == dataclasses.asdict(t)
    assert copy.deepcopy(a) == a and pickle.loads(pickle.dumps(a)) == a
    assert cls.__match_args__ == twin.__match_args__
    if _frozen(cls):
        assert hash(a) == hash(t)
        name = next(iter(vals), "anything")
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(a, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(a, name)
        assert dataclasses.replace(a, **{name: 5}) == cls(**{**vals, name: 5})
    else:
        with pytest.raises(TypeError):
            hash(a)
        for k in vals:  # plain attributes, as a non-frozen dataclass has
            setattr(a, k, "new")
            assert getattr(a, k) == "new"


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
def test_record_defaults_and_argument_errors_match(cls: type[Any]) -> None:
    twin = _twin(cls)
    required = {
        f.name: 1
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    a, t = cls(**required), twin(**required)
    assert repr(a) == repr(t)
    for f in dataclasses.fields(cls):  # a default factory makes a fresh value per instance
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(a, f.name) is not getattr(cls(**required), f.name)
    bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((), {**required, "no_such_field": 1})]
    bad.append(((0,) * (len(dataclasses.fields(cls)) + 1), {}))
    if required:
        bad.append(((), {k: v for k, v in list(required.items())[1:]}))
        first = next(iter(required))
        bad.append(((1,), {first: 1}))
    for args, kwargs in bad:
        for c in (cls, twin):
            with pytest.raises(TypeError):
                c(*args, **kwargs)


def test_record_runs_post_init_after_the_fields() -> None:
    @record
    class WithPostInit:
        """A test record."""

        x: int = 0
        doubled: int = 0

        def __post_init__(self) -> None:
            self.doubled = 2 * self.x

    assert WithPostInit(3).doubled == 6 and WithPostInit(x=4, doubled=1).doubled == 8


def test_record_refuses_what_it_does_not_implement() -> None:
    with pytest.raises(TypeError):

        @record
        class WithOwnEq:
            x: int = 0

            def __eq__(self, other: object) -> bool:
                return True

    with pytest.raises(TypeError):

        @record
        class WithInitFalse:
            x: int = dataclasses.field(default=0, init=False)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__qualname__ for c in CLASSES])
def test_serial_type_hints_are_typings(cls: type[Any]) -> None:
    """facts/serial.py evaluates record annotations itself (each text compiled once): same result."""
    import typing

    from gpuclinic.facts import serial, snapshot

    snapshot._resolve_fact_types()  # the names Snapshot's annotations use, as from_dict binds them
    serial._HINTS.pop(cls, None)
    try:
        want = typing.get_type_hints(cls)
    except NameError:
        with pytest.raises(NameError):
            serial._hints(cls)
        return
    assert serial._hints(cls) == want
