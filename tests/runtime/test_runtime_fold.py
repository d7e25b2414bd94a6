"""Folding chains of index maps: the composed and factored map reads what the chain read."""

from __future__ import annotations

import math

import numpy as np
import pytest

from octune.runtime import layout
from octune.runtime.fold import factor, sources
from octune.runtime.steps import IndexMap


def _map(axes: list[layout.Axis], **extra: object) -> IndexMap:
    return IndexMap(name="m", nodes=("m",), ops=("Slice",), inputs=("x",), output="y",
                    axes=layout.index_axes(axes), **extra)  # fmt: skip


def _read(step: IndexMap, x: np.ndarray) -> np.ndarray:
    """What ops.cl's index_map writes, from numpy."""
    n = math.prod(axis[0] for axis in step.axes)
    return x.reshape(-1)[sources(step, np.arange(n))]


def _shuffle_then_half(x: np.ndarray, second: bool) -> tuple[tuple[IndexMap, IndexMap], np.ndarray]:
    """ShuffleNet's Transpose of x (1, C, 3, 3) as (1, 2, C/2, 3, 3), then a Slice of one half
    of the result; and what numpy says that reads.
    """
    channels = x.shape[1]
    grouped = (1, 2, channels // 2, 3, 3)
    shuffle = _map(layout.transpose(grouped, [0, 2, 1, 3, 4]))
    merged = (1, channels, 3, 3)
    axes = layout.identity_axes(merged)
    half = channels // 2
    *_, dim, stride = axes[1]
    axes[1] = (half, half if second else 0, 1, dim, stride)
    expected = x.reshape(grouped).transpose(0, 2, 1, 3, 4).reshape(merged)
    return (shuffle, _map(axes)), expected[:, half:] if second else expected[:, :half]


@pytest.mark.parametrize("second", [False, True])
def test_a_shuffle_and_a_slice_fold_into_one_table(second: bool) -> None:
    x = np.random.default_rng(0).standard_normal((1, 12, 3, 3))
    (shuffle, half), expected = _shuffle_then_half(x, second)
    n = math.prod(axis[0] for axis in half.axes)
    found = sources(shuffle, sources(half, np.arange(n)))
    factored = factor(found, [axis[0] for axis in half.axes])
    assert factored is not None and factored.table  # channels alternate: one table
    folded = _map(list(factored.axes), table=factored.table, table_axis=factored.table_axis)
    np.testing.assert_array_equal(_read(folded, x), expected.reshape(-1))


def test_affine_reads_need_no_table_but_an_offset() -> None:
    """A slice of a transpose, starting inside the tensor: strides alone, and the start as a
    one-entry table on a size-1 axis.
    """
    x = np.arange(4 * 5 * 6, dtype=np.float64).reshape(4, 5, 6)
    transpose = _map(layout.transpose(x.shape, [2, 0, 1]))
    axes = layout.identity_axes((6, 4, 5))
    axes[0] = (3, 2, 1, 6, axes[0][4])
    axes[2] = (2, 1, 2, 5, axes[2][4])
    n = 3 * 4 * 2
    factored = factor(sources(transpose, sources(_map(axes), np.arange(n))),
                      [a[0] for a in layout.index_axes(axes)])  # fmt: skip
    assert factored is not None and len(factored.table) == 1
    folded = _map(list(factored.axes), table=factored.table, table_axis=factored.table_axis)
    expected = x.transpose(2, 0, 1)[2:5, :, 1:5:2]
    np.testing.assert_array_equal(_read(folded, x), expected.reshape(-1))


def test_reads_that_need_two_tables_do_not_factor() -> None:
    rng = np.random.default_rng(1)
    found = rng.permutation(6 * 7).reshape(6, 7)
    assert factor(found.reshape(-1), [1, 1, 1, 1, 6, 7]) is None
