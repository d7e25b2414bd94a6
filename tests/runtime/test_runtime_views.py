"""Batched products reading and writing through views: attention's head moves cost no launch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.transformer_testing import attention_block, multihead_attention, saved

from octune.networks.graph import GraphBuilder
from octune.runtime import layout
from octune.runtime.batched import TILES
from octune.runtime.commute import row_permutation
from octune.runtime.executor import Runtime
from octune.runtime.steps import IndexMap, Tuned
from octune.runtime.verify import check, random_inputs
from octune.runtime.views import affine


def test_affine_finds_the_strides_of_a_transposed_slice_and_nothing_else() -> None:
    x = np.arange(2 * 5 * 3 * 4).reshape(2, 5, 3, 4)
    moved = x.transpose(2, 0, 3, 1)[1:, :, ::2]  # a Transpose, a Slice and a step
    assert affine(moved) == (moved.flat[0], tuple(s // x.itemsize for s in moved.strides))
    gathered = x[:, [0, 1, 3]]  # indices no stride gives
    assert affine(gathered) is None


@pytest.mark.parametrize("plan", ["simple", *TILES])
def test_multihead_attention_as_exported_runs_without_moving_its_heads(
    cl_device, plan, tmp_path: Path
) -> None:
    g = GraphBuilder("mha", seed=11)
    qkv = g.input("qkv", [13, 2, 72])
    model = saved(
        g.model(multihead_attention(g, qkv, batch=2, seq=13, heads=3, head=8), [13, 2, 24]),
        tmp_path,
    )
    runtime = Runtime(model, cl_device, batched=plan)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    products = [p for p in runtime.plan if isinstance(p.step, Tuned)]
    assert [p.step.ops for p in products] == [("MatMul",), ("MatMul", "Transpose")]
    assert all(len(p.launches) == 1 for p in products)  # the scales: in the product's alpha
    assert not [p for p in runtime.plan if isinstance(p.step, IndexMap)]
    assert products[0].step.views[2] is None and products[1].step.views[2] is not None


def test_per_matrix_products_keep_the_moves(cl_device, tmp_path: Path) -> None:
    """Sub-buffers need each matrix where it lies: that plan runs the transposes."""
    g = GraphBuilder("mha", seed=11)
    qkv = g.input("qkv", [16, 2, 48])
    model = saved(
        g.model(multihead_attention(g, qkv, batch=2, seq=16, heads=2, head=8), [16, 2, 16]),
        tmp_path,
    )
    runtime = Runtime(model, cl_device, batched="per-matrix")
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    assert all(
        p.step.views == (None, None, None) for p in runtime.plan if isinstance(p.step, Tuned)
    )
    assert any(isinstance(p.step, IndexMap) for p in runtime.plan)


def test_a_moved_tensor_another_layer_reads_is_still_written(cl_device, tmp_path: Path) -> None:
    """The product reads Q in place; the model's second output reads the moved Q itself."""
    g = GraphBuilder("shared", seed=5)
    x = g.input("x", [2, 6, 3, 4])  # (B, S, H, D)
    q = g.node("Transpose", [x], "q", perm=[0, 2, 1, 3])  # (B, H, S, D)
    k = g.node("Transpose", [x], "k", perm=[0, 2, 3, 1])  # (B, H, D, S)
    scores = g.node("MatMul", [q, k], "scores")
    both = g.node("Concat", [g.node("Relu", [q], "moved"), scores], "both", axis=-1)
    model = saved(g.model(both, [2, 3, 6, 10]), tmp_path)
    runtime = Runtime(model, cl_device, batched="tiled")
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    (product,) = [p.step for p in runtime.plan if isinstance(p.step, Tuned)]
    assert product.inputs == ("x", "x") and None not in product.views[:2]


def test_row_permutation_is_a_transpose_that_keeps_rows_whole() -> None:
    shapes = {"x": (2, 3, 4), "y": (3, 2, 4), "z": (2, 4, 3)}
    rows = IndexMap(name="t", nodes=("t",), ops=("Transpose",), inputs=("x",), output="y",
                    axes=layout.index_axes(layout.transpose((2, 3, 4), (1, 0, 2))))  # fmt: skip
    columns = replace(
        rows, output="z", axes=layout.index_axes(layout.transpose((2, 3, 4), (0, 2, 1)))
    )
    assert row_permutation(rows, shapes) == (1, 0, 2)
    assert row_permutation(columns, shapes) is None


@pytest.mark.parametrize("batch", [1, 3])
def test_a_batch_first_attention_block_runs_without_any_move(
    cl_device, batch, tmp_path: Path
) -> None:
    """The row moves around the projections cross them (the residual Add joins the output
    projection), the heads' moves fold into the products: no launch moves data.
    """
    g = GraphBuilder("block", seed=7)
    model = saved(
        g.model(attention_block(g, batch, seq=11, heads=2, head=8), [batch, 11, 16]), tmp_path
    )
    runtime = Runtime(model, cl_device, batched="tiled")
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    assert not [p for p in runtime.plan if isinstance(p.step, IndexMap)]
    ops = [p.step.ops for p in runtime.plan if isinstance(p.step, Tuned)]
    assert ops[-1] == ("Gemm", "Add") and len(runtime.plan) == 5  # QKV, 2 products, softmax, out


def test_a_row_move_stays_where_a_gemm_result_has_other_readers(cl_device, tmp_path: Path) -> None:
    """A projection whose result a Softmax reads too: the move into it cannot cross."""
    g = GraphBuilder("shared", seed=3)
    x = g.input("x", [2, 5, 8])
    rows = g.node("Transpose", [x], "moved", perm=[1, 0, 2])
    y = g.node("MatMul", [rows, g.parameter("w", [8, 8], std=0.3)], "projected")
    both = g.node("Add", [g.node("Softmax", [y], "soft", axis=-1), y], "both")
    runtime = Runtime(saved(g.model(both, [5, 2, 8]), tmp_path), cl_device)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    assert next(p.step.ops for p in runtime.plan) == ("Transpose",)


def test_a_move_into_a_conv_stays(cl_device, tmp_path: Path) -> None:
    """A conv's input keeps its last axis through this Transpose too, but has no rows to move."""
    g = GraphBuilder("conv", seed=4)
    x = g.node("Transpose", [g.input("x", [3, 2, 8, 8])], "images_first", perm=[1, 0, 2, 3])
    y = g.node("Transpose", [g.conv(x, "conv", 3, 4, 3)], "channels_last", perm=[0, 2, 3, 1])
    runtime = Runtime(saved(g.model(y, [2, 8, 8, 4]), tmp_path), cl_device)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
