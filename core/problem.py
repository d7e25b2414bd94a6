"""What a kernel family's problem is, as every layer needs it: the keys of a shape, their
ranges, the rules that make a shape impossible and its flops (``Problem``, written by
``octune.catalogue.family.Family``), compiled once (``ShapeRules``); and the hash that names a
kernel version. Standard library only, like the lookup that bundles carry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from octune.core.expressions import ScalarExpression, Undefined


def kernel_version_sha256(template_source: str, space_source: str) -> str:
    """The SHA-256 that names a kernel version (``KernelSpec.sha256``); it lives here, in the
    standard-library-only module, so that bundles can recompute it to prove that the sources
    they carry are the ones that were tuned.
    """
    digest = hashlib.sha256()
    for text in (template_source, space_source):
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Problem:
    """What the lookup must know of a kernel family's shapes (``octune.catalogue.family.Family``
    writes it): which keys a query has, their ranges, which shapes are possible, the flops.
    """

    name: str
    sizes: tuple[str, ...]  # shape keys compared in log space, e.g. ("m", "n", "k")
    # Keys compared linearly, a step costing ``LAYOUT_OCTAVES``: transposes, filter sizes...
    flags: tuple[str, ...]
    shape_vars: dict[str, str]  # expression variable -> shape key, e.g. {"M": "m"}
    flag_defines: dict[str, str]  # -D define the template takes -> shape key
    dtypes: tuple[str, ...]
    max_size: int  # largest size the kernels index
    flops: str  # an expression of the shape variables, e.g. "2 * M * N * K"
    ranges: tuple[tuple[int, int], ...]  # (low, high) of each key, in ``keys`` order
    # Variables computed from the shape, in order (each may use the ones before it).
    derived: tuple[tuple[str, str], ...] = ()
    # (expression that must hold, why the shape is impossible): checked before any answer.
    rules: tuple[tuple[str, str], ...] = ()
    # Each operand's element count as an expression, at most ``max_elements`` (32-bit indexing).
    extents: tuple[str, ...] = ()
    max_elements: int = 0
    defaults: tuple[tuple[str, int], ...] = ()  # keys a query may leave out, e.g. transa = 0

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.sizes, *self.flags)

    @property
    def variables(self) -> tuple[str, ...]:
        """What the problem's expressions may name: shape variables, then derived ones."""
        return (*self.shape_vars, *(name for name, _ in self.derived))


class ShapeRules:
    """A problem's expressions compiled: the variables of a shape, and why it is impossible."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        positions = {name: i for i, name in enumerate(problem.variables)}
        self._keys = [problem.keys.index(key) for key in problem.shape_vars.values()]
        name = problem.name
        self._derived = [
            ScalarExpression(text, positions, kind=f"{name} derived {derived}")
            for derived, text in problem.derived
        ]
        self._rules = [
            (ScalarExpression(text, positions, kind=f"{name} rule"), why)
            for text, why in problem.rules
        ]
        self._extents = [
            ScalarExpression(text, positions, kind=f"{name} extent") for text in problem.extents
        ]
        self._flops = ScalarExpression(problem.flops, positions, kind=f"{name} flops")

    def values(self, shape: Sequence[int]) -> list[int]:
        """The variables' values for a shape in ``Problem.keys`` order (derived ones last);
        raises ``Undefined`` where a derived value cannot be computed (the rules say why).
        """
        values = [shape[position] for position in self._keys]
        for expression in self._derived:
            values.append(expression.evaluate(values))
        return values

    def why_impossible(self, shape: Sequence[int]) -> str | None:
        """The first broken rule's message, or one naming an operand past 32-bit indexing.
        Rules are checked in order, so a later rule may rely on an earlier one (no x // 0).
        """
        problem = self.problem
        try:
            values = self.values(shape)
            for expression, why in self._rules:
                if not expression.evaluate(values):
                    return why
            for expression in self._extents if problem.max_elements else ():
                elements = expression.evaluate(values)
                if elements > problem.max_elements:
                    return (
                        f"{problem.name} operand {expression.text} = {elements} elements, over "
                        f"{problem.max_elements}: beyond 32-bit indexing; split the work"
                    )
        except Undefined:
            return f"{problem.name} shape {list(shape)} divides by zero in one of its rules"
        return None

    def flops(self, values: Sequence[int]) -> int:
        return self._flops.evaluate(values)

    def extents(self, values: Sequence[int]) -> list[int]:
        """Each operand's element count, in ``Problem.extents`` order."""
        return [expression.evaluate(values) for expression in self._extents]
