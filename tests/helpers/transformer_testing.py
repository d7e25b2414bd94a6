"""Attention as exporters write it, built small, for the runtime's tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model


def saved(model: onnx.ModelProto, folder: Path) -> onnx.ModelProto:
    """The model as ``octune run`` loads it (shapes inferred)."""
    onnx.save(model, folder / "model.onnx")
    return load_model(folder / "model.onnx")


def multihead_attention(
    g: GraphBuilder, qkv: str, batch: int, seq: int, heads: int, head: int
) -> str:
    """PyTorch's MultiheadAttention as its TorchScript exporter writes it: one packed QKV tensor
    (S, B, 3 * E) split by Transpose and Gathers into heads, Q and K scaled on the way, the
    context transposed back to (S, B, E).
    """
    width = heads * head
    split = g.node("Reshape", [qkv, g.constant("split", np.array([seq, batch, 3, width]))], "r")
    moved = g.node("Transpose", [split], "t", perm=[2, 0, 1, 3])  # (3, S, B, E)
    root = g.constant("root", np.array(head**-0.25, dtype=np.float32))
    parts = {}
    for index, part in enumerate("qkv"):
        picked = g.node("Gather", [moved, g.constant(f"i{part}", np.array(index))], f"g{part}")
        shape = g.constant(f"s{part}", np.array([seq, batch, heads, head]))
        heads_first = g.node("Reshape", [picked, shape], f"h{part}")
        perm = [1, 2, 3, 0] if part == "k" else [1, 2, 0, 3]  # (B, H, S, D), K (B, H, D, S)
        parts[part] = g.node("Transpose", [heads_first], f"p{part}", perm=perm)
        if part != "v":
            parts[part] = g.node("Mul", [parts[part], root], f"m{part}")
    scores = g.node("MatMul", [parts["q"], parts["k"]], "scores")
    probs = g.node("Softmax", [scores], "probs", axis=-1)
    context = g.node("MatMul", [probs, parts["v"]], "context")  # (B, H, S, D)
    back = g.node("Transpose", [context], "back", perm=[2, 0, 1, 3])
    return g.node("Reshape", [back, g.constant("merged", np.array([seq, batch, width]))], "out")


def attention_block(g: GraphBuilder, batch: int, seq: int, heads: int, head: int) -> str:
    """``nn.MultiheadAttention(batch_first=True)`` and its residual as ViT's export has them:
    the input moved to (S, B, E) for the QKV projection, the output projection's result moved
    back and added to the input.
    """
    width = heads * head
    x = g.input("x", [batch, seq, width])
    rows = g.node("Transpose", [x], "to_sequence_first", perm=[1, 0, 2])
    flat = g.node(
        "Reshape", [rows, g.constant("flat_shape", np.array([seq * batch, width]))], "flat"
    )
    qkv = g.linear(flat, "in_proj", width, 3 * width)
    qkv = g.node(
        "Reshape", [qkv, g.constant("packed_shape", np.array([seq, batch, 3 * width]))], "qkv"
    )
    context = multihead_attention(g, qkv, batch, seq, heads, head)
    flat = g.node(
        "Reshape", [context, g.constant("rows_shape", np.array([seq * batch, width]))], "c2"
    )
    out = g.linear(flat, "out_proj", width, width)
    out = g.node("Reshape", [out, g.constant("back_shape", np.array([seq, batch, width]))], "o3")
    moved = g.node("Transpose", [out], "to_batch_first", perm=[1, 0, 2])
    return g.node("Add", [moved, x], "residual")
