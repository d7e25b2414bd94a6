"""How the runtime runs a batched MatMul (attention's scores and context: batch x heads
matrices): one tuned GEMM launch per matrix on sub-buffers of its tensors, or one launch of the
runtime's own kernel for all of them (``runtime/ops.cl``: one output a work-item, or square
tiles 32, 64 or 128 wide through local memory), which also reads and writes through views
(``runtime/views.py``). Which is faster depends on the device: a CPU runs the tuned
launches fastest, while on NVIDIA's OpenCL each launch costs about 5 us and a BERT layer's
24 x B launches cost more than the products (benchmarks/batched_matmul_ab.py). So by default
the runtime times the plans a layer can take when it loads the model and keeps the fastest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import pyopencl as cl

from octune.runtime import layout
from octune.runtime.steps import Tuned, View

#: ops.cl's batched_matmul_tiled by plan: the outputs a work-group computes along each side
#: (``BT``) and those a work-item computes along each (``TPW``).
TILES = {"tiled": (64, 4), "tiled-32": (32, 4), "tiled-128": (128, 8)}
#: The plans a batched MatMul can run by (``Runtime(batched=)``; None: the fastest here).
BATCHED_PLANS = ("per-matrix", "simple", *TILES)

Plan = TypeVar("Plan")


def pick_plan(
    makers: Mapping[str, Callable[[], Plan | None]],
    named: str | None,
    seconds: Callable[[Plan], float],
) -> tuple[str, Plan]:
    """The plan ``named`` where the layer takes it (its maker gives one), else the one of
    those it takes that ``seconds`` finds fastest; with its name.
    """
    if named in makers and (plan := makers[named]()) is not None:
        return named, plan
    others = ((name, make) for name, make in makers.items() if name != named)  # asked already
    plans = [(name, plan) for name, make in others if (plan := make()) is not None]
    if len(plans) == 1:
        return plans[0]
    times = [seconds(plan) for _, plan in plans]
    return plans[times.index(min(times))]


def shapes_of(step: Tuned, shapes: Mapping[str, tuple[int, ...]]) -> list[tuple[int, ...]]:
    """A batched product's A, B and y shapes as it computes them: a view's, else its
    operand's, and y's from A's and B's (its tensor may be a Reshape the epilogue took in:
    Swin's scores, (B * windows, heads, 49, 49) stored as (B, windows, heads, 49, 49)).
    """
    pairs = zip(step.inputs[:2], step.views[:2], strict=True)
    a, b = (view.shape if view else shapes[name] for name, view in pairs)
    y = (*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])
    return [a, b, step.views[2].shape if step.views[2] else y]


def product_meta(
    shapes: Sequence[tuple[int, ...]], views: Sequence[View | None]
) -> list[tuple[int, ...]]:
    """``ops.cl``'s batched_matmul axes: the output's batch dims; A's, B's and y's element
    strides along them (0 where one broadcasts); then each one's offset, row stride and
    column stride.
    """
    batch = shapes[-1][:-2]
    rows, corners = [layout.padded(batch, 1)], []
    for shape, view in zip(shapes, views, strict=True):
        if view is None:
            matrix = shape[-2] * shape[-1]
            along = layout.broadcast_strides(shape[:-2], batch)
            rows.append(tuple(stride * matrix for stride in along))
            corners += [0, shape[-1], 1]
        else:
            pairs = zip(shape[:-2], view.strides[:-2], strict=True)
            rows.append(layout.padded([0 if size == 1 else s for size, s in pairs], 0))
            corners += [view.offset, *view.strides[-2:]]
    return [*rows, tuple(corners)]


def fill_with_ones(queue: cl.CommandQueue, buffer: cl.Buffer, dtype: np.dtype) -> None:
    """Ones over ``buffer``, as many whole elements as it holds: operands to time the plans
    on (never all zero, never a NaN or a denormal left in a fresh buffer).
    """
    one = np.ones(1, dtype)
    cl.enqueue_fill_buffer(queue, buffer, one, 0, buffer.size // one.itemsize * one.itemsize)


def splits(
    a_shape: Sequence[int], b_shape: Sequence[int], sizes: Sequence[int], align: int, item: int
) -> bool:
    """Whether a batched layer's matrices can be sub-buffers: one batch shape for both
    operands, and matrix sizes (elements) the device's base address alignment (bytes) allows.
    """
    return tuple(a_shape[:-2]) == tuple(b_shape[:-2]) and not any(
        item * size % align for size in sizes
    )


def per_matrix_operands(
    buffers: tuple[cl.Buffer, ...],
    count: int,
    sizes: tuple[int, ...],
    item: int,
    hold: Callable[[cl.Buffer], cl.Buffer],
) -> list[tuple[tuple[cl.Buffer, ...], cl.Buffer]]:
    """A layer's operands, one launch per matrix of a batched layer (``count`` matrices):
    sub-buffers of each operand, ``sizes`` elements apart, kept alive by ``hold``.
    """
    if count == 1:
        return [(buffers[:-1], buffers[-1])]
    operands = []
    for i in range(count):
        a_i, b_i, y_i = (
            hold(buffer.get_sub_region(item * i * size, item * size))
            for buffer, size in zip(buffers, sizes, strict=True)
        )
        operands.append(((a_i, b_i), y_i))
    return operands
