"""The expression language: each back end (numpy columns, scalars) gives Python's answers on
every row, and nothing outside the whitelist is accepted."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from octune.catalogue.expr import Expression
from octune.core.errors import SpaceError
from octune.core.expressions import ScalarExpression, Undefined

NAMES = ("a", "b", "c")


def ceil_div(a, b):
    return -(-a // b)


def round_up(a, multiple):
    return ceil_div(a, multiple) * multiple


def python_value(text, row):
    """The reference: plain Python on one row (eval is fine here: the text is ours)."""
    scope = {"min": min, "max": max, "ceil_div": ceil_div, "round_up": round_up, **row}
    return eval(text, {"__builtins__": {}}, scope)


def same(expected, actual):
    if isinstance(expected, float) or isinstance(actual, float):
        return math.isclose(expected, actual, rel_tol=1e-12, abs_tol=1e-12)
    return expected == actual


# --- random expressions compared with Python ----------------------------------------------

leaves = st.one_of(
    st.sampled_from(NAMES),
    st.integers(-12, 12).map(str),
    st.sampled_from(["True", "False", "0.5", "2.0", "-1.5"]),
)


def extend(children):
    binary = st.sampled_from(["+", "-", "*", "/", "//", "%"])
    comparison = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])
    return st.one_of(
        st.tuples(children, binary, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, comparison, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, comparison, children, comparison, children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]} {t[3]} {t[4]})"
        ),
        st.tuples(children, st.sampled_from(["and", "or"]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        children.map(lambda c: f"(not {c})"),
        children.map(lambda c: f"(-{c})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), st.lists(children, min_size=2, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"
        ),
        st.tuples(st.sampled_from(["ceil_div", "round_up"]), children, children).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})"
        ),
    )


# Powers only of leaves and at most squares, so no value leaves int64 and Python's ints agree.
powers = st.tuples(st.sampled_from(NAMES), st.integers(0, 2)).map(lambda t: f"({t[0]} ** {t[1]})")
expressions = st.recursive(st.one_of(leaves, powers), extend, max_leaves=8)
rows = st.lists(
    st.fixed_dictionaries({name: st.integers(-12, 12) for name in NAMES}), min_size=1, max_size=8
)


@settings(max_examples=500, deadline=None)
@given(text=expressions, rows=rows)
@example(text="not ceil_div(a, ceil_div(a, a))", rows=[{"a": 0, "b": 0, "c": 0}])
@example(text="(a // b if b else c % a) or b % c", rows=[{"a": 0, "b": 0, "c": 0}])
@example(text="a / b < c // a <= b % c", rows=[{"a": 1, "b": 0, "c": 2}, {"a": 2, "b": 1, "c": 0}])
def test_every_back_end_agrees_with_python_on_every_row(text, rows):
    expression = Expression(text, NAMES)
    positions = {name: i for i, name in enumerate(NAMES)}
    lookup = ScalarExpression(text, positions) if expression.vetted.integer else None
    columns = {name: np.array([row[name] for row in rows], dtype=np.int64) for name in NAMES}
    values, bad = expression.evaluate_masked(columns)
    values = np.broadcast_to(values, (len(rows),))
    bad = np.broadcast_to(bad, (len(rows),))
    holds = np.broadcast_to(expression.holds(columns), (len(rows),))
    for i, row in enumerate(rows):
        try:
            expected = python_value(text, row)
        except ZeroDivisionError:
            assert bad[i], f"row {row}: Python divides by zero"
            assert not holds[i]
            assert expression.holds(row) is False
            with pytest.raises(SpaceError, match="divides by zero"):
                expression.evaluate(row)
            if lookup is not None:
                with pytest.raises(Undefined):
                    lookup.evaluate([row[name] for name in NAMES])
            continue
        assert not bad[i], f"row {row}: marked bad but Python gives {expected!r}"
        assert same(expected, values[i].item()), f"row {row}: {expected!r} != {values[i]!r}"
        assert holds[i] == bool(expected)
        scalar = expression.evaluate(row)
        assert type(scalar) in (int, float, bool), type(scalar)
        assert same(expected, scalar), f"row {row}: scalar {scalar!r} != {expected!r}"
        assert expression.holds(row) is bool(expected)
        if lookup is not None:
            assert lookup.evaluate([row[name] for name in NAMES]) == expected, f"row {row}"


@pytest.mark.parametrize(
    ("text", "row", "expected"),
    [
        ("a + b * c - 1", {"a": 1, "b": 2, "c": 3}, 6),
        ("a // b", {"a": -7, "b": 2}, -4),
        ("a % b", {"a": -7, "b": 2}, 1),
        ("a / b", {"a": 7, "b": 2}, 3.5),
        ("a ** 3", {"a": -3}, -27),
        ("-a + +b", {"a": 4, "b": 1}, -3),
        ("a < b <= c", {"a": 1, "b": 2, "c": 2}, True),
        ("a < b <= c", {"a": 1, "b": 3, "c": 2}, False),
        ("1 < a < b < 9 != c", {"a": 2, "b": 3, "c": 9}, False),
        ("a and b", {"a": 3, "b": 5}, 5),
        ("a or b", {"a": 0, "b": 5}, 5),
        ("not a", {"a": 0}, True),
        ("a if b else c", {"a": 1, "b": 0, "c": 2}, 2),
        ("min(a, b, c)", {"a": 4, "b": -1, "c": 3}, -1),
        ("max(a, b)", {"a": 4, "b": 9}, 9),
        ("ceil_div(a, b)", {"a": 7, "b": 2}, 4),
        ("ceil_div(a, b)", {"a": 8, "b": 2}, 4),
        ("round_up(a, b)", {"a": 100, "b": 16}, 112),
        ("True + True", {}, 2),
    ],
)
def test_known_answers(text, row, expected):
    names = {*row, "a", "b", "c"}
    result = Expression(text, names).evaluate(row)
    assert result == expected
    assert type(result) is type(expected)


def test_names_and_text():
    expression = Expression("  MWG %\n   MDIMC == 0 and ceil_div(N, 2) > 0 ", ["MWG", "MDIMC", "N"])
    assert expression.names == frozenset({"MWG", "MDIMC", "N"})
    assert expression.text == "MWG % MDIMC == 0 and ceil_div(N, 2) > 0"


def test_array_results_follow_numpy_broadcasting_against_scalars():
    expression = Expression("a * limit <= 64", ["a", "limit"])
    result = expression.holds({"a": np.array([1, 2, 4, 8], dtype=np.int64), "limit": 16})
    assert result.tolist() == [True, True, True, False]


def test_division_by_zero_marks_only_the_rows_python_evaluates():
    a = np.array([6, 6, 6, 0], dtype=np.int64)
    b = np.array([3, 0, 4, 0], dtype=np.int64)
    guarded = Expression("b != 0 and a % b == 0", "ab")
    assert guarded.holds({"a": a, "b": b}).tolist() == [True, False, False, False]
    _, bad = guarded.evaluate_masked({"a": a, "b": b})
    assert not np.any(bad)
    unguarded = Expression("a % b == 0", "ab")
    _, bad = unguarded.evaluate_masked({"a": a, "b": b})
    assert bad.tolist() == [False, True, False, True]
    assert unguarded.holds({"a": a, "b": b}).tolist() == [True, False, False, False]
    ternary = Expression("a // b if b else -1", "ab")
    assert ternary.evaluate({"a": a, "b": b}).tolist() == [2, -1, 1, -1]


def test_scalar_division_by_zero_raises_a_one_line_error():
    expression = Expression("ceil_div(N, NWG) * 4", ["N", "NWG"], kind="launch global[0]")
    with pytest.raises(SpaceError) as caught:
        expression.evaluate({"N": 100, "NWG": 0})
    message = str(caught.value)
    assert "launch global[0] 'ceil_div(N, NWG) * 4' divides by zero" in message
    assert "NWG=0" in message
    assert "\n" not in message
    assert expression.holds({"N": 100, "NWG": 0}) is False


def test_int64_wraps_the_same_in_scalars_and_arrays():
    expression = Expression("a * a * a", "a")
    big = 2**40
    array = expression.evaluate({"a": np.array([big], dtype=np.int64)})
    assert expression.evaluate({"a": big}) == int(array[0])


def test_numpy_scalars_in_env_give_python_results():
    result = Expression("a // 2", "a").evaluate({"a": np.int64(9)})
    assert result == 4
    assert type(result) is int


def test_missing_value_is_reported():
    with pytest.raises(SpaceError, match="no value for b"):
        Expression("a + b", "ab").evaluate({"a": 1})


# --- rejection ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        ("__import__('os').system('x')", "call to '__import__('os').system'"),
        ("().__class__", "attribute access '().__class__'"),
        ("a.__class__", "attribute access 'a.__class__'"),
        ("open('f')", "call to 'open'"),
        ("eval('1')", "call to 'eval'"),
        ("lambda: 1", "lambda"),
        ("[x for x in a]", "comprehension '[x for x in a]'"),
        ("sum(x for x in a)", "call to 'sum'"),
        ("a.real", "attribute access 'a.real'"),
        ("a[0]", "subscript 'a[0]'"),
        ("'abc'", "string 'abc'"),
        ("b'abc'", "string b'abc'"),
        ("f'{a}'", "string f'{a}'"),
        ("2**10**10", "exponent in '2**10**10'"),
        ("a ** 100", "exponent in 'a ** 100'"),
        ("a ** b", "exponent in 'a ** b'"),
        ("a ** -1", "exponent in 'a ** -1'"),
        ("a ** 2.0", "exponent in 'a ** 2.0'"),
        ("min(a, b, key=c)", "keyword argument"),
        ("max(*a)", "unpacking '*a'"),
        ("a & b", "operator '&'"),
        ("a << 2", "operator '<<'"),
        ("~a", "bitwise '~'"),
        ("a is b", "operator 'is'"),
        ("a in b", "operator 'in'"),
        ("(a, b)", "literal '(a, b)'"),
        ("[a]", "literal '[a]'"),
        ("{a: b}", "literal '{a: b}'"),
        ("(c := 1)", "assignment"),
        ("None", "constant 'None'"),
        ("...", "constant '...'"),
        ("1j", "constant '1j'"),
        ("__a__ + 1", "dunder name '__a__'"),
        ("__builtins__", "dunder name '__builtins__'"),
        ("99999999999999999999999", "integer 99999999999999999999999"),
        ("1e999", "non-finite number 1e999"),
        ("a if b", "syntax error"),
        ("a = 1", "syntax error"),
        ("import os", "syntax error"),
        ("a; b", "syntax error"),
        ("", "empty"),
        ("min(a)", "min takes at least 2 arguments, not 1"),
        ("ceil_div(a, b, c)", "ceil_div takes 2 arguments, not 3"),
    ],
)
def test_unsafe_or_unsupported_input_is_rejected_at_parse_time(text, piece):
    with pytest.raises(SpaceError) as caught:
        Expression(text, ["a", "b", "c"], kind="constraint")
    message = str(caught.value)
    assert piece in message
    assert "\n" not in message
    if text:
        assert f"constraint '{text}'" in message or "constraint" in message


def test_unknown_name_suggests_the_closest_known_one():
    with pytest.raises(SpaceError) as caught:
        Expression("MWGG % MDIMC == 0", ["KWG", "MDIMC", "MWG"], kind="constraint")
    message = str(caught.value)
    assert message.startswith("unknown name 'MWGG' in constraint 'MWGG % MDIMC == 0'")
    assert "did you mean 'MWG'?" in message
    assert "known: KWG, MDIMC, MWG" in message


def test_unknown_name_without_a_close_match_lists_the_known_names():
    with pytest.raises(SpaceError) as caught:
        Expression("zzz > 1", ["KWG", "MWG"])
    assert "did you mean" not in str(caught.value)
    assert "known: KWG, MWG" in str(caught.value)


def test_builtins_are_just_unknown_names():
    with pytest.raises(SpaceError, match="unknown name 'min'"):
        Expression("min + 1", ["a"])


def test_very_long_or_deep_expressions_are_rejected():
    with pytest.raises(SpaceError, match="too long"):
        Expression("+".join(["a"] * 1500), ["a"])
    with pytest.raises(SpaceError, match="nested too deeply"):
        Expression("-" * 300 + "a", ["a"])
