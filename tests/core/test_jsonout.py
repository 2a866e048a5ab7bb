"""The --json text is exactly what ``json.dumps(indent=2, default=str)`` writes (render/jsonout.py)."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclinic.diagnose import diagnose
from gpuclinic.model import Family, Severity
from gpuclinic.render.jsonout import dumps_indented, render_json
from gpuclinic.sources.scenarios import list_scenarios, load_scenario


def _std(o: Any) -> str:
    return json.dumps(o, indent=2, default=str)


@pytest.mark.parametrize("name", [n for n, _ in list_scenarios()])
def test_every_scenario_report_is_byte_identical(name: str) -> None:
    report = diagnose(load_scenario(name))
    d = report.to_dict()
    assert render_json(report) == _std(d)
    assert dumps_indented(report.to_dict(include_facts=False)) == _std(report.to_dict(include_facts=False))


class _Colour(enum.Enum):
    RED = "red"


def test_awkward_values_match() -> None:
    o = {
        "nan": math.nan,
        "inf": [math.inf, -math.inf, 1e300, -0.0, 0.1],
        7: "int key",
        2.5: "float key",
        True: "bool key",
        None: "none key",
        "enums": [Severity.CRITICAL, Family.HEAT, _Colour.RED],
        "nested": {"empty_list": [], "empty_dict": {}, "tuple": (1, (2, [])), "set": {3}},
        "text": 'quote " backslash \\ newline \n tab \t unicode é ☃ \U0001f600 \x00',
        "object": object.__new__(_Plain),
    }
    assert dumps_indented(o) == _std(o)
    assert dumps_indented([]) == "[]" and dumps_indented("x") == '"x"' and dumps_indented(None) == "null"


class _Plain:
    def __str__(self) -> str:
        return "plain"


def test_errors_are_the_standard_ones() -> None:
    bads: list[dict[Any, Any]] = [{(1, 2): "tuple key"}, {"k": {frozenset(): 1}}]
    for bad in bads:
        with pytest.raises(TypeError) as ours:
            dumps_indented(bad)
        with pytest.raises(TypeError) as std:
            _std(bad)
        assert str(ours.value) == str(std.value)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        dumps_indented(loop)


_keys = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_json)
def test_any_json_value_matches(o: Any) -> None:
    assert dumps_indented(o) == _std(o)
