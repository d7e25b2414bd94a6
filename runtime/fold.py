"""Chains of data-movement steps folded into one gather each, before anything is allocated.

A Transpose, Slice, Split or Gather (``IndexMap`` in plain mode) moves every output element
from one input element; so does a chain of them, with Reshapes between. Each step of a chain
is a launch, and on a GPU a launch costs more than a small copy (ShuffleNet v2's channel
shuffle is Concat, Reshape, Transpose, Reshape, then two Slices: five launches where the
Concat copies its inputs, to move each value once). Here a step reads straight from the first
tensor of its chain: its source indices are composed numerically (the shapes are static) and
factored back into ``index_map``'s six axes, one of which may be a table. A step that no
longer has a reader is dropped, and a Concat read only by such steps can lay its inputs out
where the device can start a sub-buffer (``gapped``) instead of copying them: its readers'
tables skip the gaps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple, TypeGuard

import numpy as np

from octune.runtime import layout
from octune.runtime.steps import Alias, Concat, Graph, IndexMap, Step

#: The most output elements whose source indices are composed (int64 arrays of that length).
LIMIT = 1 << 24


def sources(index_map: IndexMap, indices: np.ndarray) -> np.ndarray:
    """The input element each of the output elements ``indices`` reads, as ops.cl's
    ``index_map`` computes it in plain mode.
    """
    rest = indices.astype(np.int64)
    found = np.zeros_like(rest)
    table = np.asarray(index_map.table, dtype=np.int64)
    for k in range(layout.RANK - 1, -1, -1):
        out_dim, start, step, _, stride = index_map.axes[k]
        o = rest % out_dim
        rest //= out_dim
        tabled = k == index_map.table_axis and index_map.table
        found += (table[o] if tabled else start + o * step) * stride
    return found


class Factored(NamedTuple):
    """An ``IndexMap``'s reading parameters."""

    axes: tuple[layout.Axis, ...]
    table: tuple[int, ...]
    table_axis: int


def separable(grid: np.ndarray) -> tuple[int, list[np.ndarray]] | None:
    """``(base, parts)`` with ``grid[i] == base + sum(parts[k][i_k])`` for every index i (each
    axis adds its own offsets), or None where the grid is no such sum.
    """
    base, rank = int(grid.flat[0]), grid.ndim
    parts = [grid[(0,) * k + (slice(None),) + (0,) * (rank - k - 1)] - base for k in range(rank)]
    total = base + sum(
        part.reshape([size if j == k else 1 for j, size in enumerate(grid.shape)])
        for k, part in enumerate(parts)
    )
    return (base, parts) if np.array_equal(grid, total) else None


def factor(found: np.ndarray, dims: Sequence[int]) -> Factored | None:
    """``index_map``'s axes (and table) that read ``found`` (flat source indices of an output
    of ``dims``, RANK of them), or None where that takes more than one table.
    """
    summed = separable(found.reshape(dims))
    if summed is None:
        return None
    base, parts = summed
    irregular = [k for k, part in enumerate(parts) if len(part) > 2 and len(set(np.diff(part))) > 1]
    if len(irregular) > 1:
        return None
    if not irregular and base:  # the base offset travels as a one-entry table
        ones = [k for k, size in enumerate(dims) if size == 1]
        irregular = ones[:1] or [0]
    axes: list[layout.Axis] = []
    table: tuple[int, ...] = ()
    table_axis = -1
    for k, (size, part) in enumerate(zip(dims, parts, strict=True)):
        if k in irregular:
            values = (part + base).tolist()
            if min(values) < 0 or max(values) >= 2**31:
                return None
            axes.append((size, 0, 1, size, 1))
            table, table_axis = tuple(values), k
        else:
            axes.append((size, 0, 1, size, int(part[1]) if size > 1 else 0))
    if max(abs(axis[4]) for axis in axes) >= 2**31:
        return None
    return Factored(tuple(axes), table, table_axis)


def _gathers(step: Step) -> TypeGuard[IndexMap]:
    """Whether the step moves elements and nothing else (so a reader can fold it)."""
    return (
        isinstance(step, IndexMap)
        and step.mode == "plain"
        and step.epilogue.empty
        and len(step.inputs) == 1
    )


class Folder:
    """The graph's plain index maps, each reading from the start of its chain."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producer = {step.output: step for step in graph.steps}

    def chain(self, step: IndexMap) -> tuple[str, np.ndarray, int]:
        """The tensor the step's chain starts at, the flat element of it each output element
        reads, and how many steps the chain folds (0: the step reads as it is).
        """
        n = math.prod(axis[0] for axis in step.axes)
        found = sources(step, np.arange(n))
        tensor, folded = step.inputs[0], 0
        while (producer := self.producer.get(tensor)) is not None:
            if isinstance(producer, Alias):
                tensor = producer.inputs[0]
            elif _gathers(producer):
                found = sources(producer, found)
                tensor, folded = producer.inputs[0], folded + 1
            else:
                break
        return tensor, found, folded

    def fold(self, step: IndexMap, gapped: Mapping[str, Sequence[int]]) -> IndexMap | None:
        """The step reading from its chain's start (through a gapped Concat's layout), or None
        where it folds nothing or its reads do not factor.
        """
        if step.mode != "plain" or math.prod(a[0] for a in step.axes) > LIMIT:
            return None
        tensor, found, folded = self.chain(step)
        if tensor in gapped:
            found = _physical(found, self.graph, tensor, gapped[tensor])
        elif not folded:
            return None
        factored = factor(found, [axis[0] for axis in step.axes])
        if factored is None:
            return None
        return replace(step, inputs=(tensor,), **factored._asdict())

    def readers(self, tensor: str) -> list[Step]:
        """The steps that read ``tensor``, through Reshapes."""
        found = []
        for step in self.graph.steps:
            if tensor in step.inputs:
                if isinstance(step, Alias):
                    found += self.readers(step.output)
                else:
                    found.append(step)
        return found


def _physical(found: np.ndarray, graph: Graph, concat: str, offsets: Sequence[int]) -> np.ndarray:
    """Flat indices into a Concat's output, moved to where its inputs lie in a gapped layout
    (input j at element ``offsets[j]``).
    """
    step = next(s for s in graph.steps if s.output == concat)
    sizes = [math.prod(graph.shapes[name]) for name in step.inputs]
    starts = np.cumsum([0, *sizes[:-1]])
    part = np.searchsorted(starts, found, side="right") - 1
    return found - starts[part] + np.asarray(offsets)[part]


def gap_offsets(graph: Graph, step: Concat, align: int, itemsize: int) -> tuple[int, ...]:
    """Where a Concat's inputs start (elements of ``itemsize`` bytes) if each starts at a
    multiple of ``align`` bytes: the last offset is the buffer's length.
    """
    offsets = [0]
    for name in step.inputs:
        end = offsets[-1] + math.prod(graph.shapes[name])
        offsets.append(-(-end * itemsize // align) * align // itemsize)
    offsets[-1] = offsets[-2] + math.prod(graph.shapes[step.inputs[-1]])
    return tuple(offsets)


def live(graph: Graph, steps: Sequence[Step]) -> list[Step]:
    """``steps`` without those whose output nothing reads (a folded chain's inner steps)."""
    needed = set(graph.outputs)
    kept = []
    for step in reversed(steps):
        if step.output in needed:
            kept.append(step)
            needed.update(step.reads)
    return kept[::-1]
