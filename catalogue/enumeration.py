"""Enumerating a search space: the cartesian product is built one parameter at a time as numpy
columns, and every rule is applied as soon as its names are bound, so illegal partial configs
never multiply. Each candidate is carried as one int64 key (its position in the product, mixed
radix over the value lists); a parameter's column exists only while a pending rule needs it, so
unconstrained parameters cost one multiply-add per candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from octune.catalogue.expr import Expression, Mask, Value, any_true, is_array, negate
from octune.catalogue.limits import LIMIT_NAMES
from octune.core.errors import SpaceError

#: Enumeration refuses to hold more candidate rows than this at any point, rather than
#: exhausting memory on an under-constrained space.
MAX_CANDIDATES = 20_000_000


@dataclass(frozen=True)
class Parameter:
    """One tunable parameter: a -D define for the kernel and the values worth trying."""

    name: str
    values: tuple[int, ...]
    help: str = ""


@dataclass(frozen=True)
class _Step:
    """What enumeration does after binding one more parameter (or before any, for step 0)."""

    parameter: Parameter | None
    column: bool  # whether any rule reads the parameter's value, or only its place in the key
    derived: tuple[tuple[str, Expression], ...]
    constraints: tuple[Expression, ...]
    needed_later: frozenset[str]  # columns that later steps read: the rest are dropped


class Enumerator:
    """A space's rules in the order that prunes earliest, ready to enumerate on any device."""

    def __init__(
        self,
        origin: str,
        parameters: tuple[Parameter, ...],
        derived: tuple[tuple[str, Expression], ...],
        constraints: tuple[Expression, ...],
    ) -> None:
        self.origin = origin
        self.parameters = parameters
        self.parameter_names = tuple(p.name for p in parameters)
        self.derived = derived
        self.constraints = constraints
        self.steps = self._plan()
        self.strides: dict[str, int] = {}  # mixed radix: the last parameter varies fastest
        stride = 1
        for parameter in reversed(parameters):
            self.strides[parameter.name] = stride
            stride *= len(parameter.values)

    @property
    def raw_size(self) -> int:
        """Size of the cartesian product before any constraint: what enumeration avoids building."""
        return math.prod(len(p.values) for p in self.parameters)

    def _error(self, message: str) -> SpaceError:
        return SpaceError(f"search space {self.origin}: {message}")

    def _plan(self) -> tuple[_Step, ...]:
        """Choose the order that binds parameters so rules apply, and prune, as early as can be."""
        parameters = set(self.parameter_names)
        depends: dict[str, frozenset[str]] = {}  # derived name -> parameters it needs
        for name, expression in self.derived:
            needs = set(expression.names & parameters)
            for other in expression.names & depends.keys():
                needs |= depends[other]
            depends[name] = frozenset(needs)

        def needs_of(expression: Expression) -> frozenset[str]:
            needs = set(expression.names & parameters)
            for name in expression.names & depends.keys():
                needs |= depends[name]
            return frozenset(needs)

        rules = [needs_of(c) for c in self.constraints]
        order: list[Parameter] = []
        bound: set[str] = set()
        while len(order) < len(self.parameters):

            def score(parameter: Parameter) -> tuple[int, int, int, int]:
                with_it = bound | {parameter.name}
                completes = sum(1 for r in rules if r <= with_it and not r <= bound)
                mentions = sum(1 for r in rules if parameter.name in r and not r <= bound)
                index = self.parameter_names.index(parameter.name)
                return (completes, mentions, -len(parameter.values), -index)

            best = max((p for p in self.parameters if p.name not in bound), key=score)
            order.append(best)
            bound.add(best.name)

        step_of = {parameter.name: i + 1 for i, parameter in enumerate(order)}

        def ready_at(needs: frozenset[str]) -> int:
            return max((step_of[name] for name in needs), default=0)

        plans = []
        for step in range(len(order) + 1):
            derived = tuple(
                (name, expression)
                for name, expression in self.derived
                if ready_at(depends[name]) == step
            )
            constraints = tuple(
                c
                for c, needs in zip(self.constraints, rules, strict=True)
                if ready_at(needs) == step
            )
            names = {n for _, e in derived for n in e.names} | {
                n for c in constraints for n in c.names
            }
            plans.append((derived, constraints, names - set(LIMIT_NAMES)))
        steps = []
        for step, (derived, constraints, names) in enumerate(plans):
            later = {name for _, _, names in plans[step + 1 :] for name in names}
            parameter = order[step - 1] if step else None
            column = parameter is not None and parameter.name in names | later
            steps.append(_Step(parameter, column, derived, constraints, frozenset(later)))
        return tuple(steps)

    def configs(self, limits: Mapping[str, int]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every legal config on a device with these limits (those the rules name), in
        itertools.product order: the sorted keys, and one column of values per parameter.
        """
        if self.raw_size >= 2**63:
            raise self._error(
                f"has {self.raw_size:.3g} parameter combinations, more than can be enumerated; "
                "split it into several spaces or list fewer values"
            )
        env_limits: dict[str, Value] = dict(limits)
        strides = self.strides
        key = np.zeros(1, dtype=np.int64)
        columns: dict[str, NDArray[Any]] = {}  # per-row values that rules still need
        scalars: dict[str, Value] = {}  # derived values that are the same for every row
        for step in self.steps:
            parameter = step.parameter
            if parameter is not None:
                values = np.asarray(parameter.values, dtype=np.int64)
                rows, count = len(key), len(values)
                if rows * count > MAX_CANDIDATES:
                    raise self._error(
                        f"too large to enumerate: {rows * count:,} candidates after adding "
                        f"{parameter.name} (at most {MAX_CANDIDATES:,}); add constraints on "
                        f"{parameter.name} or list fewer values"
                    )
                offsets = np.arange(count, dtype=np.int64) * strides[parameter.name]
                key = np.add.outer(key, offsets).ravel()
                columns = {name: np.repeat(column, count) for name, column in columns.items()}
                if step.column:
                    columns[parameter.name] = np.tile(values, rows)
            if step.derived or step.constraints:
                env: dict[str, Value] = {**env_limits, **scalars, **columns}
                checks: list[tuple[str, Expression, Mask]] = []
                for name, expression in step.derived:
                    value, bad = expression.evaluate_masked(env)
                    env[name] = value
                    if isinstance(value, np.ndarray):
                        columns[name] = value
                    else:
                        scalars[name] = value
                    if bad is not False:
                        checks.append((f"derived {name}", expression, negate(bad)))
                for expression in step.constraints:
                    checks.append(("constraint", expression, expression.holds(env)))
                keep = self._keep(checks, len(key), env_limits)
            else:
                keep = True
            columns = {name: c for name, c in columns.items() if name in step.needed_later}
            if keep is not True:
                indices = np.flatnonzero(keep)
                key = key[indices]
                columns = {name: column[indices] for name, column in columns.items()}
        key.sort()
        return key, self._values(key)

    def _keep(
        self, checks: list[tuple[str, Expression, Mask]], rows: int, limits: Mapping[str, Value]
    ) -> bool | NDArray[np.bool_]:
        """Rows that pass every check: True for all, or a bool array; none left is an error."""
        keep: bool | NDArray[np.bool_] = True
        for _, _, mask in checks:
            keep = np.logical_and(keep, mask) if is_array(keep, mask) else keep and mask
        if not any_true(keep):
            raise self._empty(checks, rows, limits)
        if isinstance(keep, np.ndarray) and keep.all():
            return True
        return keep

    def _values(self, key: NDArray[np.int64]) -> NDArray[np.int64]:
        """Decode the sorted keys into one column per parameter."""
        values = np.empty((len(key), len(self.parameters)), dtype=np.int64, order="F")
        quotient, position = key.copy(), np.empty_like(key)  # in place: fresh pages are slow
        for i in reversed(range(len(self.parameters))):
            choices = np.asarray(self.parameters[i].values, dtype=np.int64)
            np.divmod(quotient, len(choices), out=(quotient, position))
            np.take(choices, position, out=values[:, i])
        return values

    def _empty(
        self, checks: list[tuple[str, Expression, Mask]], rows: int, limits: Mapping[str, Value]
    ) -> SpaceError:
        """Name the rule that removed the last candidates: that is the one to relax."""
        alive: bool | NDArray[np.bool_] = True
        for what, expression, mask in checks:
            before = int(np.count_nonzero(np.broadcast_to(alive, (rows,))))
            alive = np.logical_and(alive, mask) if is_array(alive, mask) else alive and mask
            if any_true(alive):
                continue
            in_play = sorted(self._limits_behind(expression) & limits.keys())
            device = ", ".join(f"{name}={limits[name]}" for name in in_play)
            if what.startswith("derived"):
                return SpaceError(
                    f"search space {self.origin} has no legal config: {what} = "
                    f"'{expression.text}' divides by zero in the last {before} candidates; "
                    "guard the divisor or drop the zero values"
                )
            if device:
                return SpaceError(
                    f"search space {self.origin} has no legal config on this device: constraint "
                    f"'{expression.text}' removed the last {before} candidates ({device}); "
                    "relax it or add smaller values"
                )
            return SpaceError(
                f"search space {self.origin} has no legal config: constraint "
                f"'{expression.text}' removed the last {before} candidates; it contradicts the "
                "parameter values or the constraints before it, so relax it or add values"
            )
        raise AssertionError("_empty called while candidates remain")

    def _limits_behind(self, expression: Expression) -> set[str]:
        derived = dict(self.derived)
        names, pending, seen = set(), list(expression.names), set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in LIMIT_NAMES:
                names.add(name)
            elif name in derived:
                pending.extend(derived[name].names)
        return names
