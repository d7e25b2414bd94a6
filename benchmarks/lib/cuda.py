"""Timing through CUDA: work through PyTorch (a vendor library's call) as a CUDA graph of
back-to-back calls, and a config's kernels as NVIDIA's OpenCL compiled them, launched through
CUDA: the same code timed as cuBLAS is (a CUDA graph of back-to-back runs), and visible to Nsight
Compute, which sees no kernel that OpenCL launches.

NVIDIA's OpenCL compiles a program to PTX (its program binary). The CUDA driver loads that PTX
once OpenCL's launch environment is translated (``cuda_ptx``); the launches then take the same
entries and work sizes as the OpenCL ones, on copies of the same operands, and every result is
checked against the family's float64 reference before any time counts. What the OpenCL clocks
add on top of the graph's time is the cost of launching through NVIDIA's OpenCL, not the kernel.
"""

from __future__ import annotations

import ctypes
import math
import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec
from octune.tuner.measure import DeviceRunner


def cuda_graph_seconds(
    call: Callable[[], Any],
    calls: int = 20,
    repeats: int = 10,
    reduce: Callable[[list[float]], float] = statistics.median,
) -> float:
    """Seconds per call of ``call`` (CUDA work through PyTorch), captured as a CUDA graph of
    ``calls`` back-to-back calls and replayed ``repeats`` times: the GPU's time without one
    launch's overhead per call, as profiling events time an OpenCL kernel. Five eager calls on
    a side stream first (cuDNN's benchmark mode and cuBLAS's heuristics choose there).
    """
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(5):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / calls)
    del graph
    return reduce(times)


#: PTX parameter types and the host values OpenCL's arguments become.
SCALARS: dict[str, Callable[[Any], ctypes._SimpleCData]] = {
    "u32": lambda x: ctypes.c_uint32(int(x) & 0xFFFFFFFF),
    "s32": lambda x: ctypes.c_int32(int(x)),
    "f32": lambda x: ctypes.c_float(float(x)),
}


def program_ptx(program: cl.Program) -> bytes:
    """The PTX of a program NVIDIA's OpenCL built, without the metadata section the driver
    appends (which neither ptxas nor the CUDA loader reads).
    """
    binary = program.get_info(cl.program_info.BINARIES)[0]
    return binary.split(b".metadata_section")[0].rstrip(b"\0")


#: OpenCL's launch environment, which its PTX reads from registers the driver sets and CUDA
#: leaves undefined: group offsets (0-2) and global offsets (3-5) in x, y, z are zero for any
#: launch here, and the group counts (6-8) are CUDA's %nctaid. octune's kernels read 0-3 and 6
#: (on an H100, driver 580), and every result through CUDA passed the reference with them; the
#: rest follow the same layout, and the reference check would catch a wrong one too.
ENVREGS = {0: "0", 1: "0", 2: "0", 3: "0", 4: "0", 5: "0",
           6: "%nctaid.x", 7: "%nctaid.y", 8: "%nctaid.z"}  # fmt: skip


def cuda_ptx(ptx: bytes) -> bytes:
    """OpenCL's PTX as the CUDA driver runs it: its %envreg reads replaced by what they hold
    (any other %envreg refused), and the parameters' OpenCL state-space annotations dropped.
    """
    text = ptx.decode()
    unknown = {int(n) for n in re.findall(r"%envreg(\d+)", text)} - set(ENVREGS)
    if unknown:
        raise SystemExit(f"the PTX reads %envreg{min(unknown)}, whose CUDA equivalent is unknown")

    def replace(match: re.Match[str]) -> str:
        value = ENVREGS[int(match.group(2))]
        return f"mov.u32 {match.group(1)}, {value}" if value.startswith("%") else \
            f"mov.b32 {match.group(1)}, {value}"  # fmt: skip

    text = re.sub(r"mov\.[bu]32\s+(%\w+),\s*%envreg(\d+)", replace, text)
    if "%envreg" in text:
        raise SystemExit("the PTX reads %envreg outside a mov, which this does not translate")
    text = re.sub(r"\s\.ptr\s+\.\w+\s+\.align\s+\d+", "", text)
    return text.encode() + b"\0"


def entry_parameters(ptx: bytes, entry: str) -> list[str]:
    """Each parameter's PTX type (``u32``, ``f32``, ``u64`` ...) of ``.entry entry(...)``."""
    found = re.search(rb"\.entry\s+" + re.escape(entry.encode()) + rb"\s*\((.*?)\)", ptx, re.S)
    if found is None:
        raise SystemExit(f"no .entry {entry} in the program's PTX")
    return [m.decode() for m in re.findall(rb"\.param\s+\.(\w+)", found.group(1))]


class CudaDriver:
    """The few CUDA driver calls this needs, in the device's primary context (PyTorch's).

    NVIDIA's OpenCL runs on a CUDA context of its own, which its calls can leave current on the
    thread: modules, launches and PyTorch's work here run between ``with driver.current():``.
    """

    def __init__(self) -> None:
        import torch

        torch.empty(1, device="cuda")  # PyTorch's primary context exists from here on
        self.lib = ctypes.CDLL("libcuda.so.1")
        device = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(device), torch.cuda.current_device()),
                   "cuDeviceGet")  # fmt: skip
        self.context = ctypes.c_void_p()
        status = self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), device)
        self.check(status, "cuDevicePrimaryCtxRetain")

    @contextmanager
    def current(self) -> Iterator[None]:
        self.check(self.lib.cuCtxPushCurrent_v2(self.context), "cuCtxPushCurrent")
        try:
            yield
        finally:
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    @contextmanager
    def profiled(self) -> Iterator[None]:
        """Work a profiler started with ``--profile-from-start off`` sees (Nsight Compute's
        ``ncu``), and only that: the CUDA profiler's start and stop around it, synchronised.
        """
        with self.current():
            self.check(self.lib.cuProfilerStart(), "cuProfilerStart")
            try:
                yield
                self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")
            finally:
                self.lib.cuProfilerStop()

    def check(self, status: int, what: str) -> None:
        if status != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(name))
            raise RuntimeError(f"{what}: CUDA error {status} ({(name.value or b'?').decode()})")

    def load(self, ptx: bytes) -> ctypes.c_void_p:
        module = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), ptx), "cuModuleLoadData")
        return module

    def function(self, module: ctypes.c_void_p, entry: str) -> ctypes.c_void_p:
        function = ctypes.c_void_p()
        status = self.lib.cuModuleGetFunction(ctypes.byref(function), module, entry.encode())
        self.check(status, f"cuModuleGetFunction({entry})")
        return function

    def unload(self, module: ctypes.c_void_p) -> None:
        self.check(self.lib.cuModuleUnload(module), "cuModuleUnload")

    def launch(
        self,
        function: ctypes.c_void_p,
        grid: Sequence[int],
        block: Sequence[int],
        params: ctypes.Array[ctypes.c_void_p],
        stream: int,
    ) -> None:
        status = self.lib.cuLaunchKernel(
            function, *(ctypes.c_uint(x) for x in grid), *(ctypes.c_uint(x) for x in block),
            ctypes.c_uint(0), ctypes.c_void_p(stream), params, None,
        )  # fmt: skip
        self.check(status, "cuLaunchKernel")


def padded(sizes: Sequence[int]) -> tuple[int, int, int]:
    """Work sizes in three dimensions, as CUDA takes them."""
    return (*sizes, *(1,) * (3 - len(sizes)))  # type: ignore[return-value]


@dataclass
class CudaLaunches:
    """A config's launches through CUDA on copies of the OpenCL arguments' buffers."""

    driver: CudaDriver
    module: ctypes.c_void_p
    steps: list[tuple[ctypes.c_void_p, tuple[int, ...], tuple[int, ...], Any]]
    tensors: dict[int, tuple[cl.Buffer, Any]]  # cl_mem handle -> (buffer, its CUDA copy)
    keep: list[object]  # what the parameter arrays point at, which must outlive them

    def __call__(self) -> None:
        """The launches on PyTorch's current stream (a graph's, while one is captured)."""
        import torch

        stream = torch.cuda.current_stream().cuda_stream
        for function, grid, block, params in self.steps:
            self.driver.launch(function, grid, block, params, stream)

    def outputs(self) -> list[tuple[cl.Buffer, Any]]:
        """The buffers the kernels may write (the workspace aside), with their CUDA copies."""
        return [(b, t) for b, t in self.tensors.values() if not b.flags & cl.mem_flags.READ_ONLY]

    def poison_outputs(self) -> None:
        for _, tensor in self.outputs():
            tensor.fill_(float("nan"))

    def copy_back(self, queue: cl.CommandQueue) -> None:
        """The outputs' CUDA copies back into the OpenCL buffers, where the reference reads."""
        with self.driver.current():
            written = [(buffer, tensor.cpu().numpy()) for buffer, tensor in self.outputs()]
        for buffer, host in written:
            cl.enqueue_copy(queue, buffer, host)
        queue.finish()


def cuda_launches(
    driver: CudaDriver, runner: DeviceRunner, config: dict[str, int], ptx: bytes
) -> CudaLaunches:
    """The config's program (``ptx``) in CUDA, with the runner's input set 0 copied over and a
    fresh workspace (zero, so that split-K's counters start as the space requires).
    """
    import torch

    kernel, workload = runner.kernel, runner.workload
    shape, limits = workload.shape_vars(), runner.info.limits
    args = runner.data.args(0)
    hosts: dict[int, tuple[cl.Buffer, np.ndarray]] = {}
    for arg in args:
        if isinstance(arg, cl.Buffer) and arg.int_ptr not in hosts:
            host = np.empty(arg.size // 4, np.float32)
            cl.enqueue_copy(runner.queue, host, arg)
            hosts[arg.int_ptr] = (arg, host)
    elements = kernel.space.workspace_elements(config, shape, limits)
    with driver.current():
        module = driver.load(ptx)
        tensors = {
            key: (buffer, torch.from_numpy(host).cuda()) for key, (buffer, host) in hosts.items()
        }
        workspace = [torch.zeros(elements, dtype=torch.float32, device="cuda")] if elements else []
        keep: list[object] = [*workspace]
        steps = []
        for launch in kernel.space.launches(config, shape, limits):
            types = entry_parameters(ptx, launch.entry)
            if len(types) != len(args) + len(workspace):
                raise SystemExit(f"{launch.entry}: {len(types)} PTX parameters for "
                                 f"{len(args) + len(workspace)} arguments")  # fmt: skip
            values: list[ctypes._SimpleCData] = []
            for kind, arg in zip(types, [*args, *workspace], strict=True):
                if isinstance(arg, cl.Buffer):
                    arg = tensors[arg.int_ptr][1]
                if isinstance(arg, torch.Tensor):
                    values.append(ctypes.c_uint64(arg.data_ptr()))
                elif kind in SCALARS:
                    values.append(SCALARS[kind](arg))
                else:
                    raise SystemExit(f"{launch.entry}: PTX parameter .{kind} for {arg!r}")
            params = (ctypes.c_void_p * len(values))(
                *(ctypes.cast(ctypes.byref(value), ctypes.c_void_p) for value in values)
            )
            keep.extend(values)
            local, global_ = padded(launch.local_size), padded(launch.global_size)
            if any(g % size for g, size in zip(global_, local, strict=True)):
                raise SystemExit(f"{launch.entry}: global size {global_} not a multiple of {local}")
            grid = tuple(g // size for g, size in zip(global_, local, strict=True))
            steps.append((driver.function(module, launch.entry), grid, local, params))
    return CudaLaunches(driver, module, steps, tensors, keep)


class PtxOffReference(Exception):
    """The CUDA launch of a config's PTX gave a result the float64 reference rejects."""


@contextmanager
def checked_launches(
    driver: CudaDriver, runner: DeviceRunner, config: dict[str, int]
) -> Iterator[CudaLaunches]:
    """``config``'s launches (``runner``'s kernel and workload) through CUDA, for the body to
    run: a run from a NaN output is held to the reference before the body and after it.
    """
    import torch

    ptx = program_ptx(runner.build(runner.kernel.build_options(config, runner.workload)))
    launches = cuda_launches(driver, runner, config, cuda_ptx(ptx))

    def checked_run(when: str) -> None:
        """One run from a NaN output (every element must be written), held to the reference."""
        with driver.current():
            launches.poison_outputs()
            launches()
            torch.cuda.synchronize()
        launches.copy_back(runner.queue)
        error = runner.data.error_ratio()
        if not error < 1.0:
            raise PtxOffReference(f"through CUDA, {when}: off the reference by {error:.3g} x "
                                  "tolerance")  # fmt: skip

    try:
        checked_run("first run")
        yield launches
        # As measure does: a race between work-groups that the first run won can lose later.
        checked_run("after the timed runs")
    finally:
        with driver.current():
            driver.unload(launches.module)


def graph_seconds(
    driver: CudaDriver, runner: DeviceRunner, config: dict[str, int], eager: int = 0
) -> float:
    """Seconds per run of ``config``'s launches through CUDA, as a CUDA graph of 20 back-to-back
    runs, held to the reference before and after (``checked_launches``). ``eager`` launches
    more, one by one, the only ones a profiler started with ``--profile-from-start off`` sees
    (``CudaDriver.profiled``).
    """
    with checked_launches(driver, runner, config) as launches:
        with driver.profiled():
            for _ in range(eager):
                launches()
        with driver.current():
            return cuda_graph_seconds(launches)


def cuda_driver_for(device: cl.Device) -> CudaDriver | None:
    """A CUDA driver beside ``device`` where it is NVIDIA's OpenCL on a GPU PyTorch can reach."""
    if "NVIDIA" not in device.platform.name.upper() or not device.type & cl.device_type.GPU:
        return None
    try:
        import torch
    except ImportError:
        return None
    return CudaDriver() if torch.cuda.is_available() else None


def ptx_graph_seconds(
    cuda: CudaDriver | None,
    device: cl.Device,
    kernel: KernelSpec,
    workload: Workload,
    config: dict[str, int],
) -> float:
    """Seconds per run of the config's PTX through CUDA, as a graph of back-to-back runs, where
    the device is NVIDIA's (``graph_seconds``); NaN elsewhere, or where it missed the reference.
    """
    if cuda is None:
        return math.nan
    try:
        return graph_seconds(cuda, DeviceRunner(device, kernel, workload, seed=7), config)
    except PtxOffReference as error:
        print(f"{workload.key}: {error}", flush=True)
        return math.nan
