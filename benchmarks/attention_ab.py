"""Attention by each plan the runtime has, side by side in one run (``runtime/attention.py``):
the scores' product, the softmax and the context's product apart (``unfused``, the products
by the fastest of their own plans), ops.cl's ``attention`` with 32 or 64 query rows a
work-group (a row a work-item), ``attention_tiled`` (64 rows a 16 x 16 work-group), and the
runtime's default, whichever ran fastest at load; with ``--torch``, PyTorch's
``scaled_dot_product_attention`` as a CUDA graph of back-to-back calls (TF32 off) beside them.

    .venv/bin/python benchmarks/attention_ab.py --shapes 1x2x37x16 --out /tmp/attention.json
    benchmarks/device_run.sh python3 benchmarks/attention_ab.py --device NVIDIA --torch \\
        --shapes 16x12x197x64 32x12x197x64 16x12x128x64 --out "$OUT/attention.json"

A shape is batch x heads x sequence x head size (ViT-B/16: 197 x 64, BERT-base: 128 x 64);
q, k and v are inputs of that shape, the scores scaled by 1/sqrt(head). Per shape and plan: the
kernel time of the attention (profiling events, its launches summed), the launches, and
whether it agrees with onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model
from octune.runtime.attention import ATTENTION_PLANS
from octune.runtime.executor import Runtime
from octune.runtime.steps import Attention
from octune.runtime.verify import check, random_inputs
from octune.tuner.device import select_device

PLANS: list[str | None] = [*ATTENTION_PLANS, None]


def attention_model(shape: tuple[int, int, int, int]) -> onnx.ModelProto:
    """softmax(q k^T / sqrt(d)) v over inputs q, k, v of ``shape`` (B, H, S, D)."""
    g = GraphBuilder("attention", seed=0)
    q, k, v = (g.input(name, list(shape)) for name in "qkv")
    kt = g.node("Transpose", [k], "kt", perm=[0, 1, 3, 2])
    root = g.constant("root", np.array(math.sqrt(shape[-1]), dtype=np.float32))
    scores = g.node("Div", [g.node("MatMul", [q, kt], "scores"), root], "scaled")
    probs = g.node("Softmax", [scores], "probs", axis=-1)
    return g.model(g.node("MatMul", [probs, v], "context"), list(shape))


def measure(model: onnx.ModelProto, plan: str | None, args: argparse.Namespace) -> dict[str, Any]:
    runtime = Runtime(model, select_device(args.device), attention=plan)
    outputs = check(runtime, random_inputs(runtime, args.seed))
    timing = runtime.time(args.repeat)
    (index,) = [i for i, p in enumerate(runtime.plan) if isinstance(p.step, Attention)]
    return {
        "kernel": runtime.plan[index].kernel,
        "attention_ms": timing.kernel_s[index] * 1e3,
        "launches": len(runtime.plan[index].launches),
        "agrees": all(c.ratio < 1 for c in outputs),
    }


def torch_ms(shape: tuple[int, int, int, int]) -> float:
    """PyTorch's scaled_dot_product_attention on CUDA in float32, TF32 off."""
    import torch
    from lib.cuda import cuda_graph_seconds

    torch.backends.cuda.matmul.allow_tf32 = False
    q, k, v = (torch.randn(shape, device="cuda") for _ in range(3))
    attention = torch.nn.functional.scaled_dot_product_attention
    return cuda_graph_seconds(lambda: attention(q, k, v)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["16x12x197x64"], help="BxHxSxD")
    parser.add_argument("--device", default=None)
    parser.add_argument("--torch", action="store_true", help="PyTorch on CUDA beside")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    print("| shape | plan | kernel | attention ms | launches | agrees |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for text in args.shapes:
            b, h, s, d = (int(n) for n in text.split("x"))
            path = Path(folder) / f"{text}.onnx"
            onnx.save(attention_model((b, h, s, d)), path)
            model = load_model(path)
            for plan in PLANS:
                row = {"shape": text, "plan": plan or "measured at load",
                       **measure(model, plan, args)}  # fmt: skip
                rows.append(row)
                args.out.write_text(json.dumps(rows, indent=1))
                print(f"| {text} | {row['plan']} | {row['kernel']} | {row['attention_ms']:.3f} "
                      f"| {row['launches']} | {row['agrees']} |", flush=True)  # fmt: skip
            if args.torch:
                rows.append({"shape": text, "plan": "PyTorch SDPA", "attention_ms": torch_ms(
                    (b, h, s, d))})  # fmt: skip
                args.out.write_text(json.dumps(rows, indent=1))
                print(f"| {text} | PyTorch SDPA | - | {rows[-1]['attention_ms']:.3f} | - | - |")


if __name__ == "__main__":
    main()
