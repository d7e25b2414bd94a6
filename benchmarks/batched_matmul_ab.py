"""A batched MatMul (attention's scores and context) by each plan the runtime has, side by side
in one run (``runtime/batched.py``): one tuned GEMM launch per matrix on sub-buffers, one launch
of the runtime's own kernel (one output element a work-item), the same tiled (64 x 64 tiles
through local memory), and the runtime's default, whichever of those ran fastest when the model
was loaded; for a network at several batches. At batch B a BERT layer's two attention products
are B x 12 matrices each, so the per-matrix plan pays the driver's per-launch floor (about 5 us
on NVIDIA's OpenCL, benchmarks/results/gpu_kernels.md) 2 x 12 x B times a pass.

    .venv/bin/python benchmarks/batched_matmul_ab.py --nets bert_base_layer --batches 1 4 \\
        --out /tmp/ab.json
    benchmarks/device_run.sh python3 benchmarks/batched_matmul_ab.py --device NVIDIA \\
        --db sqlite:///tuned.db --batches 1 8 16 32 --out "$OUT/ab.json"

Per network, batch and plan: the wall time of a pass, the kernel time of the batched layers
(profiling events, summed over their launches) and of the rest, the launch count, and whether
every layer agrees with onnxruntime.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from octune.db.store import Store
from octune.networks.layers import load_model
from octune.runtime.config_sources import StoreConfigs
from octune.runtime.executor import Runtime
from octune.runtime.verify import check, random_inputs
from octune.tuner.device import DeviceInfo, select_device

PLANS = {"per-matrix": "per-matrix", "one launch": "simple", "one launch, tiled": "tiled",
         "measured at load": None}  # fmt: skip


def measure(net: str, batch: int, plan: str | None, args: argparse.Namespace) -> dict[str, Any]:
    device = select_device(args.device)
    model = load_model(net, batch)
    source = StoreConfigs(Store(args.db), DeviceInfo.from_cl(device)) if args.db else None
    runtime = Runtime(model, device, source, "tuned" if args.db else "default",
                      batched=plan)  # fmt: skip
    outputs = check(runtime, random_inputs(runtime, args.seed))
    timing = runtime.time(args.repeat)
    batched = [i for i, p in enumerate(runtime.plan) if getattr(p.step, "layer", None)
               and p.step.layer.count > 1]  # fmt: skip
    return {
        "wall_ms": timing.wall_s * 1e3,
        "batched_kernel_ms": sum(timing.kernel_s[i] for i in batched) * 1e3,
        "other_kernel_ms": (timing.total_kernel_s - sum(timing.kernel_s[i] for i in batched)) * 1e3,
        "launches": runtime.launches,
        "batched_launches": sum(len(runtime.plan[i].launches) for i in batched),
        "agrees": all(c.ratio < 1 for c in outputs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", nargs="+", default=["bert_base_layer"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--device", default=None)
    parser.add_argument("--db", default=None, help="tuned configs (default: the defaults)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    print("| net | batch | plan | wall ms | batched layers' kernel ms | other kernel ms | "
          "launches (batched) | agrees |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for net in args.nets:
        for batch in args.batches:
            for name, plan in PLANS.items():
                row = {"net": net, "batch": batch, "plan": name, **measure(net, batch, plan, args)}
                rows.append(row)
                args.out.write_text(json.dumps(rows, indent=1))
                print(f"| {net} | {batch} | {name} | {row['wall_ms']:.3f} | "
                      f"{row['batched_kernel_ms']:.3f} | {row['other_kernel_ms']:.3f} | "
                      f"{row['launches']} ({row['batched_launches']}) | {row['agrees']} |",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
