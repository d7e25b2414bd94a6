"""Attention's data movement read and written in place by its batched products.

Between attention's projections and its two batched MatMuls an exported transformer moves
every head into place: BERT transposes Q, K and V from (B, S, H, D) to (B, H, S, D) and the
context back, ViT (PyTorch's MultiheadAttention) splits one QKV tensor with Gathers and
Transposes and scales Q and K on the way. Each is a launch that copies the tensor (ViT-B/16
at batch 16 on an H200: 2.15 ms of 24, against 1.25 ms for PyTorch's whole fused attention).
Every one of them, after ``fold`` composed its chain, reads its input at an affine index: a
product can read the chain's start itself, through strides (``View``), and write its output
where a Transpose that alone reads it would have put it. A scalar the moved tensor was
multiplied by joins the product's alpha. The maps nothing reads any more are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

import numpy as np

from octune.runtime.fold import LIMIT, live, separable, sources
from octune.runtime.steps import Alias, Epilogue, Graph, IndexMap, Step, Tuned, View, readers


def affine(grid: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """``(offset, strides)`` with ``grid[i] == offset + sum(i_k * strides[k])`` for every
    index i, or None where no such strides exist: a ``separable`` grid whose every axis
    steps evenly.
    """
    summed = separable(grid)
    if summed is None:
        return None
    offset, parts = summed
    strides = tuple(int(part[1]) if len(part) > 1 else 0 for part in parts)
    even = all(
        np.array_equal(part, np.arange(len(part)) * stride)
        for part, stride in zip(parts, strides, strict=True)
    )
    return (offset, strides) if even else None


def scalar(epilogue: Epilogue, constants: Mapping[str, np.ndarray]) -> float | None:
    """The factor an epilogue that only multiplies by one constant applies (1.0 for none),
    or None for any other epilogue.
    """
    if epilogue.empty:
        return 1.0
    if (epilogue.bias, epilogue.other, epilogue.activation) != (None, None, "none"):
        return None
    value = constants.get(epilogue.scale or "")
    return None if value is None or value.size != 1 else float(value.reshape(-1)[0])


def _grid(step: IndexMap, shape: Sequence[int]) -> np.ndarray | None:
    """The input element each output element of a plain map reads, in ``shape``."""
    n = math.prod(shape)
    if step.mode != "plain" or n > LIMIT:
        return None
    return sources(step, np.arange(n, dtype=np.int64)).reshape(shape)


class Viewer:
    """The pass over a graph's steps (after ``fold``): ``views`` gives them with each batched
    product reading and writing through the maps around it. ``fixed``: tensors whose
    elements do not lie as their shape says (a gapped Concat's), never read through a view.
    """

    def __init__(self, graph: Graph, fixed: Collection[str]) -> None:
        self.graph = graph
        self.fixed = set(fixed)

    def views(self, steps: list[Step]) -> list[Step]:
        for step in steps:  # a gapped tensor's reshapes are gapped too
            if isinstance(step, Alias) and step.inputs[0] in self.fixed:
                self.fixed.add(step.output)
        producer = {step.output: step for step in steps}
        reading = readers(steps)
        out, dropped = [], set()
        for step in steps:
            if isinstance(step, Tuned) and step.layer.batched and step.layer.dtype != "int8":
                factor = scalar(step.epilogue, self.graph.constants)
                if factor is not None:  # a scale after the product: its alpha, not a launch
                    step = replace(step, alpha=step.alpha * factor, epilogue=Epilogue())
                step = self._read_in_place(step, producer)
                step, absorbed = self._write_in_place(step, reading)
                if absorbed is not None:
                    dropped.add(id(absorbed))
            out.append(step)
        return live(self.graph, [step for step in out if id(step) not in dropped])

    def _map_for(self, name: str, producer: Mapping[str, Step]) -> IndexMap | None:
        step = producer.get(name)
        if not isinstance(step, IndexMap) or self.fixed & {name, step.inputs[0]}:
            return None
        return None if self.graph.typed.keys() & {name, step.inputs[0]} else step

    def _read_in_place(self, step: Tuned, producer: Mapping[str, Step]) -> Tuned:
        """The product reading each operand a map wrote from that map's own input."""
        inputs, views, alpha = list(step.inputs), list(step.views), step.alpha
        for k, name in enumerate(step.inputs[:2]):
            moved = self._map_for(name, producer)
            factor = None if moved is None else scalar(moved.epilogue, self.graph.constants)
            if moved is None or factor is None or views[k] is not None:
                continue
            shape = self.graph.shapes[name]
            grid = _grid(moved, shape)
            found = None if grid is None else affine(grid)
            if found is not None:
                inputs[k], views[k] = moved.inputs[0], View(tuple(shape), *found)
                alpha *= factor
        return replace(step, inputs=tuple(inputs), views=(views[0], views[1], views[2]),
                       alpha=alpha)  # fmt: skip

    def _write_in_place(
        self, step: Tuned, readers: Mapping[str, list[Step]]
    ) -> tuple[Tuned, IndexMap | None]:
        """The product writing its output where the one map that reads it puts each element
        (a permutation: every element once), and that map; else the product as it is.
        """
        graph, name = self.graph, step.output
        found = readers.get(name, [])
        moved = found[0] if len(found) == 1 else None
        if (
            not isinstance(moved, IndexMap)
            or moved.inputs != (name,)
            or not step.epilogue.empty
            or name in graph.outputs
            or self.fixed & {name, moved.output}
            or graph.typed.keys() & {name, moved.output}
        ):
            return step, None
        after = scalar(moved.epilogue, graph.constants)
        shape = graph.shapes[name]
        grid = _grid(moved, graph.shapes[moved.output])
        if after is None or grid is None or grid.size != math.prod(shape):
            return step, None
        where = np.full(grid.size, -1, dtype=np.int64)
        where[grid.reshape(-1)] = np.arange(grid.size)
        placed = affine(where.reshape(shape)) if (where >= 0).all() else None
        if placed is None:
            return step, None
        view = View(tuple(shape), *placed)
        return replace(step, output=moved.output, views=(*step.views[:2], view),
                       alpha=step.alpha * after,
                       nodes=step.nodes + moved.nodes, ops=step.ops + moved.ops), moved  # fmt: skip
