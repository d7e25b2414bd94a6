"""How much local memory a work-group can really use on a device, against what it reports
(CL_DEVICE_LOCAL_MEM_SIZE), which bounds octune's tile spaces (``local_mem_size``).

On the H100, NVIDIA's OpenCL reports 48 KB, yet a GEMM config with 80 KB of local arrays
built, ran and verified (benchmarks/RESULTS.md, issue 19, tenth part). Each size here builds a
kernel with one local array of that many bytes, fills it from global memory, and reads it back
reversed across the work-group, so that every byte of it must hold a distinct value.

    python benchmarks/local_memory_probe.py --device NVIDIA --kib 48 64 96 128 160 200 227 228
"""

from __future__ import annotations

import argparse

import numpy as np
import pyopencl as cl

from octune.tuner.device import select_device

SOURCE = """
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void reverse(const __global float* src, __global float* dst) {
    __local float buffer[FLOATS];
    const int t = get_local_id(0);
    for (int i = t; i < FLOATS; i += 256) buffer[i] = src[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = t; i < FLOATS; i += 256) dst[i] = buffer[FLOATS - 1 - i];
}
"""


def probe(context: cl.Context, queue: cl.CommandQueue, kib: int) -> str:
    floats = kib * 256
    try:
        program = cl.Program(context, SOURCE).build([f"-DFLOATS={floats}"])
    except cl.Error as error:
        return f"build failed: {str(error).splitlines()[0][:120]}"
    data = np.random.default_rng(kib).standard_normal(floats).astype(np.float32)
    flags = cl.mem_flags
    src = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=data)
    dst = cl.Buffer(context, flags.WRITE_ONLY, data.nbytes)
    try:
        program.reverse(queue, (256,), (256,), src, dst).wait()
    except cl.Error as error:
        return f"launch failed: {str(error).splitlines()[0][:120]}"
    out = np.empty_like(data)
    cl.enqueue_copy(queue, out, dst)
    return "ok" if np.array_equal(out, data[::-1]) else "wrong result"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--kib", type=int, nargs="+", default=[48, 64, 96, 128, 160, 227, 228])
    args = parser.parse_args()
    device = select_device(args.device)
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    print(f"{device.name}: reports {device.local_mem_size // 1024} KiB of local memory")
    for kib in args.kib:
        print(f"{kib:4d} KiB: {probe(context, queue, kib)}", flush=True)


if __name__ == "__main__":
    main()
