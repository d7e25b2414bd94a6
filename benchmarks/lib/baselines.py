"""What octune's times are read against: the vendor library (cuBLAS and cuDNN through PyTorch on
a GPU, NumPy's BLAS and onnxruntime elsewhere) on the same GEMM or conv, the device's copy
bandwidth, and an empty kernel's time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

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


def vendor_call(workload: Workload) -> Callable[[], Any]:
    """The vendor library's call on the workload's operands through PyTorch on the GPU: cuBLAS's
    matmul on them as they lie (transposed views: its op flags), or cuDNN's conv2d (benchmark
    mode, channels_last for an NHWC layer). TF32 off for both.
    """
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if workload.problem == "gemm":
        op_a, op_b = operands(workload, lambda shape: torch.randn(*shape, device="cuda"))
        return lambda: torch.matmul(op_a, op_b)
    s = workload.shape
    torch.backends.cudnn.benchmark = True
    x = torch.randn(s["n"], s["c"], s["h"], s["w"], device="cuda")
    w = torch.randn(s["k"], s["c"] // s["groups"], s["r"], s["s"], device="cuda")
    if s["nhwc"]:
        x, w = (t.to(memory_format=torch.channels_last) for t in (x, w))
    return lambda: torch.nn.functional.conv2d(
        x, w, stride=s["stride"], padding=s["pad"], dilation=s["dilation"], groups=s["groups"]
    )


def cuda_vendor_seconds(workload: Workload) -> float:
    """Seconds per call of ``vendor_call``, timed as a CUDA graph of back-to-back calls."""
    return cuda_graph_seconds(vendor_call(workload))


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


def onnxruntime_seconds(workload: Workload, min_seconds: float = 0.5) -> float:
    """Median seconds of one Conv through onnxruntime's CPU provider (all cores)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    s, out = workload.shape, workload.shape_vars()  # the family's own output rule, as tuned
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((s["k"], s["c"] // s["groups"], s["r"], s["s"]))
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], kernel_shape=[s["r"], s["s"]], strides=[s["stride"]] * 2,
        pads=[s["pad"]] * 4, dilations=[s["dilation"]] * 2, group=s["groups"],
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [s["n"], s["c"], s["h"], s["w"]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [s["n"], s["k"], out["OH"], out["OW"]])],
        [numpy_helper.from_array(weight.astype(np.float32), "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((s["n"], s["c"], s["h"], s["w"])).astype(np.float32)
    for _ in range(3):
        session.run(None, {"x": x})
    times: list[float] = []
    while len(times) < 10 or sum(times) < min_seconds:
        started = time.perf_counter()
        session.run(None, {"x": x})
        times.append(time.perf_counter() - started)
    return statistics.median(times)


#: What octune is compared with, by device type and problem: the vendor library on a GPU (through
#: PyTorch), NumPy's BLAS or onnxruntime on a CPU.
VENDORS: dict[tuple[bool, str], tuple[str, Callable[[Workload], float]]] = {
    (True, "gemm"): ("cuBLAS", cuda_vendor_seconds),
    (True, "conv2d"): ("cuDNN", cuda_vendor_seconds),
    (False, "gemm"): ("NumPy", numpy_seconds),
    (False, "conv2d"): ("onnxruntime", onnxruntime_seconds),
}


def vendor_anchor(
    device: cl.Device, problem: str = "gemm"
) -> tuple[str, Callable[[Workload], float]]:
    """The name and the timing of what octune is compared with on ``device`` for ``problem``."""
    return VENDORS[bool(device.type & cl.device_type.GPU), problem]
