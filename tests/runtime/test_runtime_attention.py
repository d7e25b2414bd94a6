"""Attention's products and softmax as one launch (``runtime/attention.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers.transformer_testing import attention_block, saved

from octune.core.errors import OctuneError
from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model
from octune.runtime.attention import (
    ATTENTION_PLANS,
    HEAD_LIMIT,
    KEYS,
    ROWS,
    TILED,
    TILED_HEAD,
)
from octune.runtime.executor import Runtime
from octune.runtime.steps import Attention, Softmax
from octune.runtime.stream import Stream
from octune.runtime.verify import check, random_inputs

#: The kernel each fused plan runs.
KERNELS = dict.fromkeys(ROWS, "attention") | dict.fromkeys(TILED, "attention_tiled")


@pytest.mark.parametrize("plan", [*ATTENTION_PLANS, None])
def test_an_exported_attention_block_runs_by_every_plan(cl_device, plan, tmp_path: Path) -> None:
    """ViT's block (heads read in place from the packed QKV tensor, Q and K scaled on the way),
    with more keys than a step takes and not a whole number of steps of them.
    """
    g = GraphBuilder("block", seed=7)
    seq = KEYS + 5
    model = saved(g.model(attention_block(g, 2, seq, heads=2, head=8), [2, seq, 16]), tmp_path)
    runtime = Runtime(model, cl_device, attention=plan)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    (attention,) = [p for p in runtime.plan if isinstance(p.step, Attention)]
    assert not [p for p in runtime.plan if isinstance(p.step, Softmax)]
    if plan == "unfused":
        assert attention.kernel == "attention (unfused)" and len(attention.launches) == 3
    elif plan is not None:
        assert attention.kernel == KERNELS[plan] and len(attention.launches) == 1


@pytest.mark.parametrize("plan", ATTENTION_PLANS)
def test_heads_laid_out_any_way_and_broadcast_keys(cl_device, plan, tmp_path: Path) -> None:
    """K^T stored as it is multiplied (keys along its rows), V read transposed, one K and V for
    every image of the batch: each operand's strides, a zero batch stride among them.
    """
    g = GraphBuilder("layouts", seed=2)
    q = g.input("q", [3, 2, 19, 8])
    kt = g.input("kt", [1, 2, 8, 40])
    v = g.node("Transpose", [g.input("vt", [1, 2, 6, 40])], "v", perm=[0, 1, 3, 2])
    probs = g.node("Softmax", [g.node("MatMul", [q, kt], "scores")], "probs", axis=-1)
    model = saved(g.model(g.node("MatMul", [probs, v], "context"), [3, 2, 19, 6]), tmp_path)
    runtime = Runtime(model, cl_device, attention=plan)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    assert [type(p.step) for p in runtime.plan] == [Attention]


def _masked(tmp_path: Path) -> onnx.ModelProto:
    """Scores scaled, then a position bias added (one per head, broadcast over the images:
    Swin's, T5's), a head 64 wide.
    """
    g = GraphBuilder("masked", seed=9)
    q, k, v = (g.input(name, [2, 3, 40, 64]) for name in "qkv")
    scores = g.node("MatMul", [q, g.node("Transpose", [k], "kt", perm=[0, 1, 3, 2])], "scores")
    scores = g.node("Div", [scores, g.constant("root", np.array(8.0, dtype=np.float32))], "d")
    scores = g.node("Add", [scores, g.parameter("bias", [3, 40, 40], std=1.0)], "masked")
    context = g.node("MatMul", [g.node("Softmax", [scores], "probs", axis=-1), v], "context")
    return saved(g.model(context, [2, 3, 40, 64]), tmp_path)


@pytest.mark.parametrize("plan", ATTENTION_PLANS)
def test_a_bias_on_the_scores_runs_in_the_kernels(cl_device, plan, tmp_path: Path) -> None:
    runtime = Runtime(_masked(tmp_path), cl_device, attention=plan)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    assert [type(p.step) for p in runtime.plan] == [Attention]


@pytest.mark.parametrize("plan", ATTENTION_PLANS)
def test_a_mask_added_by_a_launch_of_its_own_runs_in_the_kernels(
    cl_device, plan, tmp_path: Path
) -> None:
    """Hugging Face's BERT: the scaled scores plus a mask of one row per image, broadcast over
    heads and query rows (a Broadcast step, not an epilogue).
    """
    g = GraphBuilder("hf_mask", seed=4)
    q, k, v = (g.input(name, [2, 3, 37, 64]) for name in "qkv")
    scores = g.node("MatMul", [q, g.node("Transpose", [k], "kt", perm=[0, 1, 3, 2])], "scores")
    scores = g.node("Div", [scores, g.constant("root", np.array(8.0, dtype=np.float32))], "d")
    scores = g.node("Add", [scores, g.input("mask", [2, 1, 1, 37])], "masked")
    context = g.node("MatMul", [g.node("Softmax", [scores], "probs", axis=-1), v], "context")
    runtime = Runtime(saved(g.model(context, [2, 3, 37, 64]), tmp_path), cl_device,
                      attention=plan)  # fmt: skip
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    (attention,) = [p.step for p in runtime.plan]
    assert isinstance(attention, Attention) and attention.inputs[3] == "mask"


def test_without_fused_epilogues_a_biased_attention_stays_three_steps(
    cl_device, tmp_path: Path
) -> None:
    runtime = Runtime(_masked(tmp_path), cl_device, fuse=False, attention="fused-32")
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    assert not [p for p in runtime.plan if isinstance(p.step, Attention)]


@pytest.mark.parametrize("case", ["wide heads", "scores read twice"])
def test_what_is_not_plain_attention_stays_three_steps(cl_device, case, tmp_path: Path) -> None:
    g = GraphBuilder(case.replace(" ", "_"), seed=3)
    head = HEAD_LIMIT + 8 if case == "wide heads" else 9  # 9: the scores' width too
    q, k, v = (g.input(name, [2, 9, head]) for name in "qkv")
    scores = g.node("MatMul", [q, g.node("Transpose", [k], "kt", perm=[0, 2, 1])], "scores")
    context = g.node("MatMul", [g.node("Softmax", [scores], "probs", axis=-1), v], "context")
    out = g.node("Add", [context, scores], "both") if case == "scores read twice" else context
    model = saved(g.model(out, [2, 9, head]), tmp_path)
    runtime = Runtime(model, cl_device, attention="fused-32")
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1
    assert not [p for p in runtime.plan if isinstance(p.step, Attention)]
    assert [p for p in runtime.plan if isinstance(p.step, Softmax)]


@pytest.mark.parametrize("plan", ["fused-64", *TILED])
def test_bert_runs_its_attention_fused_and_agrees(cl_device, plan) -> None:
    """The built-in BERT layer (heads moved by Transposes, 1/sqrt(d) after the scores), with
    more query rows than a tile takes.
    """
    runtime = Runtime(load_model("bert_base_layer", 2, {"sequence": 70}), cl_device,
                      attention=plan)  # fmt: skip
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    assert [p.kernel for p in runtime.plan if isinstance(p.step, Attention)] == [KERNELS[plan]]


def test_heads_wider_than_the_tiles_take_run_by_another_plan(cl_device, tmp_path: Path) -> None:
    g = GraphBuilder("wide", seed=5)
    q, k, v = (g.input(name, [2, 7, TILED_HEAD + 4]) for name in "qkv")
    scores = g.node("MatMul", [q, g.node("Transpose", [k], "kt", perm=[0, 2, 1])], "scores")
    context = g.node("MatMul", [g.node("Softmax", [scores], "probs", axis=-1), v], "context")
    model = saved(g.model(context, [2, 7, TILED_HEAD + 4]), tmp_path)
    for plan in TILED:
        runtime = Runtime(model, cl_device, attention=plan)
        (found,) = check(runtime, random_inputs(runtime))
        assert found.ratio < 1
        (attention,) = [p for p in runtime.plan if isinstance(p.step, Attention)]
        assert attention.kernel != "attention_tiled"


def test_an_unknown_attention_plan_is_refused(cl_device) -> None:
    with pytest.raises(OctuneError, match="attention is one of unfused, fused-32, fused-64"):
        Runtime(load_model("bert_base_layer", dims={"sequence": 8}), cl_device, attention="flash")


@pytest.mark.parametrize("plan", ["fused-64", *TILED])
def test_attention_in_float16_storage_agrees(cl_device, plan) -> None:
    """q, k and v read as halves, the output stored as halves, the arithmetic in float."""
    model = load_model("bert_base_layer", 2, {"sequence": 20})
    runtime = Runtime(model, cl_device, dtype="float16", attention=plan)
    (found,) = check(runtime, random_inputs(runtime))
    assert found.ratio < 1 and found.magnitude > 0
    assert [p.kernel for p in runtime.plan if isinstance(p.step, Attention)] == [KERNELS[plan]]


def _chained(layers: int, tmp_path: Path) -> onnx.ModelProto:
    """``layers`` attentions of one shape, each one's output the next one's queries."""
    g = GraphBuilder("chained", seed=6)
    x, k, v = (g.input(name, [2, 3, 33, 16]) for name in "xkv")
    kt = g.node("Transpose", [k], "kt", perm=[0, 1, 3, 2])
    for n in range(layers):
        probs = g.node("Softmax", [g.node("MatMul", [x, kt], f"scores{n}")], f"p{n}", axis=-1)
        x = g.node("MatMul", [probs, v], f"context{n}")
    return saved(g.model(x, [2, 3, 33, 16]), tmp_path)


def test_layers_of_one_shape_take_the_plan_timed_for_the_first(
    cl_device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transformer's next layer is timed no more: its attention takes the first's plan."""
    timed = []
    seconds = Stream.seconds
    monkeypatch.setattr(Stream, "seconds", lambda s, *a: timed.append(1) or seconds(s, *a))
    counts = []
    for layers in (1, 3):
        timed.clear()
        runtime = Runtime(_chained(layers, tmp_path), cl_device)
        (found,) = check(runtime, random_inputs(runtime))
        assert found.ratio < 1
        plans = [p.kernel for p in runtime.plan if isinstance(p.step, Attention)]
        assert len(plans) == layers and len(set(plans)) == 1
        counts.append(len(timed))
    assert counts[0] > 0 and counts[1] == counts[0]
