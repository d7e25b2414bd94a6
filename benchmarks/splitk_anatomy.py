"""Where a split-K product's time goes on a device: the partial-product launch, the slice sum,
the gap between them, and whether the workspace being a sub-buffer changes any of it.

    python benchmarks/splitk_anatomy.py --device NVIDIA --shape 256x256x8192 \
        --config '{"MWG": 128, ...}'
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pyopencl as cl

from octune.catalogue.registry import load_kernel
from octune.kernels.gemm import gemm_arguments, parse_gemm
from octune.tuner.device import DeviceInfo, select_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--shape", default="256x256x8192")
    parser.add_argument("--config", required=True, help="a gemm_splitk config as JSON")
    parser.add_argument("--splits", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    args = parser.parse_args()
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    kernel = load_kernel("gemm_splitk")
    workload = parse_gemm(args.shape)
    s = workload.shape
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    rng = np.random.default_rng(0)
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
    a, b = (cl.Buffer(context, flags, hostbuf=rng.standard_normal(n, dtype=np.float32))
            for n in (s["m"] * s["k"], s["k"] * s["n"]))  # fmt: skip
    c = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4 * s["m"] * s["n"])
    base = gemm_arguments(s["m"], s["n"], s["k"], s["k"], s["n"])((a, b), c)
    tiles = {k: v for k, v in json.loads(args.config).items() if k not in ("KSPLIT", "RWG")}
    gemm = load_kernel("gemm")
    program = cl.Program(context, gemm.source).build(gemm.build_options(tiles, workload))
    global_size, local_size = gemm.space.launch(tiles, workload.shape_vars(), info.limits)
    times = []
    for _ in range(20):
        event = cl.Kernel(program, "gemm")(queue, global_size, local_size, *base)
        event.wait()
        times.append((event.profile.end - event.profile.start) / 1e3)
    print(f"gemm, same tiles, no split: {statistics.median(times[2:]):.1f} us", flush=True)
    for split in args.splits:
        config = {**json.loads(args.config), "KSPLIT": split}
        program = cl.Program(context, kernel.source).build(kernel.build_options(config, workload))
        launches = kernel.space.launches(config, workload.shape_vars(), info.limits)
        elements = kernel.space.workspace_elements(config, workload.shape_vars(), info.limits)
        plain = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4 * elements)
        big = cl.Buffer(context, cl.mem_flags.READ_WRITE, 8 * elements)
        for name, workspace in (
            ("buffer", plain),
            ("sub-buffer", big.get_sub_region(0, 4 * elements)),
        ):
            kernels = [cl.Kernel(program, launch.entry) for launch in launches]
            for k in kernels:
                k.set_args(*base, workspace)
            rows = []
            for _ in range(20):
                events = [
                    cl.enqueue_nd_range_kernel(queue, k, launch.global_size, launch.local_size)
                    for k, launch in zip(kernels, launches, strict=True)
                ]
                events[-1].wait()
                p = [(e.profile.start, e.profile.end) for e in events]
                rows.append(
                    (p[0][1] - p[0][0], p[1][1] - p[1][0], p[1][0] - p[0][1], p[1][1] - p[0][0])
                )
            med = [statistics.median(r[i] for r in rows[2:]) / 1e3 for i in range(4)]
            queue.finish()
            started = time.perf_counter()
            for _ in range(50):
                for k, launch in zip(kernels, launches, strict=True):
                    cl.enqueue_nd_range_kernel(queue, k, launch.global_size, launch.local_size)
            queue.finish()
            wall = (time.perf_counter() - started) / 50 * 1e6
            print(f"KSPLIT {split:3d} {name:10s} partial {med[0]:7.1f} us  sum {med[1]:6.1f} us  "
                  f"gap {med[2]:7.1f} us  span {med[3]:7.1f} us  back-to-back wall {wall:7.1f} us",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
