"""Which config to launch for a workload on a device: the one lookup the config service and the
offline firmware bundles share, so a runtime gets the same answer online and offline.

Standard library only (no numpy, pyopencl or SQLAlchemy, not even indirectly): a bundle loads
and answers on a device that has nothing but Python.

The answer, in order of preference:

``exact``
    this workload (shape, transposes, dtype) was tuned on the device: its best verified config.
``nearest``
    the nearest tuned workload on the device whose config is legal for the query. Distance is
    Euclidean in log2 space of the sizes (M, N, K), so 512 is as far from 256 as 256 from 128;
    a differing transpose costs as much as being two octaves away in one size, so workloads
    with the same transposes are preferred unless they are much further away. Logarithms are
    16.16 fixed point computed with integers, so Python and the generated C header rank the
    same candidates identically; ties go to the earlier entry in the canonical entry order.
    A live model (below) answers before any neighbour; the table of model answers only
    before a neighbour further than ``NEAR_OCTAVES``; neither for a shape outside the range of
    the tuned ones.
``predicted``
    a cost model's config: a live ``Predictor`` passed to ``lookup`` (the server's model, which
    scores the query's own shape), else the table of model answers (``LookupTable.predictions``:
    the model on a grid of shapes, answered like ``nearest`` over the grid; what a bundle
    carries). On the H100, for eight shapes held out of 47 tuned ones, the live model's config
    ran at a median 0.98 of each shape's tuned best and the nearest tuned neighbour's at 0.80
    (benchmarks/RESULTS.md); a grid answer is the model's for another shape, up to half an
    octave away in each size, so it yields to a neighbour within ``NEAR_OCTAVES``. Where no
    model answers, the far neighbour does.

    Only inside the range of the tuned shapes (each size between its least and greatest
    tuned value, for the query's dtype): trees interpolate, but beyond the data they repeat
    the edge's estimate, per flop, which is where a boundary shape's measured best is the
    better evidence. On the H100, around a thin grid of 48 tuned shapes, eight shapes outside
    its range ran at a median 0.94-0.95 of their tuned best this way, against 0.81-0.85 with
    the model asked there too; the four chosen after this rule was written, 0.89-0.95 against
    0.65-0.69 (two runs, benchmarks/RESULTS.md).
``default``
    the table's safe default config: the first legal config in the search space's value order
    (space files list the cautious value of each parameter first).

"Legal for the query": a search space's constraints may not use the shape (``space.py``
rejects that), so device legality is settled when the table is built from the database; what
depends on the shape is the launch geometry, which must evaluate (no division by zero), be at
least 1, divide global by local, and fit the device's work-group limits; a workspace must fit
in one buffer (``max_buffer_bytes``: a split-K config tuned at a small shape may need more
than the device allows at a large one).

Launch sizes come from the space's ``launch:`` expressions, with derived values written out:
the integer part of octune's one expression language (``octune.core.expressions``), vetted
against its whitelist and compiled to closures; the C header translates the same vetted tree.
Nothing is ever ``eval``-ed. A family's own expressions (derived shape variables such as a
convolution's output height, the rules of a possible shape, flops) use the same language
(``octune.core.problem``). The data is ``data``; the nearest-shape search is ``neighbours``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from octune.core.expressions import ExpressionError, ScalarExpression, Undefined
from octune.core.problem import Problem, ShapeRules
from octune.lookup.data import (
    Answer,
    Entry,
    FollowUpSizes,
    Launch,
    LookupTable,
    Prediction,
    Predictor,
    Query,
    QueryError,
    TableError,
)
from octune.lookup.neighbours import NEAR_DISTANCE, NeighbourIndex, size_bounds


def _compiled(
    text: str, positions: Mapping[str, int], constants: Mapping[str, int], kind: str
) -> ScalarExpression:
    try:
        return ScalarExpression(text, positions, constants, kind=kind)
    except ExpressionError as error:
        raise TableError(str(error)) from None


MATCHES = ("exact", "nearest", "predicted", "default")


def check_shape(problem: Problem, query: Query, rules: ShapeRules | None = None) -> tuple[int, ...]:
    """The query's shape in ``Problem.keys`` order (defaults filled in), or a one-line
    QueryError: unknown or missing keys, a wrong dtype, a value out of range, an impossible
    shape. What every kernel of the family asks first, server and bundle alike.
    """
    if query.dtype not in problem.dtypes:
        raise QueryError(
            f"{problem.name} supports dtype {', '.join(problem.dtypes)}, not '{query.dtype}'"
        )
    keys = problem.keys
    given = query.shape
    if given.keys() != set(keys) and problem.defaults:
        given = {**dict(problem.defaults), **given}
    if given.keys() != set(keys):
        unknown = sorted(set(given) - set(keys))
        missing = [key for key in keys if key not in given]
        raise QueryError(
            f"a {problem.name} shape has exactly the keys {', '.join(keys)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            + (f"; missing: {', '.join(missing)}" if missing else "")
        )
    shape = tuple([given[key] for key in keys])
    for key, value, (low, high) in zip(keys, shape, problem.ranges, strict=True):
        if type(value) is not int and not (type(value) is bool and high == 1):
            raise QueryError(f"{problem.name} {key}={value!r} must be an integer")
        if not low <= value <= high:
            raise QueryError(f"{problem.name} {key}={value!r} is out of range: use {low}..{high}")
    shape = shape if all(type(v) is int for v in shape) else tuple(map(int, shape))
    why = (rules or ShapeRules(problem)).why_impossible(shape)
    if why is not None:
        raise QueryError(why)
    return shape


#: How answers of different kernels rank: measured first, then estimates, then defaults.
MATCH_RANK = {"exact": 0, "nearest": 1, "predicted": 1, "default": 2}


def best_answer(
    indexes: Sequence[KernelIndex], query: Query, predictor: Predictor | None = None
) -> Answer:
    """The answer of a family's kernels that is fastest for the query, as cuDNN's find picks
    an algorithm: a measured (exact) time beats any estimate, an estimate beats the default;
    among equals the lower time wins, then the kernel written for the device (``fit``), then
    the kernel name (so every reader agrees).
    """
    fit = {index.table.kernel: index.table.fit for index in indexes}
    return min(
        kernel_answers(indexes, query, predictor).values(),
        key=lambda a: (
            MATCH_RANK[a.match],
            math.inf if a.time_s is None else a.time_s,
            -fit[a.kernel],
            a.kernel,
        ),
    )


def kernel_answers(
    indexes: Sequence[KernelIndex], query: Query, predictor: Predictor | None = None
) -> dict[str, Answer]:
    """Each kernel's own answer to a family's query, for the kernels that take its shape; a
    QueryError with every kernel's reason where none does.
    """
    answers, reasons = {}, []
    for index in indexes:
        kernel = index.table.kernel
        try:
            answers[kernel] = index.lookup(replace(query, kernel=kernel), predictor)
        except QueryError as error:
            if str(error) not in reasons:
                reasons.append(str(error))
    if not answers:
        if not indexes:
            raise QueryError(f"no kernel answers '{query.kernel}'")
        raise QueryError("; ".join(reasons))
    return answers


class KernelIndex:
    """A ``LookupTable`` ready to answer: exact-match dictionary, neighbour trees, compiled
    launch expressions. Build once per table; ``lookup`` is safe to call from many threads.
    """

    def __init__(self, table: LookupTable, predictor: Predictor | None = None) -> None:
        self.table = table
        problem = table.problem
        self._rules = ShapeRules(problem)
        variables = (*table.parameters, *problem.variables)
        positions = {name: i for i, name in enumerate(variables)}

        def sizes(texts: Sequence[str], kind: str) -> list[ScalarExpression]:
            return [_compiled(text, positions, table.limits, kind) for text in texts]

        self._global = sizes(table.launch_global, "launch global size")
        self._local = sizes(table.launch_local, "launch local size")
        self._then = [
            (
                step.entry,
                sizes(step.launch_global, "launch global size"),
                sizes(step.launch_local, "launch local size"),
            )
            for step in table.then
        ]
        self._workspace = (
            None
            if table.workspace is None
            else _compiled(table.workspace, positions, table.limits, "workspace")
        )
        shape_positions = {name: i for i, name in enumerate(problem.variables)}
        self._requires = [
            _compiled(text, shape_positions, {}, "requires") for text in table.requires
        ]
        self._exact = {(e.shape, e.dtype): i for i, e in enumerate(table.tuned)}
        self._bounds = size_bounds(table.tuned, len(problem.sizes))
        self._tuned = NeighbourIndex(problem, table.tuned)
        self._predictions = NeighbourIndex(problem, table.predictions)
        self._predictor = predictor
        self._options: dict[tuple[int, ...], str] = {}
        self._work_group = table.limits.get("max_work_group_size")
        buffer = table.limits.get("max_buffer_bytes")
        self._most_workspace = None if buffer is None else buffer // 4  # float32 elements
        self._item_limits = [table.limits.get(f"max_work_item_size_{i}") for i in range(3)]
        self._flag_defines = [
            (define, problem.keys.index(key)) for define, key in problem.flag_defines.items()
        ]

    def launch(self, config: tuple[int, ...], shape: tuple[int, ...]) -> Launch | None:
        """The launches of ``config`` for ``shape``, or None where they are not legal."""
        try:
            values = (*config, *self._rules.values(shape))
            entry = self._sizes(self._global, self._local, values)
            if entry is None:
                return None
            then = []
            for name, global_, local in self._then:
                sizes = self._sizes(global_, local, values)
                if sizes is None:
                    return None
                then.append(FollowUpSizes(name, *sizes))
            workspace = 0 if self._workspace is None else self._workspace.evaluate(values)
        except Undefined:
            return None
        if workspace < 0 or (self._most_workspace is not None and workspace > self._most_workspace):
            return None
        return Launch(*entry, tuple(then), workspace)

    def _sizes(
        self,
        global_: Sequence[ScalarExpression],
        local: Sequence[ScalarExpression],
        values: Sequence[int],
    ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        global_size = tuple([e.evaluate(values) for e in global_])
        local_size = tuple([e.evaluate(values) for e in local])
        group = 1
        for g, size, limit in zip(global_size, local_size, self._item_limits, strict=False):
            if size < 1 or g < 1 or g % size or (limit is not None and size > limit):
                return None
            group *= size
        if self._work_group is not None and group > self._work_group:
            return None
        return global_size, local_size

    def takes(self, shape: tuple[int, ...]) -> str | None:
        """Why this kernel cannot take a possible shape (its ``requires``), or None."""
        try:
            values = self._rules.values(shape)
            for expression in self._requires:
                if not expression.evaluate(values):
                    return f"kernel {self.table.kernel} needs {expression.text}"
        except Undefined:
            return f"kernel {self.table.kernel} cannot compute this shape's variables"
        return None

    def check_query(self, query: Query) -> tuple[int, ...]:
        """The query's shape in ``Problem.keys`` order, or a one-line QueryError saying why not."""
        table = self.table
        if query.kernel != table.kernel:
            raise QueryError(f"this table answers kernel '{table.kernel}', not '{query.kernel}'")
        shape = check_shape(table.problem, query, self._rules)
        if query.dtype != table.dtype:
            raise QueryError(f"kernel {table.kernel} computes {table.dtype}, not {query.dtype}")
        why = self.takes(shape)
        if why is not None:
            raise QueryError(why)
        return shape

    def lookup(self, query: Query, predictor: Predictor | None = None) -> Answer:
        """exact, else nearest legal, else predicted, else default (see the module docstring)."""
        shape = self.check_query(query)
        table = self.table
        index = self._exact.get((shape, query.dtype))
        if index is not None and (launch := self.launch(table.tuned[index].config, shape)):
            return self._answer("exact", shape, query.dtype, table.tuned[index], launch)

        launches: dict[int, Launch | None] = {}

        def legal(entries: Sequence[Entry]) -> Callable[[int], bool]:
            def accept(i: int) -> bool:
                launches[i] = self.launch(entries[i].config, shape)
                return launches[i] is not None

            return accept

        inside = self.inside(shape, query.dtype)
        if inside and (predicted := self._predict(query, shape, predictor)) is not None:
            prediction, launch = predicted
            return self._build(
                "predicted", shape, query.dtype, prediction.config, launch,
                prediction.time_s, prediction.gflops, None,
            )  # fmt: skip
        near = self._tuned.nearest(shape, query.dtype, legal(table.tuned))
        if near is not None:
            neighbour, near_launch = table.tuned[near], launches[near]
            if (
                not table.predictions
                or not inside
                or self._tuned.distance(neighbour.shape, shape) <= NEAR_DISTANCE
            ):
                return self._answer("nearest", shape, query.dtype, neighbour, near_launch)
        index = self._predictions.nearest(shape, query.dtype, legal(table.predictions))
        if index is not None:
            entry = table.predictions[index]
            time_s = self._flops(shape) / (entry.gflops * 1e9)
            return self._build(
                "predicted", shape, query.dtype, entry.config, launches[index],
                time_s, entry.gflops, None,
            )  # fmt: skip
        if near is not None:  # far, but nearer to the truth than the default
            return self._answer("nearest", shape, query.dtype, neighbour, near_launch)
        launch = self.launch(table.default_config, shape)
        if launch is None:
            raise QueryError(
                f"no legal {table.kernel} config for shape {dict(query.shape)}: even the "
                "default config's launch sizes are invalid for it"
            )
        return self._build(
            "default", shape, query.dtype, table.default_config, launch, None, None, None
        )

    def neighbours(self, query: Query, count: int) -> list[tuple[int, ...]]:
        """The configs of the tuned shapes nearest the query, nearest first: at most ``count``
        distinct ones, each legal for it. What a first-use confirmation also measures where no
        tuned shape is the query's: at a batch nobody tuned, the config that suits it was
        often tuned at another layer (runtime.sources.confirm).
        """
        shape = self.check_query(query)
        configs: dict[tuple[int, ...], None] = {}
        tuned = self.table.tuned

        def legal(index: int) -> bool:
            return self.launch(tuned[index].config, shape) is not None

        for index in self._tuned.nearest_first(shape, query.dtype, legal):
            configs[tuned[index].config] = None
            if len(configs) >= count:
                break
        return list(configs)

    def predict(
        self, query: Query, predictor: Predictor | None = None
    ) -> tuple[Prediction, Launch] | None:
        """The model's (``predictor``, else the index's) config for the query's shape and its
        launch, where it launches there; inside the tuned range or not (``lookup`` asks only
        inside it, where it trusts the estimate; a confirmation measures it anywhere).
        """
        return self._predict(query, self.check_query(query), predictor)

    def _predict(
        self, query: Query, shape: tuple[int, ...], predictor: Predictor | None
    ) -> tuple[Prediction, Launch] | None:
        model = predictor or self._predictor
        if model is None:
            return None
        full = replace(query, shape=dict(zip(self.table.problem.keys, shape, strict=True)))
        prediction = model(self.table, full)
        if prediction is None or (launch := self.launch(prediction.config, shape)) is None:
            return None
        return prediction, launch

    def distance(self, a: tuple[int, ...], b: tuple[int, ...]) -> int:
        """Squared fixed-point distance between two shapes, as ``nearest`` measures it."""
        return self._tuned.distance(a, b)

    def inside(self, shape: tuple[int, ...], dtype: str) -> bool:
        """Whether every size of ``shape`` lies in the range of the tuned ones of ``dtype``
        (none where nothing of ``dtype`` is tuned), where estimates are trusted.
        """
        bounds = self._bounds.get(dtype)
        if bounds is None:
            return False
        low, high = bounds
        return all(lo <= size <= hi for size, lo, hi in zip(shape, low, high, strict=False))

    def _flops(self, shape: tuple[int, ...]) -> int:
        return self._rules.flops(self._rules.values(shape))

    def _answer(
        self,
        match: str,
        shape: tuple[int, ...],
        dtype: str,
        entry: Entry,
        launch: Launch | None,
    ) -> Answer:
        assert launch is not None  # callers only pass entries that were found legal
        problem = self.table.problem
        if match == "exact":
            time_s = entry.time_s
        else:
            time_s = self._flops(shape) / (entry.gflops * 1e9)
        source = {
            "workload_key": entry.workload_key,
            "shape": dict(zip(problem.keys, entry.shape, strict=True)),
            "time_s": entry.time_s,
            "gflops": entry.gflops,
        }
        return self._build(match, shape, dtype, entry.config, launch, time_s, entry.gflops, source)

    def _build(
        self,
        match: str,
        shape: tuple[int, ...],
        dtype: str,
        config: tuple[int, ...],
        launch: Launch,
        time_s: float | None,
        gflops: float | None,
        source: dict[str, Any] | None,
    ) -> Answer:
        table = self.table
        config_dict = dict(zip(table.parameters, config, strict=True))
        defines = {define: shape[position] for define, position in self._flag_defines}
        flag_options = " ".join(f"-D{name}={value}" for name, value in defines.items())
        defines.update(config_dict)
        config_options = self._options.get(config)
        if config_options is None:  # a table has a few hundred configs: build each string once
            options = [f"-D{name}={value}" for name, value in config_dict.items()]
            config_options = self._options[config] = " ".join(
                [*options, *table.extra_build_options]
            )
        return Answer(
            match=match,
            kernel=table.kernel,
            entry=table.entry,
            kernel_sha256=table.sha256,
            device_fingerprint=table.device_fingerprint,
            shape=dict(zip(table.problem.keys, shape, strict=True)),
            dtype=dtype,
            config=config_dict,
            defines=defines,
            build_options=f"{flag_options} {config_options}" if flag_options else config_options,
            global_size=launch.global_size,
            local_size=launch.local_size,
            time_s=time_s,
            gflops=gflops,
            source=source,
            then=launch.then,
            workspace_bytes=4 * launch.workspace,
        )
