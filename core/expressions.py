"""Launch expressions: the whitelisted integer language of a space's ``launch:`` sizes and a
family's shape rules, parsed with ``ast``, vetted once and compiled to closures (nothing is ever
``eval``-ed); the C header generator translates the same vetted tree. Standard library only,
as the lookup that uses it (``semantics``).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping, Sequence

from octune.core.errors import OctuneError

#: Functions a launch expression may call, with their argument counts (min, max).
LAUNCH_FUNCTIONS: dict[str, tuple[int, int | None]] = {
    "ceil_div": (2, 2),
    "round_up": (2, 2),
    "min": (2, None),
    "max": (2, None),
}
MAX_EXPRESSION_CHARS = 2000
MAX_EXPRESSION_DEPTH = 50
_OPERATORS = "integers, names, + - * // %, unary -, comparisons, and/or/not, " + ", ".join(
    LAUNCH_FUNCTIONS
)


class TableError(OctuneError):
    """A lookup table whose content is inconsistent (wrong lengths, bad launch expression)."""


class Undefined(Exception):
    """A launch expression that cannot be evaluated for this config and shape (x // 0)."""


_Eval = Callable[[Sequence[int]], int]


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        raise Undefined
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise Undefined
    return a % b


def _ceil_div(a: int, b: int) -> int:
    return -_floordiv(-a, b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
}
_COMPARE: dict[type[ast.cmpop], Callable[[int, int], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
_CALLS: dict[str, Callable[[int, int], int]] = {
    "ceil_div": _ceil_div,
    "round_up": _round_up,
    "min": min,
    "max": max,
}


class LaunchExpression:
    """One launch size, e.g. ``ceil_div(N, NWG) * NDIMC``: vetted once, evaluated per query.

    Variables (parameters and shape variables) are read by position from one sequence of
    values; constants (device limits) are folded in when the expression is compiled.
    """

    __slots__ = ("_evaluate", "text", "tree")

    def __init__(
        self, text: str, positions: Mapping[str, int], constants: Mapping[str, int]
    ) -> None:
        self.text = " ".join(str(text).split())
        if not self.text or len(self.text) > MAX_EXPRESSION_CHARS:
            raise TableError(
                f"launch expression '{self.text[:60]}' is empty or longer than "
                f"{MAX_EXPRESSION_CHARS} characters"
            )
        try:
            self.tree = ast.parse(self.text, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise TableError(f"cannot parse launch expression '{self.text}'") from None
        self._evaluate = self._compile(self.tree, positions, constants, 0)

    def evaluate(self, values: Sequence[int]) -> int:
        """The size for these variable values; raises ``Undefined`` where it cannot be computed."""
        return self._evaluate(values)

    def _reject(self, what: str) -> TableError:
        return TableError(
            f"launch expression '{self.text}' uses {what}, which the lookup cannot evaluate; "
            f"use only {_OPERATORS}"
        )

    def _compile(
        self,
        node: ast.expr,
        positions: Mapping[str, int],
        constants: Mapping[str, int],
        depth: int,
    ) -> _Eval:
        if depth > MAX_EXPRESSION_DEPTH:
            raise self._reject(f"nesting deeper than {MAX_EXPRESSION_DEPTH}")

        def sub(child: ast.expr) -> _Eval:
            return self._compile(child, positions, constants, depth + 1)

        if isinstance(node, ast.Constant | ast.Name):
            value = check_operand(node, positions, constants, self.text)
            if isinstance(value, str):
                position = positions[value]
                return lambda v: v[position]
            return lambda v: value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = sub(node.operand)
            return (lambda v: -operand(v)) if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            binary = _BINARY[type(node.op)]
            left, right = sub(node.left), sub(node.right)
            return lambda v: binary(left(v), right(v))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            operand = sub(node.operand)
            return lambda v: int(not operand(v))
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            terms = [sub(term) for term in (node.left, *node.comparators)]
            tests = [_COMPARE[type(op)] for op in node.ops]
            pairs = list(zip(tests, terms, terms[1:], strict=False))
            return lambda v: int(all(test(a(v), b(v)) for test, a, b in pairs))
        if isinstance(node, ast.BoolOp):
            parts = [sub(value) for value in node.values]
            if isinstance(node.op, ast.And):
                return lambda v: int(all(part(v) for part in parts))
            return lambda v: int(any(part(v) for part in parts))
        if isinstance(node, ast.Call):
            name = check_call(node, self.text)
            function = _CALLS[name]
            first, *rest = [sub(arg) for arg in node.args]
            if len(rest) == 1:
                second = rest[0]
                return lambda v: function(first(v), second(v))
            return lambda v: functools.reduce(lambda a, f: function(a, f(v)), rest, first(v))
        raise self._reject(f"'{ast.unparse(node)}'")


def check_operand(
    node: ast.Constant | ast.Name,
    positions: Mapping[str, int],
    constants: Mapping[str, int],
    text: str,
) -> int | str:
    """A leaf of a launch expression: an int constant, a folded limit, or a variable's name."""
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) is not int or not -(2**62) <= value < 2**62:
            raise TableError(
                f"launch expression '{text}' uses the constant {value!r}; only integers are allowed"
            )
        return value
    if node.id in constants:
        return constants[node.id]
    if node.id not in positions:
        raise TableError(
            f"launch expression '{text}' uses '{node.id}', which is neither a parameter, "
            "a shape variable nor a device limit of the table"
        )
    return node.id


def check_call(node: ast.Call, text: str) -> str:
    """The name of a whitelisted function called with a valid number of positional args."""
    name = node.func.id if isinstance(node.func, ast.Name) else ""
    limits = LAUNCH_FUNCTIONS.get(name)
    if limits is None or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise TableError(
            f"launch expression '{text}' makes the call '{ast.unparse(node)}'; the only "
            f"functions are {', '.join(LAUNCH_FUNCTIONS)}, with positional arguments"
        )
    low, high = limits
    if len(node.args) < low or (high is not None and len(node.args) > high):
        raise TableError(f"launch expression '{text}' calls {name} with {len(node.args)} arguments")
    return name
