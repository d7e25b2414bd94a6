"""The numpy back end of octune's expression language (``octune.core.expressions``): one
vetted tree evaluates one config (plain ints, Python semantics) or a whole column of candidate
configs at once (numpy arrays), which is what makes enumerating tens of millions of candidates
affordable.

Division by zero never raises during evaluation: each evaluation returns a *bad* mask that
marks the rows where the expression could not be computed, following Python's short-circuit
rules (``y != 0 and x % y == 0`` is fine where ``y == 0``). Constraints treat bad rows as not
satisfied; launch sizes turn them into a ``SpaceError``. Arithmetic that overflows int64 wraps
around in both the scalar and the vectorised path, so a config is judged the same way by both.
"""

from __future__ import annotations

import ast
import difflib
import functools
import operator
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from octune.core.errors import SpaceError
from octune.core.expressions import COMPARISONS, ExpressionError, Vetted, vet, wrap

Scalar: TypeAlias = int | float | bool
Value: TypeAlias = Scalar | NDArray[Any]
Mask: TypeAlias = bool | NDArray[np.bool_]
_Node: TypeAlias = Callable[[Mapping[str, Value]], tuple[Value, Mask]]


class Expression:
    """One vetted expression; evaluating it never executes user text."""

    __slots__ = ("_root", "kind", "names", "text", "vetted")

    def __init__(
        self, text: str, known_names: Collection[str], *, kind: str = "expression"
    ) -> None:
        """Vet ``text`` now, so a bad space fails at load time, not mid-tuning.

        ``kind`` says where the expression comes from ("constraint", "derived MWI", ...)
        and appears in every message.
        """
        self.kind = kind
        try:
            self.vetted: Vetted = vet(text, kind)
        except ExpressionError as error:
            raise SpaceError(str(error)) from None
        self.text = self.vetted.text
        self.names: frozenset[str] = frozenset(self.vetted.names)
        unknown = [name for name in self.vetted.names if name not in known_names]
        if unknown:
            raise SpaceError(_unknown_name_message(unknown[0], self.text, kind, known_names))
        self._root = _compile(self.vetted.tree)

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"

    def evaluate_masked(self, env: Mapping[str, Value]) -> tuple[Value, Mask]:
        """Evaluate and also return where evaluation failed, so callers choose what that means.

        ``env`` maps each name to an int/float/bool or a numpy array (one entry per candidate);
        arrays broadcast against scalars. The mask is ``False``, ``True`` or a bool array.
        """
        missing = self.names - env.keys()
        if missing:
            raise SpaceError(
                f"no value for {', '.join(sorted(missing))} when evaluating "
                f"{self.kind} '{self.text}'"
            )
        with np.errstate(all="ignore"):
            return self._root(env)

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        """Evaluate where a failure is the user's to fix (e.g. a launch size dividing by zero)."""
        value, bad = self.evaluate_masked(env)
        if any_true(bad):
            if isinstance(bad, np.ndarray):
                where = f"in {int(np.count_nonzero(bad))} of {bad.size} rows"
            elif is_array(*(env[name] for name in self.names)):
                where = "in every row"
            else:
                where = "with " + describe(self.names, env)
            raise SpaceError(
                f"{self.kind} '{self.text}' divides by zero {where}; "
                "guard the divisor, e.g. 'x // y if y else 0', or add a constraint"
            )
        return value

    def holds(self, env: Mapping[str, Value]) -> bool | NDArray[np.bool_]:
        """Truth per row, with rows that cannot be evaluated counted as not holding."""
        value, bad = self.evaluate_masked(env)
        truth = _truth(value)
        if bad is False:
            return truth
        if isinstance(truth, bool) and isinstance(bad, bool):
            return truth and not bad
        return np.logical_and(truth, np.logical_not(bad))


def _unknown_name_message(name: str, text: str, kind: str, known_names: Collection[str]) -> str:
    known = sorted(known_names)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    listed = ", ".join(known[:40]) + (", ..." if len(known) > 40 else "")
    return f"unknown name '{name}' in {kind} '{text}'{hint}; known: {listed or '(none)'}"


def describe(names: Collection[str], env: Mapping[str, Value]) -> str:
    """``name=value`` of each of ``names`` that ``env`` binds, for messages."""
    return ", ".join(f"{name}={env[name]}" for name in sorted(names) if name in env)


def _compile(node: ast.expr) -> _Node:
    """Closures over a vetted tree."""
    match node:
        case ast.Constant(value=value):
            return _constant_node(value)
        case ast.Name(id=name):
            return _name_node(name)
        case ast.BinOp(left=left, op=ast.Pow(), right=ast.Constant(value=exponent)):
            return _pow_node(_compile(left), exponent)
        case ast.BinOp(left=left, op=op, right=right):
            return _binop_node(_BINARY[type(op)], _compile(left), _compile(right))
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return _not_node(_compile(operand))
        case ast.UnaryOp(op=op, operand=operand):
            return _unary_node(_neg if isinstance(op, ast.USub) else _pos, _compile(operand))
        case ast.BoolOp(op=op, values=values):
            return _boolop_node(isinstance(op, ast.And), [_compile(value) for value in values])
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            operands = [_compile(left)] + [_compile(c) for c in comparators]
            return _compare_node([COMPARISONS[type(op)] for op in ops], operands)
        case ast.IfExp(test=test, body=body, orelse=orelse):
            return _ifexp_node(_compile(test), _compile(body), _compile(orelse))
        case ast.Call(func=ast.Name(id="min"), args=args):
            return _reduce_node(np.minimum, min, [_compile(arg) for arg in args])
        case ast.Call(func=ast.Name(id="max"), args=args):
            return _reduce_node(np.maximum, max, [_compile(arg) for arg in args])
        case ast.Call(func=ast.Name(id=name), args=[a, b]):
            function = _ceil_div if name == "ceil_div" else _round_up
            return _binop_node(function, _compile(a), _compile(b))
    raise AssertionError(f"vet let through {ast.dump(node)}")  # pragma: no cover


# --- values -------------------------------------------------------------------------------


def is_array(*values: Value) -> bool:
    return any(isinstance(value, np.ndarray) for value in values)


def _operand(value: object) -> Value:
    """Accept ints, floats, bools and numpy arrays/scalars; numpy scalars become Python ones."""
    if isinstance(value, np.ndarray | bool | int | float):
        return value
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"expression values must be numbers or numpy arrays, not {type(value)}")


def _num(value: Value) -> Value:
    """Bools become ints before numpy arithmetic, so it follows Python (True + True == 2)."""
    if isinstance(value, np.ndarray) and value.dtype == np.bool_:
        return value.astype(np.int64)
    if isinstance(value, bool):
        return int(value)
    return value


def _wrap(value: Scalar) -> Scalar:
    return wrap(value) if type(value) is int else value


def _truth(value: Value) -> bool | NDArray[np.bool_]:
    if isinstance(value, np.ndarray):
        return value if value.dtype == np.bool_ else value != 0
    return bool(value)


def _is_boolish(value: Value) -> bool:
    return isinstance(value, bool) or (isinstance(value, np.ndarray) and value.dtype == np.bool_)


def any_true(mask: Mask) -> bool:
    """Whether a mask (a bool or a bool array) holds anywhere."""
    return bool(mask.any()) if isinstance(mask, np.ndarray) else bool(mask)


def _mask_or(a: Mask, b: Mask) -> Mask:
    if a is False:
        return b
    if b is False:
        return a
    if is_array(a, b):
        return np.logical_or(a, b)
    return bool(a or b)


def _mask_where(condition: bool | NDArray[np.bool_], bad: Mask) -> Mask:
    """``bad`` restricted to the rows where ``condition`` made Python evaluate that operand."""
    if bad is False or condition is False:
        return False
    if condition is True:
        return bad
    if is_array(condition, bad):
        return np.logical_and(condition, bad)
    return bool(condition and bad)


def negate(condition: bool | NDArray[np.bool_]) -> bool | NDArray[np.bool_]:
    if isinstance(condition, np.ndarray):
        return np.logical_not(condition)
    return not condition


def _select(condition: bool | NDArray[np.bool_], if_true: Value, if_false: Value) -> Value:
    if isinstance(condition, np.ndarray):
        return np.where(condition, if_true, if_false)
    return if_true if condition else if_false


# --- operations: each returns (value, bad) ------------------------------------------------


def _safe_divisor(divisor: Value) -> tuple[Value, Mask]:
    """Replace zero divisors by 1 and report where they were, instead of raising or warning."""
    if isinstance(divisor, np.ndarray):
        zero = divisor == 0
        if not zero.any():
            return divisor, False
        return np.where(zero, 1, divisor), zero
    if divisor == 0:
        return (1.0 if isinstance(divisor, float) else 1), True
    return divisor, False


def _arith(
    array_op: Callable[[Any, Any], Any], scalar_op: Callable[[Any, Any], Any]
) -> Callable[[Value, Value], tuple[Value, Mask]]:
    def apply(a: Value, b: Value) -> tuple[Value, Mask]:
        if is_array(a, b):
            return array_op(_num(a), _num(b)), False
        return _wrap(scalar_op(a, b)), False

    return apply


def _division(
    array_op: Callable[[Any, Any], Any], scalar_op: Callable[[Any, Any], Any]
) -> Callable[[Value, Value], tuple[Value, Mask]]:
    def apply(a: Value, b: Value) -> tuple[Value, Mask]:
        b, bad = _safe_divisor(b)
        if is_array(a, b):
            return array_op(_num(a), _num(b)), bad
        return _wrap(scalar_op(a, b)), bad

    return apply


def _ceil_div_values(a: Value, b: Value) -> Value:
    if is_array(a, b):
        return np.negative(np.floor_divide(np.negative(_num(a)), _num(b)))
    return _wrap(-(_wrap(-a) // b))


def _ceil_div(a: Value, b: Value) -> tuple[Value, Mask]:
    b, bad = _safe_divisor(b)
    return _ceil_div_values(a, b), bad


def _round_up(a: Value, multiple: Value) -> tuple[Value, Mask]:
    multiple, bad = _safe_divisor(multiple)
    blocks = _ceil_div_values(a, multiple)
    if is_array(blocks, multiple):
        return np.multiply(blocks, _num(multiple)), bad
    return _wrap(blocks * multiple), bad


def _neg(value: Value) -> Value:
    return np.negative(_num(value)) if isinstance(value, np.ndarray) else _wrap(-value)


def _pos(value: Value) -> Value:
    return _num(value) if isinstance(value, np.ndarray) else +value


def _power(value: Value, exponent: int) -> Value:
    if isinstance(value, np.ndarray):
        return np.power(_num(value), exponent)
    try:
        return _wrap(value**exponent)
    except OverflowError:  # a float too large; numpy gives inf
        return float("inf") if value > 0 or exponent % 2 == 0 else float("-inf")


_BINARY: dict[type[ast.operator], Callable[[Value, Value], tuple[Value, Mask]]] = {
    ast.Add: _arith(np.add, operator.add),
    ast.Sub: _arith(np.subtract, operator.sub),
    ast.Mult: _arith(np.multiply, operator.mul),
    ast.Div: _division(np.true_divide, operator.truediv),
    ast.FloorDiv: _division(np.floor_divide, operator.floordiv),
    ast.Mod: _division(np.remainder, operator.mod),
}
# --- nodes: closures over child nodes ----------------------------------------------------


def _constant_node(value: Scalar) -> _Node:
    result: tuple[Value, Mask] = (value, False)
    return lambda env: result


def _name_node(name: str) -> _Node:
    return lambda env: (_operand(env[name]), False)


def _binop_node(
    function: Callable[[Value, Value], tuple[Value, Mask]], left: _Node, right: _Node
) -> _Node:
    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        a, bad_a = left(env)
        b, bad_b = right(env)
        value, bad = function(a, b)
        return value, _mask_or(_mask_or(bad_a, bad_b), bad)

    return evaluate


def _pow_node(base: _Node, exponent: int) -> _Node:
    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        value, bad = base(env)
        return _power(value, exponent), bad

    return evaluate


def _unary_node(function: Callable[[Value], Value], operand: _Node) -> _Node:
    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        value, bad = operand(env)
        return function(value), bad

    return evaluate


def _not_node(operand: _Node) -> _Node:
    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        value, bad = operand(env)
        return negate(_truth(value)), bad

    return evaluate


def _boolop_node(is_and: bool, operands: list[_Node]) -> _Node:
    """Python's ``and``/``or``: the value of the deciding operand, per row."""
    first, rest = operands[0], operands[1:]

    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        value, bad = first(env)
        for operand in rest:
            truth = _truth(value)
            goes_on = truth if is_and else negate(truth)  # rows where Python evaluates `operand`
            following, bad_following = operand(env)
            bad = _mask_or(bad, _mask_where(goes_on, bad_following))
            if is_array(value, following) and _is_boolish(value) and _is_boolish(following):
                value = (np.logical_and if is_and else np.logical_or)(value, following)
            elif is_and:
                value = _select(truth, following, value)
            else:
                value = _select(truth, value, following)
        return value, bad

    return evaluate


def _compare_node(functions: list[Callable[[Any, Any], Any]], operands: list[_Node]) -> _Node:
    """Chained comparisons: ``a < b <= c`` is ``a < b and b <= c`` with ``b`` evaluated once."""
    first, rest = operands[0], operands[1:]

    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        left, bad = first(env)
        result: bool | NDArray[np.bool_] = True
        for function, operand in zip(functions, rest, strict=True):
            right, bad_right = operand(env)
            bad = _mask_or(bad, _mask_where(result, bad_right))
            holds = function(left, right)
            if isinstance(holds, np.ndarray) or isinstance(result, np.ndarray):
                result = np.logical_and(result, holds)
            else:
                result = bool(result and holds)
            left = right
        return result, bad

    return evaluate


def _ifexp_node(test: _Node, body: _Node, orelse: _Node) -> _Node:
    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        condition, bad = test(env)
        truth = _truth(condition)
        if_true, bad_true = body(env)
        if_false, bad_false = orelse(env)
        bad = _mask_or(bad, _mask_where(truth, bad_true))
        bad = _mask_or(bad, _mask_where(negate(truth), bad_false))
        return _select(truth, if_true, if_false), bad

    return evaluate


def _reduce_node(
    array_op: Callable[[Any, Any], Any], scalar_op: Callable[..., Any], args: list[_Node]
) -> _Node:
    def evaluate(env: Mapping[str, Value]) -> tuple[Value, Mask]:
        results = [arg(env) for arg in args]
        values = [value for value, _ in results]
        bad = functools.reduce(_mask_or, (mask for _, mask in results), False)
        if is_array(*values):
            return functools.reduce(array_op, (_num(v) for v in values)), bad
        return scalar_op(values), bad

    return evaluate
