"""The search space of one kernel: tunable parameters, the rules a legal config obeys, launch sizes.

A space is written in YAML (see ``search_spaces/``) and checked in full when it is loaded, so a
typo fails in a second with one line that says where, instead of after a night of tuning.
The YAML's schema is ``space_schema``; the device limits a space may name are ``limits``;
enumerating every legal config into a ``ConfigTable`` is ``enumeration``.
"""

from __future__ import annotations

import ast
import copy
import json
import keyword
import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from octune.catalogue.enumeration import Enumerator, Parameter
from octune.catalogue.expr import Expression, Value, describe
from octune.catalogue.limits import LIMIT_NAMES
from octune.catalogue.space_schema import (
    IDENTIFIER,
    QUOTE_HINT,
    LaunchModel,
    ParameterModel,
    SpaceModel,
    condense,
    load_yaml,
)
from octune.core.errors import SpaceError
from octune.core.expressions import FUNCTIONS, ExpressionError, vet_integer

#: Devices whose tables a space keeps (``SearchSpace.enumerate``).
TABLES_KEPT = 4

# --- the space ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchSizes:
    """One launch of a config: the entry to run and its work sizes."""

    entry: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


@dataclass(frozen=True)
class LaunchRule:
    """One launch of a config: its OpenCL function and its size expressions. The entry's
    comes first; those of ``then:`` run after it with the same arguments (e.g. summing split-K
    partial products).
    """

    entry: str
    global_: tuple[Expression, ...]
    local: tuple[Expression, ...]


class SearchSpace:
    """A loaded, fully checked search space; build it with ``from_yaml`` or ``from_file``."""

    def __init__(
        self, model: SpaceModel, origin: str, shape_names: Collection[str], text: str
    ) -> None:
        self.origin = origin
        self.kernel = model.kernel
        self.problem = model.problem
        # The kernel whose space this one extends (its tiles mean the same here), or None.
        self.extends = model.extends
        self.entry = model.entry
        self.description = model.description.strip()
        # The OpenCL device types the kernel is written for (None: any): see ``fit``.
        self.devices: frozenset[str] | None = (
            None if model.devices is None else frozenset(model.devices)
        )
        # The element type the kernel computes in (``docs/precision.md``): a kernel answers
        # and tunes workloads of that dtype only.
        self.dtype: str = model.dtype
        self.source_text = text
        self.shape_names: frozenset[str] = frozenset(shape_names)

        self.parameters: tuple[Parameter, ...] = tuple(
            self._parameter(name, spec) for name, spec in model.parameters.items()
        )
        if not self.parameters:
            raise self._error("defines no parameters; add at least one under 'parameters'")
        self.parameter_names: tuple[str, ...] = tuple(p.name for p in self.parameters)
        self._parameters = {p.name: p for p in self.parameters}

        self.derived: tuple[tuple[str, Expression], ...] = self._derived(model.derived)
        self.derived_names: tuple[str, ...] = tuple(name for name, _ in self.derived)
        every_name = {*self.parameter_names, *self.derived_names, *LIMIT_NAMES, *self.shape_names}
        self.constraints: tuple[Expression, ...] = tuple(
            self._constraint(text, every_name) for text in model.constraints
        )
        self.launch_global, self.launch_local = self._launch(model.launch, every_name, "launch")
        # Scratch memory (float32 elements) the launches share, passed as every launch's last
        # argument, and the launches after the entry's: a kernel that needs either says so.
        self.workspace: Expression | None = (
            None
            if model.workspace is None
            else self._expression(model.workspace, every_name, "workspace")
        )
        # Leading workspace elements (counters, as int32) that must be zero when the launches
        # start and that they leave at zero: the runtime zero-fills the workspace once, when
        # it allocates it, and never again.
        self.zeroed: Expression | None = (
            None if model.zeroed is None else self._expression(model.zeroed, every_name, "zeroed")
        )
        if self.zeroed is not None and self.workspace is None:
            raise self._error("zeroed names part of a workspace; declare the workspace too")
        self.follow_ups: tuple[LaunchRule, ...] = tuple(
            LaunchRule(step.entry, *self._launch(step, every_name, f"then[{i}]"))
            for i, step in enumerate(model.then)
        )
        # Earlier versions of this kernel (sha256 -> why) that computed wrong results after
        # they were tuned: lookups, exports and runs never use them, whatever a database holds.
        self.retired: dict[str, str] = {sha: why.strip() for sha, why in model.retired.items()}
        # Which shapes the kernel takes at all (a depthwise kernel: GROUPS == C): shape only.
        self.requires: tuple[Expression, ...] = tuple(
            self._expression(text, self.shape_names, "requires") for text in model.requires
        )
        self._check_integers()

        self._enumerator = Enumerator(origin, self.parameters, self.derived, self.constraints)
        # The tables of the last few devices: a run tunes many shapes on one device, and each
        # session of it asks again (0.26 s for conv2d_1x1's 292,944 configs on an H200).
        self._tables: dict[tuple[tuple[str, object], ...], ConfigTable] = {}
        # The device limits the space's expressions name (``tuner.limits.LIMIT_NAMES``).
        self.limit_names = frozenset(
            name
            for expression in self._expressions()
            for name in expression.names
            if name in LIMIT_NAMES
        )

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, text: str, origin: str, shape_names: Collection[str]) -> SearchSpace:
        """Load and check a space; ``shape_names`` are the problem's variables (M, N, K ...)."""
        data = load_yaml(text, origin)
        if data is None:
            raise SpaceError(
                f"search space {origin} is empty; "
                "it needs kernel, problem, entry, parameters and launch"
            )
        if not isinstance(data, dict):
            raise SpaceError(
                f"search space {origin} must be a YAML mapping with "
                f"kernel, problem, entry, parameters and launch, not a {type(data).__name__}"
            )
        try:
            model = SpaceModel.model_validate(data)
        except ValidationError as error:
            raise SpaceError(f"search space {origin}: {condense(error)}") from None
        return cls(model, origin, shape_names, text)

    @classmethod
    def from_file(cls, path: str | Path, shape_names: Collection[str]) -> SearchSpace:
        """Load a space from disk, naming the file in every message."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise SpaceError(f"cannot read search space {path}: {error}") from None
        return cls.from_yaml(text, path.name, shape_names)

    def _error(self, message: str) -> SpaceError:
        return SpaceError(f"search space {self.origin}: {message}")

    def _check_name(self, name: str, what: str) -> None:
        if not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or name.startswith("__"):
            raise self._error(
                f"{what} name '{name}' is not usable as a C define; use letters, digits and _"
            )
        for taken, owner in (
            (FUNCTIONS, "a function"),
            (LIMIT_NAMES, "a device limit"),
            (self.shape_names, "a problem shape variable"),
        ):
            if name in taken:
                raise self._error(f"{what} name '{name}' is also {owner}; rename the {what}")

    def _parameter(self, name: str, spec: ParameterModel) -> Parameter:
        self._check_name(name, "parameter")
        if not spec.values:
            raise self._error(f"parameter {name} has no values; list at least one")
        duplicates = sorted({v for v in spec.values if spec.values.count(v) > 1})
        if duplicates:
            listed = ", ".join(map(str, duplicates))
            raise self._error(
                f"parameter {name} lists {listed} more than once (true/false count as 1/0); "
                "list each value once"
            )
        return Parameter(name, tuple(spec.values), spec.help)

    def _expression(self, text: str, known: Collection[str], kind: str) -> Expression:
        try:
            return Expression(text, known, kind=kind)
        except SpaceError as error:
            message = str(error)
            if message.startswith("syntax error") and text.count("(") != text.count(")"):
                message += QUOTE_HINT
            raise self._error(message) from None

    def _derived(self, specs: Mapping[str, str]) -> tuple[tuple[str, Expression], ...]:
        names = list(specs)
        known = {*self.parameter_names, *LIMIT_NAMES, *self.shape_names, *names}
        derived = []
        for index, (name, text) in enumerate(specs.items()):
            self._check_name(name, "derived")
            if name in self._parameters:
                raise self._error(f"derived name '{name}' is also a parameter; rename one of them")
            kind = f"derived {name}"
            expression = self._expression(text, known, kind)
            self._no_shape(expression, kind, "derived values")
            later = sorted(expression.names & set(names[index:]), key=names.index)
            if later:
                raise self._error(
                    f"{kind} = '{expression.text}' uses '{later[0]}', which is not defined "
                    "above it; a derived value may only use earlier ones, so reorder them"
                )
            derived.append((name, expression))
        return tuple(derived)

    def _no_shape(self, expression: Expression, kind: str, what: str) -> None:
        shape = sorted(expression.names & self.shape_names)
        if shape:
            raise self._error(
                f"{kind} '{expression.text}' uses shape variable {', '.join(shape)}; "
                f"{what} must not depend on the problem shape (only launch sizes may)"
            )

    def _constraint(self, text: str, known: Collection[str]) -> Expression:
        expression = self._expression(text, known, "constraint")
        self._no_shape(expression, "constraint", "constraints")
        return expression

    def _launch(
        self, launch: LaunchModel, known: Collection[str], where: str
    ) -> tuple[tuple[Expression, ...], tuple[Expression, ...]]:
        if len(launch.global_) != len(launch.local):
            raise self._error(
                f"{where} has {len(launch.global_)} global and {len(launch.local)} local sizes; "
                "give both the same number of dimensions" + QUOTE_HINT
            )
        if not 1 <= len(launch.local) <= 3:
            raise self._error(f"{where} has {len(launch.local)} dimensions; OpenCL allows 1 to 3")
        return (
            tuple(
                self._expression(text, known, f"{where} global[{i}]")
                for i, text in enumerate(launch.global_)
            ),
            tuple(
                self._expression(text, known, f"{where} local[{i}]")
                for i, text in enumerate(launch.local)
            ),
        )

    def _check_integers(self) -> None:
        """Sizes and counts are integers, with derived values written out as the lookup and
        the C header compute them: what tunes can then be looked up and exported.
        """
        sizes = [e for step in self.launch_steps for e in (*step.global_, *step.local)]
        extra = (self.workspace, self.zeroed, *self.requires)
        for expression in [*sizes, *(e for e in extra if e is not None)]:
            text, kind = self.written_out(expression), expression.kind
            if expression.names & set(self.derived_names):
                kind = f"{kind} '{expression.text}' ="
            try:
                vet_integer(text, kind)
            except ExpressionError as error:
                raise self._error(str(error)) from None

    def written_out(self, expression: Expression) -> str:
        """``expression`` with derived names replaced by their definitions, so it names only
        parameters, shape variables and limits (what a lookup table knows).
        """
        definitions = {name: e.vetted.tree for name, e in self.derived}

        class WriteOut(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                if node.id in definitions:
                    return self.visit(copy.deepcopy(definitions[node.id]))
                return node

        return ast.unparse(WriteOut().visit(copy.deepcopy(expression.vetted.tree)))

    def _expressions(self) -> Iterator[Expression]:
        yield from (expression for _, expression in self.derived)
        yield from self.constraints
        yield from self.launch_global
        yield from self.launch_local
        if self.workspace is not None:
            yield self.workspace
        if self.zeroed is not None:
            yield self.zeroed
        for step in self.follow_ups:
            yield from step.global_
            yield from step.local

    # -- using the space -------------------------------------------------------------------

    @property
    def raw_size(self) -> int:
        """Size of the cartesian product before any constraint: what enumeration avoids building."""
        return self._enumerator.raw_size

    def _limits(self, limits: Mapping[str, int]) -> dict[str, int]:
        missing = sorted(self.limit_names - limits.keys())
        if missing:
            raise self._error(
                f"device limits lack {', '.join(missing)}; pass DeviceInfo.limits of the device"
            )
        try:
            return {name: int(limits[name]) for name in self.limit_names}
        except (TypeError, ValueError):
            raise self._error("device limits must be integers") from None

    def enumerate(self, limits: Mapping[str, int]) -> ConfigTable:
        """Every legal config on a device with these limits (``Enumerator``), remembered for
        the last TABLES_KEPT devices: a table is read-only.
        """
        key = tuple(sorted(limits.items()))
        table = self._tables.pop(key, None)
        if table is None:
            checked = self._limits(limits)
            table = ConfigTable(self, *self._enumerator.configs(checked), checked)
        self._tables[key] = table  # the most recent last
        while len(self._tables) > TABLES_KEPT:
            del self._tables[next(iter(self._tables))]
        return table

    def _config_env(self, config: Mapping[str, int], limits: Mapping[str, int]) -> dict[str, Value]:
        """Check a config's names and values and return it with limits and derived values bound."""
        unknown = sorted(set(config) - self._parameters.keys())
        if unknown:
            raise self._error(
                f"config has unknown parameter {', '.join(unknown)}; "
                f"known: {', '.join(self.parameter_names)}"
            )
        missing = [name for name in self.parameter_names if name not in config]
        if missing:
            raise self._error(f"config lacks parameter {', '.join(missing)}; give every parameter")
        env: dict[str, Value] = dict(self._limits(limits))
        for parameter in self.parameters:
            value = config[parameter.name]
            if isinstance(value, np.integer):
                value = int(value)
            if not isinstance(value, int) or value not in parameter.values:
                allowed = ", ".join(map(str, parameter.values))
                raise self._error(
                    f"config has {parameter.name}={value!r}, which is not one of its values "
                    f"({allowed}); pick one of them"
                )
            env[parameter.name] = int(value)
        for name, expression in self.derived:
            value, bad = expression.evaluate_masked(env)
            if bad:
                raise self._error(
                    f"config makes derived {name} = '{expression.text}' divide by zero "
                    f"({describe(expression.names, env)}); it is not a legal config"
                )
            env[name] = value
        return env

    def fit(self, device_type: str) -> int:
        """How the kernel suits a device of ``device_type``: 2 written for it (``devices:``),
        1 for any device, 0 for other types. Tuning a family tunes its best-fitting kernels;
        among equal answers a lookup prefers the better fit.
        """
        return 1 if self.devices is None else 2 if device_type in self.devices else 0

    def check(self, config: Mapping[str, int], limits: Mapping[str, int]) -> None:
        """Raise SpaceError unless ``config`` is one that ``enumerate`` would list."""
        self._checked_env(config, limits)

    def _checked_env(
        self, config: Mapping[str, int], limits: Mapping[str, int]
    ) -> dict[str, Value]:
        env = self._config_env(config, limits)
        for expression in self.constraints:
            if not expression.holds(env):
                raise self._error(
                    f"config breaks constraint '{expression.text}' "
                    f"({describe(expression.names, env)}); pick values that satisfy it"
                )
        return env

    def launch(
        self, config: Mapping[str, int], shape: Mapping[str, int], limits: Mapping[str, int]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(global, local) work sizes of a legal config's entry for one problem shape."""
        env = self._shape_env(config, shape, limits)
        return self._sizes(self.launch_global, self.launch_local, env, limits)

    def launches(
        self, config: Mapping[str, int], shape: Mapping[str, int], limits: Mapping[str, int]
    ) -> tuple[LaunchSizes, ...]:
        """Every launch of a legal config for one problem shape, the entry's first."""
        env = self._shape_env(config, shape, limits)
        return tuple(
            LaunchSizes(step.entry, *self._sizes(step.global_, step.local, env, limits))
            for step in self.launch_steps
        )

    @property
    def launch_steps(self) -> tuple[LaunchRule, ...]:
        """The entry's launch, then the follow-ups."""
        return (LaunchRule(self.entry, self.launch_global, self.launch_local), *self.follow_ups)

    def workspace_elements(
        self, config: Mapping[str, int], shape: Mapping[str, int], limits: Mapping[str, int]
    ) -> int:
        """float32 elements of scratch the launches need (0: none, no workspace argument); a
        SpaceError where they do not fit in one buffer on the device (``max_buffer_bytes``).
        """
        if self.workspace is None:
            return 0
        env = self._shape_env(config, shape, limits)
        elements = self._size(self.workspace, env)
        limit = limits.get("max_buffer_bytes")
        if limit is not None and elements > limit // 4:
            raise self._error(
                f"workspace '{self.workspace.text}' of {4 * elements:,} bytes does not fit in "
                f"one buffer on the device (max_buffer_bytes={limit:,}); this config cannot "
                "run at this shape"
            )
        return elements

    def zeroed_elements(
        self, config: Mapping[str, int], shape: Mapping[str, int], limits: Mapping[str, int]
    ) -> int:
        """Leading workspace elements that start at zero and that the launches leave at zero."""
        if self.zeroed is None:
            return 0
        return self._size(self.zeroed, self._shape_env(config, shape, limits))

    def _shape_env(
        self, config: Mapping[str, int], shape: Mapping[str, int], limits: Mapping[str, int]
    ) -> dict[str, Value]:
        env = self._checked_env(config, limits)
        needed = {n for e in self._expressions() for n in e.names} & self.shape_names
        if missing := sorted(needed - shape.keys()):
            raise self._error(f"shape lacks {', '.join(missing)}, needed for the launch sizes")
        for name in self.shape_names & shape.keys():
            value = shape[name]
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise self._error(f"shape {name}={value!r} must be an integer")
            env[name] = int(value)
        return env

    def _sizes(
        self,
        launch_global: tuple[Expression, ...],
        launch_local: tuple[Expression, ...],
        env: Mapping[str, Value],
        limits: Mapping[str, int],
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        global_size = tuple(self._size(e, env) for e in launch_global)
        local_size = tuple(self._size(e, env) for e in launch_local)
        for i, (global_, local) in enumerate(zip(global_size, local_size, strict=True)):
            if global_ % local:
                raise self._error(
                    f"launch global[{i}]={global_} is not a multiple of local[{i}]={local} "
                    f"({describe(launch_global[i].names, env)}); round it up, "
                    f"e.g. 'round_up(..., {launch_local[i].text})'"
                )
            limit = limits.get(f"max_work_item_size_{i}")
            if limit is not None and local > limit:
                raise self._error(
                    f"launch local[{i}]={local} exceeds max_work_item_size_{i}={limit}; "
                    f"add the constraint '{launch_local[i].text} <= max_work_item_size_{i}'"
                )
        group = math.prod(local_size)
        limit = limits.get("max_work_group_size")
        if limit is not None and group > limit:
            product = " * ".join(
                e.text if IDENTIFIER.fullmatch(e.text) else f"({e.text})" for e in launch_local
            )
            raise self._error(
                f"launch local size {local_size} has {group} work-items, more than "
                f"max_work_group_size={limit}; add the constraint "
                f"'{product} <= max_work_group_size'"
            )
        return global_size, local_size

    def _size(self, expression: Expression, env: Mapping[str, Value]) -> int:
        try:
            value = expression.evaluate(env)
        except SpaceError as error:
            raise self._error(str(error)) from None
        size = int(value)  # an integer: the space's sizes were checked so when it loaded
        if size < 1:
            raise self._error(
                f"{expression.kind} '{expression.text}' gave {size} "
                f"({describe(expression.names, env)}); work sizes must be at least 1"
            )
        return size

    def why_not_applicable(self, shape: Mapping[str, int]) -> str | None:
        """The first ``requires`` rule the shape breaks, or None if the kernel takes it."""
        for expression in self.requires:
            if not expression.evaluate(shape):
                return f"needs {expression.text}"
        return None

    def defines(self, config: Mapping[str, int]) -> dict[str, int]:
        """The -D defines that specialise the kernel source, in parameter order."""
        missing = [name for name in self.parameter_names if name not in config]
        if missing:
            raise self._error(f"config lacks parameter {', '.join(missing)}; give every parameter")
        return {name: int(config[name]) for name in self.parameter_names}


class ConfigTable:
    """All legal configs of a space on one device as an int64 matrix, one row per config and
    one column per parameter (column-major: cost models read columns), in product order.

    Derived values are computed per column on first use, so tables that only serve configs
    never pay for them.
    """

    def __init__(
        self,
        space: SearchSpace,
        keys: NDArray[np.int64],
        values: NDArray[np.int64],
        limits: Mapping[str, int],
    ) -> None:
        """Built by ``SearchSpace.enumerate``; ``keys`` are the sorted product positions."""
        self.space = space
        self.names: tuple[str, ...] = space.parameter_names
        self.values = values
        self.values.flags.writeable = False  # index() relies on values matching keys
        self._keys = keys
        self._keys.flags.writeable = False
        self._limits = dict(limits)
        self._strides = space._enumerator.strides
        self._positions = [
            {value: position for position, value in enumerate(p.values)} for p in space.parameters
        ]
        self._derived: dict[str, NDArray[Any]] = {}

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"ConfigTable({len(self)} configs of {self.space.origin})"

    def config(self, i: int) -> dict[str, int]:
        return dict(zip(self.names, self.values[i].tolist(), strict=True))

    def configs(self) -> Iterator[dict[str, int]]:
        for start in range(0, len(self), 4096):  # chunks: tolist() of millions of rows is slow
            for row in self.values[start : start + 4096].tolist():
                yield dict(zip(self.names, row, strict=True))

    def column(self, name: str) -> NDArray[np.int64]:
        """One parameter's value in every row."""
        return self.values[:, self.names.index(name)]

    @property
    def derived_names(self) -> tuple[str, ...]:
        return self.space.derived_names

    def derived(self, name: str) -> NDArray[Any]:
        """A derived value for every row, aligned with ``values``."""
        if name not in self.space.derived_names:
            known = ", ".join(self.space.derived_names) or "(none)"
            raise KeyError(f"no derived value '{name}' in {self.space.origin}; known: {known}")
        if name not in self._derived:
            env: dict[str, Value] = {**self._limits, **self._derived}
            env.update((n, self.values[:, i]) for i, n in enumerate(self.names))
            for other, expression in self.space.derived:
                if other not in self._derived:
                    value, _ = expression.evaluate_masked(env)  # bad rows were never kept
                    column = np.broadcast_to(value, (len(self),)) if np.ndim(value) == 0 else value
                    column.flags.writeable = False
                    self._derived[other] = env[other] = column
                if other == name:
                    break
        return self._derived[name]

    def index(self, config: Mapping[str, int]) -> int | None:
        """Row of ``config``, or None when it is not a legal config of this table."""
        if len(config) != len(self.names):
            return None
        key = 0
        try:
            for name, positions in zip(self.names, self._positions, strict=True):
                key += positions[int(config[name])] * self._strides[name]
        except (KeyError, TypeError, ValueError):
            return None
        row = int(np.searchsorted(self._keys, key))
        return row if row < len(self._keys) and self._keys[row] == key else None

    def index_json(self, text: str) -> int | None:
        """Row of a config stored as JSON (``results.config_key``), or None if not in the table."""
        try:
            config = json.loads(text)
        except ValueError:
            return None
        return self.index(config) if isinstance(config, dict) else None

    def take(self, rows: NDArray[np.int64]) -> ConfigTable:
        """A table of some of these rows, e.g. the configs a recording covers; ``rows`` sorted."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) > 1 and not (np.diff(rows) > 0).all():
            raise ValueError("take() needs strictly increasing rows, so keys stay sorted")
        values = np.asfortranarray(self.values[rows])
        return ConfigTable(self.space, self._keys[rows], values, self._limits)
