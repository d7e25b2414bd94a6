"""What the per-shape benchmarks (conv_layers.py, gemm_classes.py) share: tune one workload with
every kernel of its family that takes it, re-time the fastest stored (kernel, config), and time
a vendor call kernel-only-equivalent (a CUDA graph of back-to-back calls).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, NamedTuple

import pyopencl as cl

from octune.db.store import Store
from octune.tuner.campaign import tasks_for
from octune.tuner.device import DeviceInfo
from octune.tuner.family import Workload
from octune.tuner.measure import DeviceRunner
from octune.tuner.registry import KernelSpec
from octune.tuner.session import Budget, Progress, Settings, run_session
from octune.tuner.workers import Workers


def kernels_taking(workload: Workload) -> list[KernelSpec]:
    """The kernels of the workload's family that take it, as ``octune tune FAMILY`` picks them."""
    return [task.kernel for task in tasks_for(workload.problem, workload.shape, workload.dtype)]


def tune_workload(
    store: Store,
    info: DeviceInfo,
    workload: Workload,
    seconds: float,
    strategy: str,
    settings: Settings,
    seed: int,
    only: list[str] | None = None,
    workers: Workers | None = None,
) -> list[dict[str, object]]:
    """One session per kernel that takes the workload (of ``only``, if given), ``seconds``
    shared evenly; each kernel's trace of (tried, elapsed s, best s so far).
    """
    kernels = [k for k in kernels_taking(workload) if only is None or k.name in only]
    traces = []
    for kernel in kernels:
        trace: list[tuple[int, float, float]] = []

        def record(progress: Progress, trace: list[tuple[int, float, float]] = trace) -> None:
            if progress.best is not None and progress.best.median_s:
                trace.append((progress.tried, progress.elapsed_s, progress.best.median_s))

        report = run_session(
            store, info, kernel, workload, kernel.space.enumerate(info.limits),
            strategy=strategy, budget=Budget(seconds=seconds / len(kernels)),
            settings=settings, seed=seed, on_result=record, workers=workers,
        )  # fmt: skip
        traces.append(
            {"kernel": kernel.name, "tried": report.progress.tried,
             "failures": dict(report.progress.failures), "trace": trace}
        )  # fmt: skip
    return traces


class Timed(NamedTuple):
    """A kernel's fastest stored config re-measured now: the median of its profiled runs, and
    seconds per run in a stream of back-to-back launches (what a CUDA graph of vendor calls is
    compared with on an equal footing), by profiling events and by the host's clock in a queue
    without profiling.
    """

    seconds: float
    kernel: KernelSpec
    config: dict[str, int]
    back_to_back_s: float
    unprofiled_s: float


def fastest_stored(
    store: Store, device: cl.Device, info: DeviceInfo, workload: Workload
) -> Timed | None:
    """The fastest stored kernel and config for the workload, re-measured (and re-verified)
    now, or None where nothing verified is stored.
    """
    timed = stored_timings(store, device, info, workload)
    return timed[0] if timed else None


def stored_timings(
    store: Store, device: cl.Device, info: DeviceInfo, workload: Workload, back_to_back: int = 20
) -> list[Timed]:
    """Each kernel's fastest stored config for the workload, re-measured (and re-verified) now,
    fastest first.
    """
    timed = []
    for kernel in kernels_taking(workload):
        best = store.best(info.fingerprint, kernel.name, workload.key, kernel.sha256)
        if best is None:
            continue
        runner = DeviceRunner(device, kernel, workload, seed=7, repeats=50, max_seconds=0.5,
                              back_to_back=back_to_back)  # fmt: skip
        measurement = runner.measure(best.config)
        if measurement.ok and measurement.median_s:
            streams = (measurement.extra.get(clock, measurement.median_s)
                       for clock in ("back_to_back_s", "back_to_back_unprofiled_s"))  # fmt: skip
            timed.append(Timed(measurement.median_s, kernel, best.config, *streams))
    return sorted(timed, key=lambda entry: entry.seconds)


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
