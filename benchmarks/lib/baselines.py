"""What octune's times are read against: the vendor library (cuBLAS through PyTorch on a GPU,
NumPy's BLAS elsewhere) on the same GEMM, the device's copy bandwidth, and an empty kernel's time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import pyopencl as cl

from octune.catalogue.family import Workload
from octune.tuner.measure import back_to_back_seconds, host_clock_seconds

from .cuda import cuda_graph_seconds
from .gemm_shapes import operands

COPY_BYTES = 256 << 20


def opencl_copy_gbs(device: cl.Device, repeats: int = 10) -> float:
    """Best GB/s (read + write) of a float4 copy of ``COPY_BYTES`` through OpenCL."""
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    source = "__kernel void copy(const __global float4* x, __global float4* y) {" \
             " y[get_global_id(0)] = x[get_global_id(0)]; }"  # fmt: skip
    kernel = cl.Kernel(cl.Program(context, source).build(), "copy")
    x = cl.Buffer(context, cl.mem_flags.READ_ONLY, COPY_BYTES)
    y = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, COPY_BYTES)
    cl.enqueue_fill_buffer(queue, x, np.float32(1.0), 0, COPY_BYTES)
    best = float("inf")
    for _ in range(repeats + 1):
        event = kernel(queue, (COPY_BYTES // 16,), None, x, y)
        event.wait()
        best = min(best, (event.profile.end - event.profile.start) * 1e-9)
    return 2 * COPY_BYTES / best / 1e9


def torch_copy_gbs() -> float:
    import torch

    x = torch.ones(COPY_BYTES // 4, device="cuda")
    y = torch.empty_like(x)
    return 2 * COPY_BYTES / cuda_graph_seconds(lambda: y.copy_(x), reduce=min) / 1e9


def launch_floor(device: cl.Device, runs: int = 50, stream: int = 20) -> dict[str, float]:
    """Microseconds an empty kernel takes by its profiling event (median of ``runs``), and per
    launch in a stream of ``stream`` back-to-back launches, by profiling events and by the
    host's clock in a queue without profiling: the least any kernel's time can read each way.
    The host's clock in the profiling queue too tells the clock's share from profiling's.
    """
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    kernel = cl.Kernel(cl.Program(context, "__kernel void empty() {}").build(), "empty")

    def launch(into: cl.CommandQueue) -> list[cl.Event]:
        return [cl.enqueue_nd_range_kernel(into, kernel, (64,), (64,))]

    events = []
    for _ in range(runs + 1):
        events.extend(launch(queue))
        events[-1].wait()
    single = statistics.median((e.profile.end - e.profile.start) * 1e-3 for e in events[1:])
    profiled = back_to_back_seconds(queue, launch, stream)
    profiled_host = host_clock_seconds(queue, launch, stream)
    unprofiled = host_clock_seconds(cl.CommandQueue(context), launch, stream)
    return {"empty_kernel_event_us": single, "empty_kernel_stream_us": profiled * 1e6,
            "empty_kernel_host_clock_us": profiled_host * 1e6,
            "empty_kernel_unprofiled_us": unprofiled * 1e6}  # fmt: skip


def cublas_seconds(workload: Workload) -> float:
    """torch.matmul on the operands as they lie (transposed views: cuBLAS's op flags)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    op_a, op_b = operands(workload, lambda shape: torch.randn(*shape, device="cuda"))
    return cuda_graph_seconds(lambda: torch.matmul(op_a, op_b))


def numpy_seconds(workload: Workload, min_seconds: float = 0.5) -> float:
    """Median seconds of NumPy's matmul (its BLAS, all cores) on the operands as they lie."""
    rng = np.random.default_rng(0)
    op_a, op_b = operands(workload, lambda shape: rng.standard_normal(shape, dtype=np.float32))
    times: list[float] = []
    while sum(times) < min_seconds or len(times) < 5:
        started = time.perf_counter()
        np.matmul(op_a, op_b)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def vendor_anchor(device: cl.Device) -> tuple[str, Callable[[Workload], float]]:
    """What octune is compared with: cuBLAS on a GPU, NumPy's BLAS elsewhere."""
    if device.type & cl.device_type.GPU:
        return "cuBLAS", cublas_seconds
    return "NumPy", numpy_seconds
