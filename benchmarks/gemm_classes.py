"""GEMM by shape class (issue 19): tune each shape for a fixed time with every GEMM-family kernel
that takes it (gemm.cl's tiles and split-K, gemv.cl's two entries where M or N is 1), then time
octune's fastest verified (kernel, config), and the runner-up kernel's, beside the vendor library
in the same run, and the memory-bound shapes against the device's copy bandwidth measured in
this run too.

The anchor is cuBLAS through PyTorch (float32, TF32 off) on a GPU, as a CUDA graph of
back-to-back calls (one small call between two events would time its launch, not the kernel);
NumPy's BLAS on a CPU. Copy bandwidth: an OpenCL float4 copy of 256 MiB (bytes read + written,
best of 10 profiled runs), and PyTorch's device copy beside it on a GPU. A shape's GB/s counts
each operand read once and C written once: the traffic no kernel can avoid.

Shapes are named ``MxNxK`` with an optional ``:TN``-style suffix (op(A), op(B); N = as is,
T = transposed in memory, e.g. ``1x1000x2048:NT`` is a fully connected layer's y = x W^T).

    python benchmarks/gemm_classes.py --classes matrix-vector long-k --seconds 30 --out g.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl
from ptx_in_cuda import CudaDriver, PtxOffReference, cuda_driver_for, graph_seconds
from side_by_side import cuda_graph_seconds, stored_timings, tune_workload  # beside this script

from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.family import Workload
from octune.tuner.measure import DeviceRunner, back_to_back_seconds, host_clock_seconds
from octune.tuner.registry import KernelSpec
from octune.tuner.session import Settings, open_workers
from octune.tuner.workers import default_jobs

#: Shapes by class, none of them in the grid or the sets this project tuned before.
CLASSES = {
    "matrix-vector": ["1x4096x4096", "1x4096x4096:NT", "4096x1x4096", "1x1000x2048:NT",
                      "1x1000x1280:NT", "1x3072x768", "1x768x3072:NT", "1x30522x768:NT"],
    "skinny": ["4x4096x4096", "16x4096x1024", "4096x8x4096", "2048x32x2048"],
    "small-batch": ["8x4096x4096:NT", "4x1000x2048:NT", "12x3072x768", "3x8192x2048"],
    "long-k": ["256x256x8192", "128x768x3072", "512x49x4608", "64x1000x4096"],
    "transformer": ["128x768x768", "128x3072x768", "512x768x768:NT", "384x384x64:NT"],
    "im2col": ["3136x64x576", "784x128x1152", "196x256x2304", "3136x256x64"],
    "odd": ["1000x999x997", "333x1025x77", "77x4095x513"],
    "large-square": ["4096x4096x4096", "8192x8192x8192"],
}  # fmt: skip
#: Shapes by class that no run had tuned when they were first measured: the check on cases the
#: kernels and the search were not developed against (``--held-out``). First set 2026-11-26; the
#: second (2026-11-27, after the first had been tuned) is each list's next shape, im2col's next
#: two; the third (2026-11-27, later) the last shape of transformer, im2col, long-k and odd.
HELD_OUT = {
    "transformer": ["197x2304x768", "384x1024x1024", "577x2304x768"],
    "im2col": ["12544x64x147", "49x2048x512", "196x1024x256", "784x192x32", "3136x256x2304"],
    "long-k": ["96x512x6144", "128x1024x4096", "256x1024x4096"],
    "odd": ["513x257x1031", "771x1537x259", "1025x385x1153"],
    "skinny": ["1024x16x4096", "8192x32x1024"],
    "small-batch": ["6x2048x5120:NT", "32x4096x4096:NT"],
    "matrix-vector": ["1x2048x8192:NT", "1x11008x4096:NT"],
}
COPY_BYTES = 256 << 20


def class_of(shape: str) -> str:
    """The class that lists a shape given by ``--shapes``, so that runs split by hand report
    as one list does.
    """
    listed = (name for lists in (CLASSES, HELD_OUT) for name, shapes in lists.items()
              if shape in shapes)  # fmt: skip
    return next(listed, "given")


def read_run(path: Path) -> bytes:
    """An earlier run's ``--out`` file, gzipped as the kept ones are, or not."""
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def write_run(path: Path, run: dict[str, object]) -> None:
    """``--out``: gzipped where its name ends in .gz, as ``read_run`` reads it."""
    text = json.dumps(run, indent=1).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)


def chosen_configs(
    paths: list[Path], prefix: str = "gemm", missing: Mapping[str, int] | None = None
) -> list[tuple[str, str, dict[str, int]]]:
    """(shape, kernel, config) of each row of earlier runs whose kernel's name starts with
    ``prefix`` (by default gemm.cl's kernels, whose tiles the A/B scripts vary), first run first;
    ``missing`` (``--missing``) fills the parameters a run's configs lack.
    """
    return [
        (row["shape"], row["kernel"], {**(missing or {}), **row["config"]})
        for path in paths
        for row in json.loads(read_run(path))["rows"]
        if row.get("config") and row["kernel"].startswith(prefix)
    ]


def add_missing_argument(parser: argparse.ArgumentParser, *default: str) -> None:
    """``--missing``, for the scripts that re-time configs of earlier runs: a parameter added to
    a space since a run is absent from its configs, and the value that builds the kernel the run
    timed has to be given.
    """
    parser.add_argument("--missing", nargs="*", default=list(default), metavar="NAME=VALUE",
                        help="parameters newer than the runs, at the value that builds the "
                             "kernel they ran")  # fmt: skip


def assignments(items: Iterable[str]) -> dict[str, int]:
    """``NAME=VALUE`` items (a config's parameters on the command line) as a mapping."""
    pairs = (item.partition("=") for item in items if item)
    return {name.strip(): int(value) for name, _, value in pairs}


def parse_shape(text: str) -> Workload:
    sizes, _, layout = text.partition(":")
    m, n, k = (int(part) for part in sizes.lower().split("x"))
    layout = layout.upper() or "NN"
    return gemm_workload(m, n, k, transa=layout[0] == "T", transb=layout[1] == "T")


def traffic_bytes(workload: Workload) -> int:
    s = workload.shape
    return 4 * (s["m"] * s["k"] + s["k"] * s["n"] + s["m"] * s["n"])


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


def torch_copy_gbs() -> float:
    import torch

    x = torch.ones(COPY_BYTES // 4, device="cuda")
    y = torch.empty_like(x)
    return 2 * COPY_BYTES / cuda_graph_seconds(lambda: y.copy_(x), reduce=min) / 1e9


def operands(workload: Workload, make: Callable[[tuple[int, int]], Any]) -> tuple[Any, Any]:
    """op(A) and op(B), each made (``make(shape)``) as it lies in memory and transposed as a
    view where the workload says so: the library gets the layout and its op flags.
    """
    s = workload.shape
    a = make((s["k"], s["m"]) if s["transa"] else (s["m"], s["k"]))
    b = make((s["n"], s["k"]) if s["transb"] else (s["k"], s["n"]))
    return (a.T if s["transa"] else a), (b.T if s["transb"] else b)


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


def ptx_graph_seconds(
    cuda: CudaDriver | None,
    device: cl.Device,
    kernel: KernelSpec,
    workload: Workload,
    config: dict[str, int],
) -> float:
    """Seconds per run of the config's PTX through CUDA, as a graph of back-to-back runs, where
    the device is NVIDIA's (``ptx_in_cuda``); NaN elsewhere, or where it missed the reference.
    """
    if cuda is None:
        return math.nan
    try:
        return graph_seconds(cuda, DeviceRunner(device, kernel, workload, seed=7), config)
    except PtxOffReference as error:
        print(f"{workload.key}: {error}", flush=True)
        return math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", nargs="+", choices=sorted(CLASSES), default=sorted(CLASSES))
    parser.add_argument("--shapes", nargs="+", default=None, help="instead of --classes")
    parser.add_argument("--held-out", action="store_true", help="HELD_OUT's shapes instead")
    parser.add_argument("--seconds", type=float, default=120.0, help="tuning time per shape")
    parser.add_argument("--no-tune", action="store_true", help="only time what --db holds")
    parser.add_argument("--confirm", type=int, default=2, help="top candidates re-measured")
    parser.add_argument("--db", default="sqlite:///gemm_classes.db")
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("gemm_classes.json"))
    parser.add_argument("--report", type=Path, nargs="+", default=None, metavar="RUN",
                        help="only print the tables over earlier runs' --out files; a shape "
                             "measured in several keeps its last run")  # fmt: skip
    args = parser.parse_args()
    if args.report:
        runs = [json.loads(read_run(path)) for path in args.report]
        # A shape measured again (after a template change) reports its last run.
        latest: dict[str, dict[str, Any]] = {}
        for row in (row for run in runs for row in run["rows"]):
            latest[row["shape"]] = {**row, "class": class_of(row["shape"])}
        report(list(latest.values()), runs[0]["anchor"], runs[0]["opencl_copy_gbs"])
        return

    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    gpu = bool(device.type & cl.device_type.GPU)
    anchor_name, anchor = vendor_anchor(device)
    copy = {"opencl_copy_gbs": opencl_copy_gbs(device)}
    if gpu:
        copy["torch_copy_gbs"] = torch_copy_gbs()
    floor = launch_floor(device)
    cuda = cuda_driver_for(device)
    print(f"device: {info.name}; anchor: {anchor_name}; {args.seconds:g} s per shape; "
          f"copy bandwidth (GB/s): {copy}; an empty kernel (us): {floor}", flush=True)  # fmt: skip
    lists = HELD_OUT if args.held_out else CLASSES
    shapes = [(class_of(text), text) for text in args.shapes] if args.shapes else [
        (name, text) for name in args.classes for text in lists.get(name, [])
    ]  # fmt: skip
    settings = Settings(jobs=default_jobs(device), confirm=args.confirm)
    store = Store(args.db)
    workers = open_workers(info, settings)
    rows: list[dict[str, object]] = []
    for shape_class, text in shapes:
        workload = parse_shape(text)
        row: dict[str, object] = {"class": shape_class, "shape": text, "flops": workload.flops,
                                  "bytes": traffic_bytes(workload)}  # fmt: skip
        if not args.no_tune:
            row["traces"] = tune_workload(store, info, workload, args.seconds, "model", settings,
                                          args.seed, workers=workers)  # fmt: skip
        timed = stored_timings(store, device, info, workload)
        if not timed:
            print(f"{text}: nothing verified", flush=True)
            rows.append(row)
            continue
        best = timed[0]
        seconds, stream_s = best.seconds, best.back_to_back_s
        ptx_s = ptx_graph_seconds(cuda, device, best.kernel, workload, best.config)
        theirs = anchor(workload)
        row |= {"octune_s": seconds, "octune_back_to_back_s": stream_s,
                "octune_unprofiled_s": best.unprofiled_s, "octune_ptx_graph_s": ptx_s,
                "kernel": best.kernel.name,
                "config": best.config, "anchor_s": theirs,
                "gbs": traffic_bytes(workload) / seconds / 1e9,
                "kernels_s": {t.kernel.name: t.seconds for t in timed}}  # fmt: skip
        rows.append(row)
        others = "  ".join(f"{t.kernel.name} {t.seconds * 1e6:.1f}" for t in timed[1:])
        print(f"{shape_class:14s} {text:16s} {best.kernel.name:15s} {seconds * 1e6:9.1f} us "
              f"(stream {stream_s * 1e6:.1f}, unprofiled {best.unprofiled_s * 1e6:.1f}, PTX in a "
              f"CUDA graph {ptx_s * 1e6:.1f})  {anchor_name} {theirs * 1e6:9.1f} us  ratio "
              f"{theirs / seconds:5.2f} (stream {theirs / stream_s:5.2f}, unprofiled "
              f"{theirs / best.unprofiled_s:5.2f}, PTX graph {theirs / ptx_s:5.2f})  "
              f"{row['gbs']:7.0f} GB/s  "
              f"(others, us: {others or '-'})", flush=True)  # fmt: skip
        write_run(args.out, {"device": info.name, "anchor": anchor_name, **copy, **floor,
                             "seconds_per_shape": args.seconds, "rows": rows})  # fmt: skip
    workers.close()
    report(rows, anchor_name, copy["opencl_copy_gbs"])


#: A row's octune times by each clock: profiling events of single runs, then streams of
#: back-to-back runs by profiling events and by the host's clock without profiling, then the
#: same PTX through CUDA as a graph of back-to-back runs, as cuBLAS is timed (rows of runs
#: before a stream clock existed fall back to the events; before the PTX clock, NaN).
CLOCKS = ("octune_s", "octune_back_to_back_s", "octune_unprofiled_s", "octune_ptx_graph_s")


def row_times(row: dict[str, object]) -> list[float]:
    """The row's seconds by each of ``CLOCKS``."""
    fallback = {"octune_ptx_graph_s": math.nan}
    return [float(str(row.get(clock, fallback.get(clock, row["octune_s"])))) for clock in CLOCKS]


def report(rows: list[dict[str, object]], anchor_name: str, copy_gbs: float) -> None:
    """One markdown row per shape, then each class's median ratio by each clock."""
    clocks = "stream; unprofiled; PTX in a CUDA graph"
    print(f"\n| class | shape | kernel | octune us ({clocks}) | {anchor_name} us | "
          f"{anchor_name} / octune ({clocks}) | octune TFLOP/s | GB/s | % of copy | "
          f"runner-up kernel, us |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ratios: dict[str, list[tuple[float, ...]]] = {}
    for row in rows:
        if "octune_s" not in row:
            print(f"| {row['class']} | {row['shape']} | none verified | | | | | | | |")
            continue
        theirs, flops, gbs = (float(str(row[key])) for key in ("anchor_s", "flops", "gbs"))
        ours = row_times(row)
        ratio = tuple(theirs / t for t in ours)
        ratios.setdefault(str(row["class"]), []).append(ratio)
        print(f"| {row['class']} | {row['shape']} | {row['kernel']} | {ours[0] * 1e6:.1f} "
              f"({'; '.join(f'{t * 1e6:.1f}' for t in ours[1:])}) | {theirs * 1e6:.1f} | "
              f"{ratio[0]:.2f} ({'; '.join(f'{r:.2f}' for r in ratio[1:])}) | "
              f"{flops / ours[0] / 1e12:.2f} | {gbs:.0f} | {100 * gbs / copy_gbs:.0f} | "
              f"{runner_up(row)} |")  # fmt: skip
    print(f"\n| class | shapes | median {anchor_name} / octune ({clocks}) | lowest ({clocks}) |")
    print("| --- | --- | --- | --- |")
    for name, count, medians, lowest in class_summary(ratios, list(ratios)):
        print(f"| {name} | {count} | {medians[0]:.2f} "
              f"({'; '.join(f'{m:.2f}' for m in medians[1:])}) | {lowest[0]:.2f} "
              f"({'; '.join(f'{m:.2f}' for m in lowest[1:])}) |")  # fmt: skip


def class_summary(
    ratios: dict[str, list[tuple[float, ...]]], order: list[str]
) -> list[tuple[str, int, list[float], list[float]]]:
    """(class, shapes, median and lowest ratio by each clock) for each class in ``order``, then
    for all of them together ("all"); a clock's NaNs are left out.
    """
    summary = []
    for name in [*order, "all"]:
        by_shape = ratios.get(name) or [r for v in ratios.values() for r in v]
        if by_shape:
            by_clock = list(zip(*by_shape, strict=True))
            medians = [finite_median(clock) for clock in by_clock]
            lowest = [min(finite(clock), default=math.nan) for clock in by_clock]
            summary.append((name, len(by_shape), medians, lowest))
    return summary


def finite(ratios: Iterable[float]) -> list[float]:
    """The ratios a clock gave: the host's clock gives NaN where its noise swamped the kernel."""
    return [ratio for ratio in ratios if math.isfinite(ratio)]


def finite_median(ratios: Iterable[float]) -> float:
    """The median of the ratios a clock gave; NaN where it gave none."""
    kept = finite(ratios)
    return statistics.median(kept) if kept else math.nan


def runner_up(row: dict[str, object]) -> str:
    timed = row.get("kernels_s")
    if not isinstance(timed, dict) or len(timed) < 2:
        return "-"
    name, seconds = sorted(timed.items(), key=lambda item: item[1])[1]
    return f"{name} {seconds * 1e6:.1f}"


if __name__ == "__main__":
    main()
