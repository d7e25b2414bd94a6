"""The runtime's element-wise launch (ops.cl's ``epilogue``) against a copy and variants of it,
in GB/s of the tensors it reads and writes, on one device, side by side.

EfficientNet-B0 at batch 32 on an H200 spent 0.78 ms in its 16 squeeze-and-excitation Muls
(y = x * gate[n, c], an epilogue launch of its own) where PyTorch's element-wise kernel took
0.22 ms. This times, on the SE shapes of that network and a residual Add:
  runtime    the epilogue as the runtime launches it (64 work-items a group)
  local-256  the same kernel, 256 work-items a group
  vector-4   four neighbouring elements a work-item (float4 loads and stores, one index)
  copy       y = x, the same launch shape: the ceiling
    python benchmarks/epilogue_bandwidth.py --device NVIDIA --out epilogue.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl

from octune.runtime.ops_cl import divisor, ops_source

#: (name, output shape, gate shape): an SE gate broadcast over each plane, or a residual.
CASES = [
    ("se 32x144x56x56", (32, 144, 56, 56), (32, 144, 1, 1)),
    ("se 32x96x56x56", (32, 96, 56, 56), (32, 96, 1, 1)),
    ("se 32x240x28x28", (32, 240, 28, 28), (32, 240, 1, 1)),
    ("residual 16x256x56x56", (16, 256, 56, 56), (16, 256, 56, 56)),
]

VARIANTS = r"""
__kernel void copy(const __global float* x, __global float* y, const int n) {
    const int i = get_global_id(0);
    if (i < n) y[i] = x[i];
}

__kernel void vector4(const __global float4* x, __global float4* y, const __global float* other,
                      const int n4, const int other_inner, const int other_size) {
    const int i = get_global_id(0);
    if (i >= n4) return;
    const int j = (4 * i / other_inner) % other_size;
    y[i] = x[i] * other[j];
}
"""


def _time(queue: cl.CommandQueue, launch, repeats: int) -> float:
    launch().wait()
    times = []
    for _ in range(repeats):
        event = launch()
        event.wait()
        times.append((event.profile.end - event.profile.start) * 1e-9)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="", help="a platform name's part (default: the first)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    devices = [d for p in cl.get_platforms() if args.device in p.name for d in p.get_devices()]
    if not devices:
        sys.exit(f"no OpenCL platform named like '{args.device}': pass --device")
    device = devices[0]
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    flags = cl.mem_flags
    variants = cl.Program(context, VARIANTS).build()
    rows = []
    for name, shape, gate_shape in CASES:
        n, size = int(np.prod(shape)), int(np.prod(gate_shape))
        same = size == n
        inner = 1 if same else n // size
        rng = np.random.default_rng(0)
        x = rng.standard_normal(n).astype(np.float32)
        g = rng.standard_normal(size).astype(np.float32)
        xb, gb = (
            cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=a) for a in (x, g)
        )
        yb = cl.Buffer(context, flags.WRITE_ONLY, x.nbytes)
        expected = (x.reshape(-1, inner) * g.reshape(-1, 1)).reshape(-1)
        defines = dict(EPILOGUE=1, HAS_SCALE=0, HAS_BIAS=0, OTHER=2, ACT=0, ONE_IMAGE=0,
                       SAME_OTHER=int(same), X_BYTES=0, Y_BYTES=0)  # fmt: skip
        options = [f"-D{k}={v}" for k, v in defines.items()]
        epilogue = cl.Kernel(cl.Program(context, ops_source()).build(options), "epilogue")
        divisors = [v for d in (1, 1, inner, size) for v in divisor(d)]
        epilogue.set_args(xb, yb, np.int32(n), None, None, gb, *divisors, np.float32(0),
                          np.float32(0))  # fmt: skip
        moved = 2 * x.nbytes  # read x, write y (the gate stays in cache)
        row: dict[str, object] = {"case": name, "elements": n}

        def run(kernel, items: int, local: int):
            rounded = -(-items // local) * local
            return lambda: cl.enqueue_nd_range_kernel(queue, kernel, (rounded,), (local,))

        for label, local in (("runtime", 64), ("local-256", 256)):
            seconds = _time(queue, run(epilogue, n, local), args.repeats)
            found = np.empty_like(x)
            cl.enqueue_copy(queue, found, yb)
            assert np.allclose(found, expected), label
            row[label] = {"us": seconds * 1e6, "GB/s": moved / seconds / 1e9}
        if not same and inner % 4 == 0:
            kernel = cl.Kernel(variants, "vector4")
            kernel.set_args(xb, yb, gb, np.int32(n // 4), np.int32(inner), np.int32(size))
            seconds = _time(queue, run(kernel, n // 4, 64), args.repeats)
            found = np.empty_like(x)
            cl.enqueue_copy(queue, found, yb)
            assert np.allclose(found, expected), "vector-4"
            row["vector-4"] = {"us": seconds * 1e6, "GB/s": moved / seconds / 1e9}
        copy = cl.Kernel(variants, "copy")
        copy.set_args(xb, yb, np.int32(n))
        seconds = _time(queue, run(copy, n, 64), args.repeats)
        row["copy"] = {"us": seconds * 1e6, "GB/s": moved / seconds / 1e9}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": device.name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
