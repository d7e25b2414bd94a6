"""Which kernels cuBLAS runs for each shape of ``gemm_classes.py``'s list, and how long each
takes on the GPU (PyTorch's profiler, CUDA activity only), TF32 off as in the other benchmarks.

cuBLAS's kernel names carry its choices: the tile of C (``tilesize128x64x32``), split-K and its
reduction kernel (``splitKreduce``), stream-K (``_sk_``). They say which kinds of kernel hold
the shapes where octune's space tops out (benchmarks/RESULTS.md, issue 19, ninth part).

    python benchmarks/cublas_kernels.py --classes transformer im2col --out cublas_kernels.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import torch
from lib.gemm_shapes import CLASSES, class_of, operands, parse_shape
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from octune.catalogue.family import Workload

CALLS = 20


def cublas_kernels(workload: Workload) -> dict[str, dict[str, float]]:
    """Each kernel one torch.matmul of the workload launches: launches per call and median
    microseconds on the GPU.
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    op_a, op_b = operands(workload, lambda shape: torch.randn(*shape, device="cuda"))
    for _ in range(5):  # cuBLAS's heuristics and workspace settle on the first calls
        torch.matmul(op_a, op_b)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(CALLS):
            torch.matmul(op_a, op_b)
        torch.cuda.synchronize()
    durations: dict[str, list[float]] = defaultdict(list)
    for event in profiler.events():
        if event.device_type == DeviceType.CUDA:
            durations[event.name].append(event.time_range.elapsed_us())
    return {
        name: {"per_call": len(us) / CALLS, "median_us": statistics.median(us)}
        for name, us in durations.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", nargs="+", choices=sorted(CLASSES), default=sorted(CLASSES))
    parser.add_argument("--shapes", nargs="+", default=None, help="instead of --classes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    shapes = args.shapes or [text for name in args.classes for text in CLASSES[name]]
    rows = []
    for text in shapes:
        kernels = cublas_kernels(parse_shape(text))
        rows.append({"class": class_of(text), "shape": text, "kernels": kernels})
        for name, seen in sorted(kernels.items(), key=lambda item: -item[1]["median_us"]):
            print(f"{rows[-1]['class']:14s} {text:16s} {seen['per_call']:4.1f} x "
                  f"{seen['median_us']:8.1f} us  {name}", flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows},
                                       indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
