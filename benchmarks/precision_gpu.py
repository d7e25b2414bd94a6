"""float16 storage against float32 on the bandwidth-bound layers, in one run on one device:
matrix-vector products (batch-1 fully connected layers), depthwise and 1x1 convolutions.

Each case is tuned twice with the same time, the kernels of its family that take it and are
written for the device, as `octune tune --dtype float32|float16` does; the fastest stored
config of each dtype is re-measured (and re-verified) here. Beside them, PyTorch's own float32
and float16 (cuBLAS, cuDNN; TF32 off) timed as CUDA graphs of back-to-back calls, where torch
and a GPU are present.
Ratios are within this run only (benchmarks/results/gpu_kernels.md, "float16 storage").

    benchmarks/device_run.sh python3 benchmarks/precision_gpu.py --seconds 20 --out "$OUT/p.json"

`--batch 16 --nhwc --only depthwise --only 1x1` runs the convolutions at batch 16 in NHWC (the
1x1 kernels for NCHW take batch 1 only).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from lib.cuda import cuda_graph_seconds
from lib.tuning import fastest_stored, tune_workload

from octune.catalogue.family import Workload
from octune.db.store import Store
from octune.kernels.conv2d import FAMILY as CONV2D
from octune.kernels.gemm import FAMILY as GEMM
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Settings, open_workers
from octune.tuner.workers import default_jobs

#: (label, family, shape): y = x . W^T of a linear layer at batch 1 (transb), a classifier,
#: MobileNet v2's depthwise layers and its and ResNet-50's 1x1 convolutions, batch 1.
CASES: list[tuple[str, str, dict[str, int]]] = [
    ("linear 4096x4096", "gemm", {"m": 1, "n": 4096, "k": 4096, "transb": 1}),
    ("linear 11008x4096", "gemm", {"m": 1, "n": 11008, "k": 4096, "transb": 1}),
    ("classifier 1000x1280", "gemm", {"m": 1, "n": 1000, "k": 1280, "transb": 1}),
    ("x.W 4096x4096", "gemm", {"m": 1, "n": 4096, "k": 4096}),
    *(
        (
            f"depthwise {c}x{hw}x{hw} s{stride}",
            "conv2d",
            {
                "n": 1,
                "c": c,
                "h": hw,
                "w": hw,
                "k": c,
                "r": 3,
                "s": 3,
                "stride": stride,
                "pad": 1,
                "groups": c,
            },
        )
        for c, hw, stride in ((144, 56, 2), (192, 28, 1), (384, 14, 1), (960, 7, 1))
    ),
    *(
        (
            f"1x1 {c}->{k} {hw}x{hw}",
            "conv2d",
            {"n": 1, "c": c, "h": hw, "w": hw, "k": k, "r": 1, "s": 1},
        )
        for c, k, hw in ((96, 576, 14), (320, 1280, 7), (1024, 256, 14), (2048, 512, 7))
    ),
]


def moved_bytes(workload: Workload, element: int) -> int:
    """Bytes a kernel must move at least: every operand read once, the output written once."""
    return element * sum(workload.extents)


def torch_call(family: str, shape: dict[str, int], half: bool) -> Callable[[], object] | None:
    """PyTorch's computation of the case on the GPU (float16 where ``half``), or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    kind = torch.float16 if half else torch.float32
    device = "cuda"
    if family == "gemm":
        x = torch.randn(shape["m"], shape["k"], device=device, dtype=kind)
        w = torch.randn(
            *((shape["n"], shape["k"]) if shape.get("transb") else (shape["k"], shape["n"])),
            device=device, dtype=kind,
        )  # fmt: skip
        return (lambda: x @ w.T) if shape.get("transb") else (lambda: x @ w)
    x = torch.randn(shape["n"], shape["c"], shape["h"], shape["w"], device=device, dtype=kind)
    groups = shape.get("groups", 1)
    w = torch.randn(shape["k"], shape["c"] // groups, shape["r"], shape["s"], device=device,
                    dtype=kind)  # fmt: skip
    if shape.get("nhwc"):
        x, w = (t.to(memory_format=torch.channels_last) for t in (x, w))
    stride, pad = shape.get("stride", 1), shape.get("pad", 0)
    return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad, groups=groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20, help="tuning per case and dtype")
    parser.add_argument("--device", default="NVIDIA", help="as `octune tune --device`")
    parser.add_argument("--only", action="append", help="cases whose label contains this")
    parser.add_argument("--batch", type=int, default=1, help="batch of the convolutions")
    parser.add_argument("--nhwc", action="store_true", help="convolutions in NHWC")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cases = [
        (label if name == "gemm" else f"{label} b{args.batch}{' nhwc' if args.nhwc else ''}",
         name, shape if name == "gemm" else {**shape, "n": args.batch, "nhwc": int(args.nhwc)})
        for label, name, shape in CASES
        if not args.only or any(part in label for part in args.only)
    ]  # fmt: skip
    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    print(f"{info.name} ({info.platform_name}), extensions fp16: {info.limits['fp16']}")
    rows = []
    settings = Settings(jobs=default_jobs(cl_device), confirm=0)
    with (
        tempfile.TemporaryDirectory() as folder,
        Store(f"sqlite:///{folder}/p.db") as store,
        open_workers(info, settings) as workers,
    ):
        for label, name, shape in cases:
            family = GEMM if name == "gemm" else CONV2D
            row: dict[str, object] = {"case": label, "shape": shape}
            for dtype, element in (("float32", 4), ("float16", 2)):
                workload = family.workload(shape, dtype)
                tune_workload(store, info, workload, args.seconds, "model", settings, 0,
                              workers=workers)  # fmt: skip
                timed = fastest_stored(store, cl_device, info, workload)
                if timed is None:
                    row[dtype] = None
                    continue
                row[dtype] = {
                    "kernel": timed.kernel.name, "config": timed.config,
                    "seconds": timed.seconds, "back_to_back_s": timed.back_to_back_s,
                    "gbs": moved_bytes(workload, element) / timed.back_to_back_s / 1e9,
                }  # fmt: skip
            for dtype, half in (("torch_float32", False), ("torch_float16", True)):
                call = torch_call(name, shape, half)
                row[dtype] = None if call is None else cuda_graph_seconds(call)
            rows.append(row)
            print(summary(row), flush=True)
    ratios = [
        row["float32"]["back_to_back_s"] / row["float16"]["back_to_back_s"]  # type: ignore[index]
        for row in rows
        if row["float32"] and row["float16"]
    ]
    print(f"float16 storage / float32 speed: geometric mean {np.exp(np.mean(np.log(ratios))):.2f}")
    if args.out is not None:
        device = {"name": info.name, "platform": info.platform_name, "driver": info.driver_version}
        args.out.write_text(json.dumps({"device": device, "rows": rows}, indent=2))


def summary(row: dict[str, object]) -> str:
    single, half = row["float32"], row["float16"]
    parts = [str(row["case"])]
    for dtype, timed in (("f32", single), ("f16", half)):
        if isinstance(timed, dict):
            parts.append(f"{dtype} {timed['back_to_back_s'] * 1e6:.1f} us {timed['gbs']:.0f} GB/s "
                         f"({timed['kernel']})")  # fmt: skip
    if isinstance(single, dict) and isinstance(half, dict):
        parts.append(f"f32/f16 {single['back_to_back_s'] / half['back_to_back_s']:.2f}")
    for dtype in ("torch_float32", "torch_float16"):
        seconds = row[dtype]
        if isinstance(seconds, float):
            parts.append(f"{dtype} {seconds * 1e6:.1f} us")
    return "; ".join(parts)


if __name__ == "__main__":
    main()
