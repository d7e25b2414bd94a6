"""Kernel families: the plug-in interface between a problem (GEMM, conv2d, a user's kernel)
and the pipeline.

A family is one Python module beside its OpenCL templates and search spaces. It declares its
shape once (``ShapeParam``s, derived variables, the rules a possible shape obeys, the flops and
each operand's extent, all as lookup expressions) and knows how to put a workload on a device
(``Family.bind``: random inputs, kernel arguments, float64 reference; a runtime's arguments:
``Family.launch_arguments``). Everything else reads that declaration: the CLI's options,
workloads files, REST queries, the lookup's validation and distances, bundles, the C header
and the runtime. So adding a family adds files and edits none here.
"""

from __future__ import annotations

import math
import statistics
import timeit
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

import numpy as np

# A family module's inputs and tolerances (catalogue/precision.py): part of the plug-in interface,
# so a user's family imports everything it needs from this module.
from octune.catalogue.precision import random_normal as random_normal
from octune.catalogue.precision import tolerance as tolerance
from octune.core.errors import WorkloadError
from octune.core.problem import Problem, ShapeRules

if TYPE_CHECKING:
    import pyopencl as cl

# Largest extent the kernels index with 32-bit ints; larger problems need another kernel.
MAX_DIM = 1 << 20
MAX_ELEMENTS = (1 << 31) - 1

#: A kernel's arguments for its input buffers and its output buffer (a workspace follows).
Arguments: TypeAlias = "Callable[[Sequence[cl.Buffer], cl.Buffer], tuple[object, ...]]"


@dataclass(frozen=True)
class ShapeParam:
    """One key of a family's shape: a CLI option ``--name``, a query field, a workload key part.

    ``linear`` keys (layout flags, filter sizes, strides) are compared step by step when the
    lookup looks for the nearest tuned shape; the others in octaves. ``define`` keys are
    compile-time constants of the template (``-DNAME=value``), the rest kernel arguments.
    """

    name: str
    help: str
    low: int = 1
    high: int = MAX_DIM
    default: int | None = None
    linear: bool = False
    define: bool = False

    @property
    def var(self) -> str:
        """The name expressions and templates use: upper case."""
        return self.name.upper()

    @property
    def flag(self) -> bool:
        return (self.low, self.high) == (0, 1)


class BoundWorkload(Protocol):
    """A workload's data on one device: what measurement needs to run, time and check it."""

    def args(self, input_set: int) -> tuple[object, ...]: ...

    @property
    def input_sets(self) -> int: ...

    def poison_output(self) -> None: ...

    def error_ratio(self) -> float:
        """Largest |error| / tolerance over the output of the last run (< 1 passes; NaN: inf)."""
        ...


@dataclass(frozen=True)
class OnnxNode:
    """An ONNX node as a family reads it (``Family.read_onnx``), with nothing of onnx's own:
    its operator, its attributes (ints, floats, strings and lists of them) and the static
    shapes of its first two inputs.
    """

    op: str
    attributes: Mapping[str, Any]
    inputs: tuple[tuple[int, ...], ...]

    def ints(self, name: str, default: Sequence[int]) -> list[int]:
        """An int or ints attribute as a list (a Conv's strides, say)."""
        value = self.attributes.get(name, default)
        return [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]

    def integer(self, name: str, default: int) -> int:
        return int(self.attributes.get(name, default))


#: A node as a family's shape and how many launches of it a forward pass makes, or why not.
OnnxReading: TypeAlias = tuple[dict[str, int], int] | str


class Family(ABC):
    """A problem family. Subclasses fill in the class attributes and ``bind``."""

    name: ClassVar[str]
    params: ClassVar[tuple[ShapeParam, ...]]
    flops: ClassVar[str]  # expression of the variables, e.g. "2 * M * N * K"
    extents: ClassVar[tuple[str, ...]]  # each operand's element count, as expressions
    derived: ClassVar[tuple[tuple[str, str], ...]] = ()  # e.g. (("OH", "..."),)
    rules: ClassVar[tuple[tuple[str, str], ...]] = ()  # (must hold, why the shape is impossible)
    dtypes: ClassVar[tuple[str, ...]] = ("float32",)
    #: The ONNX operators whose nodes this family computes (``read_onnx`` reads them), so a
    #: model's layers reach the family in ``tune --model`` with no edit elsewhere.
    onnx_ops: ClassVar[tuple[str, ...]] = ()
    #: A typical shape (its required keys), shown in the service's documentation.
    example: ClassVar[Mapping[str, int]] = {}
    #: The keys a dashboard's coverage map varies on its x and y axes (keys in one group move
    #: together, e.g. a conv's height and width); empty: its first two required keys.
    coverage_axes: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: Whether ``bind`` takes ``recall`` (draws every random value in its inputs), so that a
    #: measuring process reuses host operands (``OperandMemo``).
    recalls_operands: ClassVar[bool] = False

    @abstractmethod
    def bind(
        self,
        workload: Workload,
        kernel: str,
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
        recall: Recall | None = None,
    ) -> BoundWorkload:
        """Random inputs (never all zero), the float64 reference, and ``kernel``'s arguments;
        ``recall``: host operands drawn before for these inputs (``Bound``), where it can.
        """

    def launch_arguments(
        self, workload: Workload, entry: str, alpha: float = 1.0, zeros: tuple[int, int] = (0, 0)
    ) -> Arguments:
        """``entry``'s arguments for a model's buffers (``octune.runtime``), ``alpha`` scaling
        the product where the model asks (ONNX Gemm), ``zeros`` an int8 workload's input and
        output zero points: the runtime asks the family, so it runs any family's kernels as
        tuning does without naming one. A family whose kernels no model runs leaves this out.
        """
        raise NotImplementedError(f"{self.name} gives no launch arguments: no model runs it")

    def argument_layout(self, entry: str, dtype: str) -> str | None:
        """How ``entry``'s arguments are laid out, named for a runtime without Python (the C
        header's ``OCTUNE_ARGS_*``): the same order ``launch_arguments`` gives; None where
        no runtime launches it.
        """
        return None

    def read_onnx(self, node: OnnxNode) -> OnnxReading:
        """A node of one of ``onnx_ops`` as this family's shape and how many launches of it a
        forward pass makes (a batched MatMul: one a matrix), or why the family cannot take it.
        """
        raise NotImplementedError(f"{self.name} reads no ONNX node")

    def host_baseline(self, workload: Workload) -> Callable[[], object] | None:
        """A computation of ``workload`` on the host's processor with NumPy, which a CPU
        device's tuned time is shown beside (``octune best``); None where NumPy has none.
        """
        return None

    def describe(self, shape: Mapping[str, int]) -> str:
        """How a workload reads in tables and messages: its keys, those at their defaults
        left out.
        """
        defaults = {p.name: p.default for p in self.params}
        keys = [f"{key}={value}" for key, value in shape.items() if defaults.get(key) != value]
        return " ".join([self.name, *keys])

    def coverage_keys(self) -> tuple[tuple[str, ...], ...]:
        """``coverage_axes``, or the first two required keys (fewer: no map is drawn)."""
        if self.coverage_axes:
            return self.coverage_axes
        return tuple((p.name,) for p in self.params if p.default is None)[:2]

    def example_shape(self) -> dict[str, int]:
        """``example``, with 64 for any required key it leaves out."""
        return {p.name: self.example.get(p.name, 64) for p in self.params if p.default is None}

    @cached_property
    def problem(self) -> Problem:
        """What the lookup (service, bundles, C header) knows of this family."""
        return Problem(
            name=self.name,
            sizes=tuple(p.name for p in self.params if not p.linear),
            flags=tuple(p.name for p in self.params if p.linear),
            shape_vars={p.var: p.name for p in self.params},
            flag_defines={p.var: p.name for p in self.params if p.define},
            dtypes=self.dtypes,
            max_size=MAX_DIM,
            flops=self.flops,
            ranges=tuple((p.low, p.high) for p in self.ordered_params),
            derived=self.derived,
            rules=self.rules,
            extents=self.extents,
            max_elements=MAX_ELEMENTS,
            defaults=tuple((p.name, p.default) for p in self.params if p.default is not None),
        )

    @property
    def ordered_params(self) -> tuple[ShapeParam, ...]:
        """Parameters in ``Problem.keys`` order: sizes first, then linear keys."""
        return (
            *(p for p in self.params if not p.linear),
            *(p for p in self.params if p.linear),
        )

    @cached_property
    def shape_rules(self) -> ShapeRules:
        return ShapeRules(self.problem)

    @property
    def shape_names(self) -> tuple[str, ...]:
        """Every variable a search space's launch expressions may name."""
        return self.problem.variables

    def workload(self, shape: Mapping[str, int], dtype: str = "float32") -> Workload:
        """A validated workload; missing keys take their defaults. One-line WorkloadError."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(shape) - set(known))
        if unknown:
            raise WorkloadError(
                f"{self.name} has no parameter {', '.join(unknown)}: it takes "
                + ", ".join(p.name for p in self.params)
            )
        values: dict[str, int] = {}
        for param in self.params:
            value = shape.get(param.name, param.default)
            if value is None:
                raise WorkloadError(f"{self.name} needs --{param.name} ({param.help})")
            if isinstance(value, bool):
                value = int(value)
            if not isinstance(value, int) or not param.low <= value <= param.high:
                raise WorkloadError(
                    f"{self.name} {param.name}={value!r} is out of range: use an integer in "
                    f"{param.low}..{param.high}"
                )
            values[param.name] = value
        if dtype not in self.dtypes:
            raise WorkloadError(f"{self.name} supports dtype {', '.join(self.dtypes)}, not {dtype}")
        keyed = tuple(values[p.name] for p in self.ordered_params)
        if (why := self.shape_rules.why_impossible(keyed)) is not None:
            raise WorkloadError(why)
        return Workload(self, tuple(values.items()), dtype)


@dataclass(frozen=True)
class Workload:
    """One problem instance: a family and the values of its shape keys."""

    family: Family = field(compare=False)
    items: tuple[tuple[str, int], ...]
    dtype: str = "float32"

    @property
    def problem(self) -> str:
        return self.family.name

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.items)

    @property
    def key(self) -> str:
        fields = ",".join(f"{name}={value}" for name, value in self.items)
        return f"{self.problem}:{fields},dtype={self.dtype}"

    def __str__(self) -> str:
        described = self.family.describe(self.shape)
        return described if self.dtype == "float32" else f"{described} {self.dtype}"

    def shape_vars(self) -> dict[str, int]:
        """Every variable a launch expression may name: shape variables, then derived ones."""
        rules = self.family.shape_rules
        keyed = tuple(self.shape[key] for key in self.family.problem.keys)
        return dict(zip(self.family.problem.variables, rules.values(keyed), strict=True))

    @property
    def flops(self) -> int:
        rules = self.family.shape_rules
        return rules.flops(list(self.shape_vars().values()))

    @property
    def extents(self) -> tuple[int, ...]:
        """Each operand's element count (inputs, then the output): a batched layer's
        operands are cut into matrices of these sizes.
        """
        return tuple(self.family.shape_rules.extents(list(self.shape_vars().values())))

    def defines(self) -> dict[str, int]:
        """The shape keys the template takes at compile time."""
        return {p.var: self.shape[p.name] for p in self.family.params if p.define}

    def bind(
        self,
        kernel: str,
        context: cl.Context,
        queue: cl.CommandQueue,
        rng: np.random.Generator,
        recall: Recall | None = None,
    ) -> BoundWorkload:
        if recall is None or not self.family.recalls_operands:  # a user's family may not
            return self.family.bind(self, kernel, context, queue, rng)
        return self.family.bind(self, kernel, context, queue, rng, recall=recall)


@dataclass(frozen=True)
class HostOperands:
    """A workload's inputs on the host, the device copies of them timing rotates through, and
    their reference.
    """

    inputs: tuple[np.ndarray, ...]
    copies: int
    expected: np.ndarray
    tolerance: np.ndarray | float


#: How a bind recalls host operands drawn before for the same inputs, or draws them.
Recall: TypeAlias = Callable[[Callable[[], HostOperands]], HostOperands]


class OperandMemo:
    """The last few workloads' host operands, by the caller's key (workload, dtype, seed): a
    measuring process binds each kernel of a layer in turn, re-binds after a failed launch and
    confirms on another seed, and drawing a batch-16 layer's inputs and its float64 reference
    cost 1.3 s a bind on the H200's host, most of a network run's first round (with it a
    switch took 0.92 s: ResNet-50 at batch 16 got 33 turns in 90 s where it got 26).
    """

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, HostOperands] = OrderedDict()

    def recall(self, key: Hashable) -> Recall:
        """``Bound``'s ``recall`` for ``key``."""

        def get(draw: Callable[[], HostOperands]) -> HostOperands:
            found = self._entries.pop(key, None)
            self._entries[key] = found if found is not None else draw()
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return self._entries[key]

        return get


class Bound:
    """A workload's operands on a device: one checked input set plus extra buffers of it to
    rotate while timing (so small problems are not timed out of a cache a real network layer
    would not find warm: other memory, not other values, which cost a batch-16 layer a random
    draw each), and one output buffer that ``poison_output`` fills with NaN. ``recall``
    (``OperandMemo.recall``) reuses host operands drawn for the same inputs before; only where
    every random draw is in ``make_inputs`` (the arguments depend on none).
    """

    def __init__(
        self,
        context: cl.Context,
        queue: cl.CommandQueue,
        make_inputs: Callable[[], tuple[np.ndarray, ...]],
        reference: Callable[..., tuple[np.ndarray, np.ndarray | float]],
        arguments: Callable[[Sequence[cl.Buffer], cl.Buffer], tuple[object, ...]],
        output_type: type[np.generic] = np.float32,
        recall: Recall | None = None,
    ) -> None:
        import pyopencl as cl

        cache = max(int(context.devices[0].global_mem_cache_size), 1)

        def draw() -> HostOperands:
            first = make_inputs()
            expected, tolerance = reference(*first)
            operand_bytes = max(sum(x.nbytes for x in first), 1)
            copies = min(4, max(1, math.ceil(2 * cache / operand_bytes)))
            return HostOperands(first, copies, expected, tolerance)

        host = draw() if recall is None else recall(draw)
        self.expected, self.tolerance = host.expected, host.tolerance
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        self._inputs = [
            [cl.Buffer(context, flags, hostbuf=x) for x in host.inputs] for _ in range(host.copies)
        ]
        self.output = np.empty(self.expected.shape, dtype=output_type)
        self._output = cl.Buffer(context, cl.mem_flags.READ_WRITE, size=self.output.nbytes)
        self._queue = queue
        self._arguments = arguments

    @property
    def input_sets(self) -> int:
        return len(self._inputs)

    def args(self, input_set: int) -> tuple[object, ...]:
        return self._arguments(self._inputs[input_set], self._output)

    def poison_output(self) -> None:
        """Fill the output with NaN (integers: the value rarest in the expected output): an
        element the kernel skips, or reads, shows.
        """
        import pyopencl as cl

        kind = self.output.dtype.type
        if np.issubdtype(kind, np.floating):
            poison = kind(np.nan)
        else:
            counts = np.bincount(self.expected.astype(np.int64).ravel() & 0xFF, minlength=256)
            poison = kind(int(np.argmin(counts)))
        cl.enqueue_fill_buffer(self._queue, self._output, poison, 0, self.output.nbytes)

    def error_ratio(self) -> float:
        import pyopencl as cl

        cl.enqueue_copy(self._queue, self.output, self._output)
        ratio = np.abs(self.output.astype(np.float64) - self.expected) / self.tolerance
        return float("inf") if np.isnan(ratio).any() else float(ratio.max())


def host_timing(
    run: Callable[[], object], min_seconds: float = 1.0, min_runs: int = 10
) -> tuple[float, float, float]:
    """The median, first and third quartile of ``run``'s time over ``min_runs`` timings of
    ``min_seconds`` in all, after at least 0.2 s of warm-up calls (a BLAS's threads start on
    its first calls: one timing of 0.3 s swung NumPy's GEMM between 2 and 232 GFLOP/s on one
    host). ``timeit`` times it, the garbage collector off.
    """
    timer = timeit.Timer(run)
    calls, spent = timer.autorange()  # the warm-up: calls enough to take 0.2 s
    number = max(1, math.ceil(min_seconds / min_runs / (spent / calls)))
    times = [total / number for total in timer.repeat(repeat=min_runs, number=number)]
    first, median, third = statistics.quantiles(times, n=4)
    return median, first, third


def host_seconds(run: Callable[[], object]) -> float:
    """The median time of ``run`` (``host_timing``)."""
    return host_timing(run)[0]
