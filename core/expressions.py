"""The one expression language of octune: a space's constraints, derived values, launch and
workspace sizes and ``requires`` rules, and a family's shape rules are all written in it.

Expressions come from user YAML, so they are never handed to eval/exec/compile: the text is
parsed with ``ast`` and ``vet`` checks every node against one whitelist, here and only here.
Three back ends then evaluate the vetted tree: scalar closures in this module (the lookup,
bundles and shape rules: standard library only), numpy columns in ``octune.catalogue.expr``
(enumerating candidates) and C in ``octune.firmware.cheader``. Sizes must be integers, so
what computes one (a launch, a workspace, a shape rule) takes the *integer* part of the
language: no ``/`` and no fractional constant (``Vetted.integer``), checked when the space or
family is loaded, so whatever tunes can also be looked up and written to C.

Integers are 64-bit, as in the kernels: arithmetic that overflows wraps around. Division by
zero makes a value *undefined*, following Python's short-circuit rules
(``y != 0 and x % y == 0`` is defined where ``y == 0``).
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from octune.core.errors import OctuneError

#: Functions an expression may call, with their (minimum, maximum) argument counts.
FUNCTIONS: dict[str, tuple[int, int | None]] = {
    "ceil_div": (2, 2),
    "max": (2, None),
    "min": (2, None),
    "round_up": (2, 2),
}
MAX_EXPONENT = 16
MAX_LENGTH = 2000
MAX_DEPTH = 100
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
ALLOWED = (
    "use numbers, names, + - * / // % **, comparisons, and/or/not, 'x if c else y' "
    "and the functions " + ", ".join(sorted(FUNCTIONS))
)
_SYMBOLS: dict[type[ast.AST], str] = {
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
#: The comparisons, as Python computes them on ints and numpy on arrays: the scalar and the
#: numpy back ends both evaluate with this table.
COMPARISONS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


class ExpressionError(OctuneError):
    """An expression outside the language; the message names the part and the fix."""


class Undefined(Exception):
    """An expression that has no value for these operands (x // 0)."""


@dataclass(frozen=True)
class Vetted:
    """A parsed expression every node of which is in the language."""

    text: str  # whitespace-normalised: YAML may fold long expressions over lines
    tree: ast.expr
    names: tuple[str, ...]  # in order of first use, so the first unknown one is named first
    integer: bool  # no '/' and no fractional constant: an integer wherever it is defined


def vet(text: str, kind: str = "expression") -> Vetted:
    """Parse ``text`` and check it against the language. ``kind`` says where it comes from
    ("constraint", "derived MWI", ...) and appears in every message.
    """
    text = " ".join(str(text).split())
    if not text:
        raise ExpressionError(f"empty {kind}; write an expression such as 'MWG % MDIMC == 0'")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(
            f"{kind} is too long ({len(text)} characters, at most {MAX_LENGTH}); "
            "split it into derived values"
        )
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as error:
        column = f" at column {error.offset}" if error.offset else ""
        raise ExpressionError(
            f"syntax error in {kind} '{text}'{column}: {error.msg}; {ALLOWED}"
        ) from None
    except (ValueError, RecursionError, MemoryError):
        raise ExpressionError(f"cannot parse {kind} '{text}'; {ALLOWED}") from None
    checker = _Checker(text, kind)
    checker.check(tree, 0)
    return Vetted(text, tree, tuple(checker.names), checker.integer)


class _Checker:
    """Walks a parsed tree; anything off the whitelist is an ExpressionError."""

    def __init__(self, text: str, kind: str) -> None:
        self.text = text
        self.kind = kind
        self.names: dict[str, None] = {}  # an ordered set
        self.integer = True

    def reject(self, node: ast.AST, problem: str, fix: str = ALLOWED) -> ExpressionError:
        segment = ast.get_source_segment(self.text, node) or type(node).__name__
        return ExpressionError(
            f"{problem.replace('{segment}', segment)} is not allowed in {self.kind} "
            f"'{self.text}'; {fix}"
        )

    def check(self, node: ast.AST, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ExpressionError(
                f"{self.kind} '{self.text}' is nested too deeply; split it into derived values"
            )
        children: list[ast.expr] = []
        match node:
            case ast.Constant(value=value):
                self._constant(node, value)
            case ast.Name(id=name):
                if name.startswith("__"):
                    raise self.reject(node, "dunder name '{segment}'")
                self.names[name] = None
            case ast.BinOp(left=left, op=op, right=right):
                self._binop(node, op, right)
                children = [left, right]
            case ast.UnaryOp(op=ast.Invert()):
                raise self.reject(node, "bitwise '~' in '{segment}'", "use 'not' for logic")
            case ast.UnaryOp(operand=operand):
                children = [operand]  # not, -, + (~ is above)
            case ast.BoolOp(values=values):
                children = values
            case ast.Compare(left=left, ops=ops, comparators=comparators):
                for op in ops:
                    if type(op) not in COMPARISONS:
                        symbol = _SYMBOLS.get(type(op), type(op).__name__)
                        raise self.reject(node, f"operator '{symbol}' in '{{segment}}'")
                children = [left, *comparators]
            case ast.IfExp(test=test, body=body, orelse=orelse):
                children = [test, body, orelse]
            case ast.Call(args=args):
                self._call(node)
                children = args
            case ast.Attribute():
                raise self.reject(node, "attribute access '{segment}'")
            case ast.Subscript():
                raise self.reject(node, "subscript '{segment}'")
            case ast.Lambda():
                raise self.reject(node, "lambda '{segment}'")
            case ast.ListComp() | ast.SetComp() | ast.DictComp() | ast.GeneratorExp():
                raise self.reject(node, "comprehension '{segment}'")
            case ast.JoinedStr():
                raise self.reject(node, "string {segment}", "only numbers are values")
            case ast.Tuple() | ast.List() | ast.Set() | ast.Dict():
                raise self.reject(node, "literal '{segment}'")
            case ast.NamedExpr():
                raise self.reject(node, "assignment '{segment}'")
            case ast.Starred():
                raise self.reject(node, "unpacking '{segment}'")
            case _:
                raise self.reject(node, "'{segment}'")
        for child in children:
            self.check(child, depth + 1)

    def _constant(self, node: ast.AST, value: object) -> None:
        if isinstance(value, str | bytes):
            raise self.reject(node, "string {segment}", "only numbers are values")
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise self.reject(node, "integer {segment}", "integers must fit in 64 bits")
            return
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise self.reject(node, "non-finite number {segment}", "use a finite number")
            self.integer = False
            return
        raise self.reject(node, "constant '{segment}'", "only numbers are values")

    def _binop(self, node: ast.AST, op: ast.operator, right: ast.expr) -> None:
        if isinstance(op, ast.Pow):
            exponent = right.value if isinstance(right, ast.Constant) else None
            if type(exponent) is not int or not 0 <= exponent <= MAX_EXPONENT:
                raise self.reject(
                    node,
                    "exponent in '{segment}'",
                    f"an exponent must be an integer constant from 0 to {MAX_EXPONENT}",
                )
        elif not isinstance(op, ARITHMETIC):
            symbol = _SYMBOLS.get(type(op), type(op).__name__)
            raise self.reject(node, f"operator '{symbol}' in '{{segment}}'")
        if isinstance(op, ast.Div):
            self.integer = False

    def _call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in FUNCTIONS:
            function = ast.get_source_segment(self.text, node.func) or "?"
            raise self.reject(
                node,
                f"call to '{function}'",
                "the only functions are " + ", ".join(sorted(FUNCTIONS)),
            )
        if node.keywords:
            raise self.reject(
                node, "keyword argument in '{segment}'", f"pass {name}'s arguments by position"
            )
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.reject(arg, "unpacking '{segment}'", "pass each argument explicitly")
        low, high = FUNCTIONS[name]
        if len(node.args) < low or (high is not None and len(node.args) > high):
            count = f"{low}" if low == high else f"at least {low}"
            raise ExpressionError(
                f"{name} takes {count} arguments, not {len(node.args)}, "
                f"in {self.kind} '{self.text}'; fix the call"
            )


def vet_integer(text: str, kind: str) -> Vetted:
    """``vet``, for an expression whose value is a size or a count."""
    vetted = vet(text, kind)
    if not vetted.integer:
        raise ExpressionError(
            f"{kind} '{vetted.text}' must be an integer but divides with '/' or uses a "
            "fraction; use // or ceil_div"
        )
    return vetted


# --- the scalar back end -------------------------------------------------------------------


def wrap(value: int) -> int:
    """A Python int wrapped to int64, as the kernels, numpy and C compute."""
    if INT64_MIN <= value <= INT64_MAX:
        return value
    return (value - INT64_MIN) % 2**64 + INT64_MIN


def floordiv(a: int, b: int) -> int:
    if b == 0:
        raise Undefined
    return wrap(a // b)


def mod(a: int, b: int) -> int:
    if b == 0:
        raise Undefined
    return a % b


def ceil_div(a: int, b: int) -> int:
    return wrap(-floordiv(wrap(-a), b))


def round_up(a: int, b: int) -> int:
    return wrap(ceil_div(a, b) * b)


_Eval = Callable[[Sequence[int]], int]
_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: wrap(a + b),
    ast.Sub: lambda a, b: wrap(a - b),
    ast.Mult: lambda a, b: wrap(a * b),
    ast.FloorDiv: floordiv,
    ast.Mod: mod,
}
_CALLS: dict[str, Callable[[int, int], int]] = {
    "ceil_div": ceil_div,
    "round_up": round_up,
    "min": min,
    "max": max,
}


class ScalarExpression:
    """An integer expression (``vet_integer``) compiled to closures for one evaluation at a
    time, e.g. a launch size per lookup. Variables are read by position from one sequence of
    values; constants (device limits) are folded in when it is compiled.
    """

    __slots__ = ("_evaluate", "text", "vetted")

    def __init__(
        self,
        text: str,
        positions: Mapping[str, int],
        constants: Mapping[str, int] | None = None,
        *,
        kind: str = "expression",
    ) -> None:
        self.vetted = vet_integer(text, kind)
        self.text = self.vetted.text
        constants = constants or {}
        for name in self.vetted.names:
            if name not in positions and name not in constants:
                known = ", ".join([*positions, *constants]) or "(none)"
                raise ExpressionError(
                    f"{kind} '{self.text}' uses '{name}', which is not one of its names: {known}"
                )
        self._evaluate = _compile(self.vetted.tree, positions, constants)

    def evaluate(self, values: Sequence[int]) -> int:
        """The value for these variable values; raises ``Undefined`` where it has none."""
        return self._evaluate(values)


def _compile(node: ast.expr, positions: Mapping[str, int], constants: Mapping[str, int]) -> _Eval:
    def sub(child: ast.expr) -> _Eval:
        return _compile(child, positions, constants)

    match node:
        case ast.Constant(value=value):
            return lambda v: value
        case ast.Name(id=name) if name in constants:
            constant = constants[name]
            return lambda v: constant
        case ast.Name(id=name):
            position = positions[name]
            return lambda v: v[position]
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            inner = sub(operand)
            return lambda v: wrap(-inner(v))
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            inner = sub(operand)
            return lambda v: +inner(v)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            inner = sub(operand)
            return lambda v: not inner(v)
        case ast.BinOp(left=left, op=ast.Pow(), right=ast.Constant(value=exponent)):
            base = sub(left)
            return lambda v: wrap(base(v) ** exponent)
        case ast.BinOp(left=left, op=op, right=right):
            binary = _BINARY[type(op)]
            a, b = sub(left), sub(right)
            return lambda v: binary(a(v), b(v))
        case ast.BoolOp(op=op, values=values):
            return _boolop(isinstance(op, ast.And), [sub(value) for value in values])
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            terms = [sub(term) for term in (left, *comparators)]
            return _compare([COMPARISONS[type(op)] for op in ops], terms)
        case ast.IfExp(test=test, body=body, orelse=orelse):
            condition, if_true, if_false = sub(test), sub(body), sub(orelse)
            return lambda v: if_true(v) if condition(v) else if_false(v)
        case ast.Call(func=ast.Name(id=name), args=args):
            function = _CALLS[name]
            first, *rest = [sub(arg) for arg in args]
            if len(rest) == 1:
                second = rest[0]
                return lambda v: function(first(v), second(v))
            return lambda v: functools.reduce(lambda a, f: function(a, f(v)), rest, first(v))
    raise AssertionError(f"vet let through {ast.dump(node)}")  # pragma: no cover


def _boolop(is_and: bool, parts: list[_Eval]) -> _Eval:
    """Python's ``and``/``or``: the value of the operand that decides, the rest not evaluated."""

    def evaluate(v: Sequence[int]) -> int:
        for part in parts[:-1]:
            value = part(v)
            if bool(value) != is_and:
                return value
        return parts[-1](v)

    return evaluate


def _compare(tests: list[Callable[[int, int], bool]], terms: list[_Eval]) -> _Eval:
    """Chained comparisons: ``a < b <= c`` is ``a < b and b <= c``, ``b`` evaluated once."""

    def evaluate(v: Sequence[int]) -> bool:
        left = terms[0](v)
        for test, term in zip(tests, terms[1:], strict=True):
            right = term(v)
            if not test(left, right):
                return False
            left = right
        return True

    return evaluate
