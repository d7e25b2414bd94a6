"""Register-bound rates of the ways an OpenCL CPU compiler might form 8-bit products, beside
float ``mad`` in the same run: whether any path reaches VNNI's instructions
(benchmarks/results/cpu.md; docs/precision.md, "int8").

Each work-item runs ITERS iterations of eight independent accumulations on values held in
registers, so memory plays no part:
  dot       ``dot_4x8packed_us_int`` of cl_khr_integer_dot_product (-cl-std=CL3.0), 8 ops a call
  pairs     16-bit products summed in pairs, ``a.even * b.even + a.odd * b.odd`` on short16:
            the form LLVM lowers to vpmaddwd (vpdpwssd with VNNI), 2 ops a product
  halves    the same products summed half by half (no pairing), 2 ops a product
  float     ``mad`` on float16 vectors, 2 flops a lane

    python benchmarks/int8_paths.py --device 0
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyopencl as cl

from octune.tuner.device import select_device

ITERS = 2048
DOT_SOURCE = r"""
#define ITERS 2048
__kernel void dot_path(__global const uint* a, __global int* out) {
    const int i = get_global_id(0);
    uint x0 = a[i & 255], x1 = a[(i + 1) & 255], x2 = a[(i + 2) & 255], x3 = a[(i + 3) & 255];
    uint y0 = a[(i + 7) & 255], y1 = a[(i + 9) & 255];
    int c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0;
    for (int k = 0; k < ITERS; ++k) {
        c0 += dot_4x8packed_us_int(x0, y0); c1 += dot_4x8packed_us_int(x1, y0);
        c2 += dot_4x8packed_us_int(x2, y0); c3 += dot_4x8packed_us_int(x3, y0);
        c4 += dot_4x8packed_us_int(x0, y1); c5 += dot_4x8packed_us_int(x1, y1);
        c6 += dot_4x8packed_us_int(x2, y1); c7 += dot_4x8packed_us_int(x3, y1);
        y0 += 0x01010101u; y1 ^= (uint)k;
    }
    out[i] = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7;
}
"""
SOURCE = r"""
#define ITERS 2048
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if FLOAT
#define T float
#define ACC float16
#define M(c, x, y) c = mad(x, y, c)
#define NEXT y0 += 1.0f; y1 *= 0.999f
#else
#define T short
#define ACC int8
#if PAIRS
#define M(c, x, y) c += convert_int8(x.even) * convert_int8(y.even) + \
                        convert_int8(x.odd) * convert_int8(y.odd)
#else
#define M(c, x, y) c += convert_int8(x.lo) * convert_int8(y.lo); \
                   c += convert_int8(x.hi) * convert_int8(y.hi)
#endif
#define NEXT y0 += (short16)(1); y1 ^= (short16)(k)
#endif
// Eight accumulations of 16-lane operands held in registers, a step of the inputs a round.
__kernel void vector_path(__global const T* a, __global ACC* out) {
    const int i = get_global_id(0);
    CAT(T, 16) x0 = vload16(i & 7, a), x1 = vload16((i + 1) & 7, a);
    CAT(T, 16) x2 = vload16((i + 2) & 7, a), x3 = vload16((i + 3) & 7, a);
    CAT(T, 16) y0 = vload16((i + 5) & 7, a), y1 = vload16((i + 6) & 7, a);
    ACC c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0;
    for (int k = 0; k < ITERS; ++k) {
        M(c0, x0, y0); M(c1, x1, y0); M(c2, x2, y0); M(c3, x3, y0);
        M(c4, x0, y1); M(c5, x1, y1); M(c6, x2, y1); M(c7, x3, y1);
        NEXT;
    }
    out[i] = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7;  // every lane kept
}
"""


def rate(queue: cl.CommandQueue, kernel: cl.Kernel, items: int, ops: int, *args: object) -> float:
    """G op/s of ``items`` work-items of ``ops`` operations each: the best of 3 runs."""
    kernel.set_args(*args)
    cl.enqueue_nd_range_kernel(queue, kernel, (items,), (16,)).wait()
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        cl.enqueue_nd_range_kernel(queue, kernel, (items,), (16,)).wait()
        best = min(best, time.perf_counter() - started)
    return items * ops / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--items", type=int, default=2048, help="work-items a launch")
    args = parser.parse_args()
    device = select_device(args.device)
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    rng = np.random.default_rng(0)
    flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
    words = cl.Buffer(context, flags, hostbuf=rng.integers(0, 2**32, 256, dtype=np.uint32))
    shorts = cl.Buffer(context, flags, hostbuf=rng.integers(-100, 100, 256, dtype=np.int16))
    floats = cl.Buffer(context, flags, hostbuf=rng.random(256, dtype=np.float32))
    out = cl.Buffer(context, cl.mem_flags.READ_WRITE, 64 * args.items)  # a float16 an item
    items, per = args.items, ITERS * 8
    print(f"{device.name} ({device.platform.name})")
    ops = per * 16 * 2  # 16 products a step, a multiply and an add each
    for name, defines, values, unit in (
        ("pairs", ["-DPAIRS=1"], shorts, "G op/s"),
        ("halves", ["-DPAIRS=0"], shorts, "G op/s"),
        ("float", ["-DFLOAT=1"], floats, "GFLOP/s"),
    ):
        program = cl.Program(context, SOURCE).build(defines)
        print(f"{name}: {rate(queue, program.vector_path, items, ops, values, out):,.1f} {unit}")
    try:  # the integer dot builtins need OpenCL C 3.0 (Intel's CPU runtime)
        dot = cl.Program(context, DOT_SOURCE).build(["-cl-std=CL3.0"])
        ops = per * 8  # 4 products and 4 adds a call
        print(f"dot: {rate(queue, dot.dot_path, items, ops, words, out):,.1f} G op/s")
    except cl.Error as error:  # PoCL 3.0 and NVIDIA's OpenCL have no integer dot product
        print(f"dot: not built here ({str(error).splitlines()[0]})")


if __name__ == "__main__":
    main()
