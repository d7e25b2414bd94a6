"""Whether a device's OpenCL compiler turns the kernels' ``a * b + c`` into FMAs.

octune's templates sum products as ``a * b + c`` rather than ``mad()``, because PoCL runs
``mad()`` as a call (benchmarks/RESULTS.md, "GEMM on CPU devices"). OpenCL C lets a compiler
contract the expression, not oblige it to: this builds a random legal config of each GEMM and
conv2d kernel on the device and counts, in the binary it hands out (PTX under NVIDIA's
OpenCL), fused multiply-adds against separate float multiplies and adds.

    python benchmarks/fma_contraction.py --device NVIDIA --out fma.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pyopencl as cl

from octune.catalogue.registry import kernels_of, load_kernel
from octune.kernels.conv2d import FAMILY as CONV2D
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo, select_device

PTX_OPS = {
    "fma": re.compile(rb"\bfma\.rn(\.ftz)?\.f32\b"),
    "mul": re.compile(rb"\bmul(\.rn)?(\.ftz)?\.f32\b"),
    "add": re.compile(rb"\badd(\.rn)?(\.ftz)?\.f32\b"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--out", type=Path, default=Path("fma.json"))
    args = parser.parse_args()
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    context = cl.Context([device])
    workloads = {
        "gemm": gemm_workload(1024, 1024, 1024),
        "conv2d": CONV2D.workload(
            {"n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "pad": 1}
        ),
    }
    rows = []
    for family, workload in workloads.items():
        for name in kernels_of(family):
            kernel = load_kernel(name)
            if kernel.takes(workload) is not None:
                continue
            table = kernel.space.enumerate(info.limits)
            config = table.config(int(np.random.default_rng(0).integers(len(table))))
            program = cl.Program(context, kernel.source).build(
                options=kernel.build_options(config, workload)
            )
            binary = program.get_info(cl.program_info.BINARIES)[0]
            counts = {op: len(pattern.findall(binary)) for op, pattern in PTX_OPS.items()}
            rows.append({"kernel": name, "config": config, **counts})
            print(json.dumps(rows[-1]), flush=True)
    args.out.write_text(json.dumps({"device": info.name, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
