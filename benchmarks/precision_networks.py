"""Whole networks stored in float16 against float32, side by side in one run on one device:
`octune run --dtype float16` against `octune run`, each after the same tuning time in its own
dtype (`octune tune --model NET --dtype D --time T`), with the accuracy cost of half storage
(max and mean error against the float32 result, relative to the output's magnitude) next to
every time. Beside them, the vendor as it is best used: on a GPU, PyTorch in float32 (TF32 off)
and in float16 (`.half()`), cuDNN in benchmark mode, timed as CUDA graphs of back-to-back
passes; on a CPU, onnxruntime's CPU provider (float32).

    .venv/bin/python benchmarks/precision_networks.py --nets squeezenet1.1 mobilenet_v2 \\
        --batch 1 --seconds 60 --db sqlite:////tmp/pn.db --out /tmp/pn.json
    benchmarks/device_run.sh python3 benchmarks/precision_networks.py --device NVIDIA \\
        --nets resnet50 mobilenet_v2 --batch 16 --seconds 100 --out "$OUT/pn.json"

Ratios hold within one run only (benchmarks/results/, "float16 networks").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from networks import input_shape, torch_model
from octune.db.store import Store
from octune.networks.layers import load_model
from octune.runtime.config_sources import StoreConfigs
from octune.runtime.executor import Runtime
from octune.runtime.verify import check, onnxruntime_seconds, random_inputs
from octune.tuner.device import DeviceInfo, select_device

DTYPES = ("float32", "float16")


def tune(net: str, batch: int, dtype: str, args: argparse.Namespace, log: Path) -> None:
    """`octune tune --model` in a process of its own, its output appended to ``log``."""
    command = [sys.executable, "-m", "octune", "tune", "--model", net, "--batch", str(batch),
               "--dtype", dtype, "--time", f"{args.seconds}s", "--db", args.db,
               "--seed", str(args.seed)]  # fmt: skip
    if args.device:
        command += ["--device", args.device]
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True)


def octune_run(net: str, batch: int, dtype: str, args: argparse.Namespace) -> dict[str, Any]:
    """One network through the runtime in ``dtype`` with the tuned configs: checked layer by
    layer against the float32 result, then timed.
    """
    device = select_device(args.device)
    model = load_model(net, batch)
    with Store(args.db) as store:
        source = StoreConfigs(store, DeviceInfo.from_cl(device))
        runtime = Runtime(model, device, source, "tuned", dtype=dtype)
    inputs = random_inputs(runtime, args.seed)
    outputs = check(runtime, inputs)
    timing = runtime.time(args.repeat)
    kernels = [p.kernel for p in runtime.plan if p.config]
    return {
        "wall_s": timing.wall_s,
        "kernel_s": timing.total_kernel_s,
        "launches": runtime.launches,
        "kernels": sorted(set(kernels)),
        "half_arithmetic_layers": sum(bool(p.config.get("HALF")) for p in runtime.plan),
        "max_error": max(c.error / (c.magnitude or 1) for c in outputs),
        "mean_error": max(c.mean_error / (c.magnitude or 1) for c in outputs),
        "tolerance": max(c.tolerance for c in outputs),
        "onnxruntime_s": None if args.device else onnxruntime_seconds(model, inputs, args.repeat),
    }


def torch_seconds(net: str, batch: int, calls: int, repeat: int) -> dict[str, float]:
    """PyTorch's float32 and float16 passes as CUDA graphs (cuDNN benchmark mode, TF32 off)."""
    import torch
    from lib.cuda import cuda_graph_seconds

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    shape = input_shape(load_model(net, batch))
    found = {}
    for dtype, kind in (("float32", torch.float32), ("float16", torch.float16)):
        model = torch_model(net).cuda().to(kind)
        x = torch.randn(*shape, device="cuda", dtype=kind)
        with torch.no_grad():
            found[f"pytorch_{dtype}_s"] = cuda_graph_seconds(
                lambda model=model, x=x: model(x), calls, repeat, min
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", nargs="+", default=["squeezenet1.1", "mobilenet_v2"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", default=None, help="OpenCL device (default: the first)")
    parser.add_argument("--seconds", type=int, default=60, help="tuning time per net and dtype")
    parser.add_argument("--db", default="sqlite:///precision_networks.db")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--calls", type=int, default=20, help="passes per PyTorch CUDA graph")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("precision_networks.json"))
    args = parser.parse_args()
    log = args.out.with_suffix(".tune.log")
    results: dict[str, Any] = {"device": DeviceInfo.from_cl(select_device(args.device)).name,
                               "batch": args.batch, "seconds": args.seconds}  # fmt: skip
    for net in args.nets:
        row: dict[str, Any] = {}
        for dtype in DTYPES:
            if args.seconds:
                tune(net, args.batch, dtype, args, log)
            row[dtype] = octune_run(net, args.batch, dtype, args)
        if args.device:
            row.update(torch_seconds(net, args.batch, args.calls, args.repeat))
        results[net] = row
        args.out.write_text(json.dumps(results, indent=2))
        f32, f16 = row["float32"], row["float16"]
        anchors = {k: v for k, v in row.items() if k.endswith("_s")}
        if not anchors:
            anchors["onnxruntime_float32_s"] = f32["onnxruntime_s"]
        anchor = ", ".join(f"{k[:-2]} {v * 1e3:.3f} ms" for k, v in anchors.items())
        print(f"{net} batch {args.batch}: octune float32 {f32['wall_s'] * 1e3:.3f} ms, float16 "
              f"{f16['wall_s'] * 1e3:.3f} ms ({f32['wall_s'] / f16['wall_s']:.2f} x); float16 "
              f"error max {f16['max_error']:.2e} mean {f16['mean_error']:.2e} of the output's "
              f"magnitude; {anchor}")  # fmt: skip


if __name__ == "__main__":
    main()
