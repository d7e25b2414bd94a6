"""Where each output element of a data-movement operator reads its input, as ``ops.cl``'s
shape-generic kernels take it: six axes, leading ones of size 1.

Transpose, Slice, Split, Gather (constant indices), Expand, Tile and Pad are one kernel,
``index_map``: along each axis k an output coordinate o reads input coordinate
``start + o * step`` (or ``table[o]``), wrapped (tile) or padded. Broadcasting element-wise
operators and reductions read their inputs through strides along the output's axes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

RANK = 6

Axis = tuple[int, int, int, int, int]  # out_dim, start, step, in_dim, stride


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides of ``shape``."""
    return [math.prod(shape[axis + 1 :]) for axis in range(len(shape))]


def padded(values: Sequence[int], fill: int) -> tuple[int, ...]:
    """``values`` with ``fill`` in front up to RANK entries."""
    if len(values) > RANK:
        raise ValueError(f"more than {RANK} axes")
    return (fill,) * (RANK - len(values)) + tuple(values)


def identity_axes(shape: Sequence[int]) -> list[Axis]:
    """Every axis read whole, in order: the start that slices, gathers and pads edit."""
    return [(size, 0, 1, size, stride) for size, stride in zip(shape, strides(shape), strict=True)]


def index_axes(axes: Sequence[Axis]) -> tuple[Axis, ...]:
    """Per-axis parameters of ``index_map`` for RANK axes."""
    if len(axes) > RANK:
        raise ValueError(f"more than {RANK} axes")
    return ((1, 0, 1, 1, 0),) * (RANK - len(axes)) + tuple(axes)


def transpose(shape: Sequence[int], perm: Sequence[int]) -> list[Axis]:
    """y = x.transpose(perm)."""
    step = strides(shape)
    return [(shape[axis], 0, 1, shape[axis], step[axis]) for axis in perm]


def slice_axis(size: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice on one axis (Python's clamping): its first coordinate and its length."""
    taken = range(size)[slice(start, end, step)]
    return (taken.start if len(taken) else 0), len(taken)


def broadcast_strides(shape: Sequence[int], out: Sequence[int]) -> tuple[int, ...]:
    """Strides of a tensor of ``shape`` along the axes of ``out`` it broadcasts to (numpy's
    rule: right-aligned, size 1 repeats): RANK entries.
    """
    aligned = (1,) * (len(out) - len(shape)) + tuple(shape)
    step = strides(aligned)
    return padded([0 if size == 1 else s for size, s in zip(aligned, step, strict=True)], 0)


def block(shape: Sequence[int], out: Sequence[int]) -> tuple[int, int] | None:
    """Where a tensor of ``shape`` broadcasts to ``out`` along one block of consecutive axes
    (size 1 elsewhere): element i of the output reads ``(i // inner) % size``; None otherwise.
    """
    if len(shape) > len(out):
        return None
    aligned = (1,) * (len(out) - len(shape)) + tuple(shape)
    wide = [axis for axis, size in enumerate(aligned) if size != 1]
    if not wide:
        return 1, 1
    first, last = wide[0], wide[-1]
    if list(aligned[first : last + 1]) != list(out[first : last + 1]):
        return None
    return math.prod(out[last + 1 :]), math.prod(out[first : last + 1])
