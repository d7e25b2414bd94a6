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
import json
import math
from pathlib import Path
from typing import Any

import pyopencl as cl
from lib.baselines import launch_floor, opencl_copy_gbs, torch_copy_gbs, vendor_anchor
from lib.cuda import cuda_driver_for, ptx_graph_seconds
from lib.gemm_shapes import CLASSES, HELD_OUT, class_of, class_summary, parse_shape
from lib.runs import read_run, write_run
from lib.tuning import stored_timings, tune_workload

from octune.catalogue.family import Workload
from octune.db.store import Store
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Settings, open_workers
from octune.tuner.workers import default_jobs


def traffic_bytes(workload: Workload) -> int:
    s = workload.shape
    return 4 * (s["m"] * s["k"] + s["k"] * s["n"] + s["m"] * s["n"])


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


def runner_up(row: dict[str, object]) -> str:
    timed = row.get("kernels_s")
    if not isinstance(timed, dict) or len(timed) < 2:
        return "-"
    name, seconds = sorted(timed.items(), key=lambda item: item[1])[1]
    return f"{name} {seconds * 1e6:.1f}"


if __name__ == "__main__":
    main()
