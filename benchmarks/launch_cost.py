"""What a short kernel's time is made of on a driver with a costly launch: each GEMM-family config
that earlier ``gemm_classes.py`` runs chose (their ``--out`` JSON), re-timed by every clock in one
run beside the vendor library, without tuning again:

- ``event``: the median of single runs' profiling events (what the tuner ranks by);
- ``stream``: gated bursts of back-to-back runs in the profiling queue, first start to last end
  by their events (``DeviceRunner``'s ``back_to_back_s``);
- ``unprofiled``: the same bursts in a queue without profiling, as a runtime's queue is, by the
  host's clock (``back_to_back_unprofiled_s``).

An empty kernel is timed the same ways, and by the host's clock in the profiling queue too, which
tells the clock's share from profiling's. cuBLAS runs as a CUDA graph of back-to-back calls, and
an empty CUDA kernel the same way gives that side's floor.

    python benchmarks/launch_cost.py --device NVIDIA --runs data/h100_async/four_classes.json.gz
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pyopencl as cl
from gemm_classes import launch_floor, parse_shape, vendor_anchor  # beside this script
from gemm_k_groups import chosen_configs

from octune.tuner.device import select_device
from octune.tuner.errors import OctuneError
from octune.tuner.kernels import load_kernel
from octune.tuner.measure import DeviceRunner, host_clock_seconds

STREAM = 20  # runs per burst


def empty_kernel(device: cl.Device) -> dict[str, float]:
    """``launch_floor``'s clocks, and the host's clock in the profiling queue."""
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    kernel = cl.Kernel(cl.Program(context, "__kernel void empty() {}").build(), "empty")
    profiled_host = host_clock_seconds(
        queue, lambda into: [cl.enqueue_nd_range_kernel(into, kernel, (64,), (64,))], STREAM
    )
    return {
        **launch_floor(device, stream=STREAM),
        "empty_kernel_host_clock_us": profiled_host * 1e6,
    }


def cuda_empty_us() -> float | None:
    """Microseconds per launch of a one-element CUDA kernel in a graph, where torch has a GPU."""
    try:
        import torch
        from side_by_side import cuda_graph_seconds
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.zeros(1, device="cuda")
    return cuda_graph_seconds(lambda: x.add_(1.0)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument(
        "--missing",
        nargs="*",
        default=["ASYNC=0", "KDIMC=1"],
        metavar="NAME=VALUE",
        help="parameters newer than the runs, at the value that builds the kernel they ran",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    missing = {name: int(value) for name, _, value in (m.partition("=") for m in args.missing)}
    device = select_device(args.device)
    anchor_name, anchor = vendor_anchor(device)
    floor = {**empty_kernel(device), "cuda_empty_graph_us": cuda_empty_us()}
    print(f"an empty kernel (us): {floor}", flush=True)
    print(f"{'shape':>18} {'kernel':>18} {'event':>8} {'stream':>8} {'unprof.':>8} "
          f"{anchor_name:>8}   {anchor_name} / octune: event stream unprofiled (us)",
          flush=True)  # fmt: skip
    rows = []
    ratios: list[tuple[float, float, float]] = []
    for shape, name, chosen in dict.fromkeys(
        (shape, name, json.dumps(config)) for shape, name, config in chosen_configs(args.runs)
    ):
        config = {**missing, **json.loads(chosen)}
        workload = parse_shape(shape)
        runner = DeviceRunner(device, load_kernel(name), workload, seed=7, repeats=50,
                              max_seconds=0.5, back_to_back=STREAM)  # fmt: skip
        row: dict[str, object] = {"shape": shape, "kernel": name, "config": config}
        rows.append(row)
        try:
            measured = runner.measure(config)
        except OctuneError as error:  # a config the space has outlawed since that run
            row["failed"] = str(error)[:300]
            print(f"{shape:>18} {name:>18} failed: {row['failed']}", flush=True)
            continue
        if not measured.ok or not measured.median_s:
            row["failed"] = measured.message[:300]
            print(f"{shape:>18} {name:>18} failed: {row['failed']}", flush=True)
            continue
        ours = (measured.median_s, measured.extra["back_to_back_s"],
                measured.extra["back_to_back_unprofiled_s"])  # fmt: skip
        theirs = anchor(workload)
        row |= {"event_s": ours[0], "stream_s": ours[1], "unprofiled_s": ours[2],
                "anchor_s": theirs}  # fmt: skip
        ratios.append((theirs / ours[0], theirs / ours[1], theirs / ours[2]))
        print(f"{shape:>18} {name:>18} " + " ".join(f"{t * 1e6:8.1f}" for t in ours)
              + f" {theirs * 1e6:8.1f}   " + " ".join(f"{r:5.2f}" for r in ratios[-1]),
              flush=True)  # fmt: skip
    if ratios:
        medians = [statistics.median(clock) for clock in zip(*ratios, strict=True)]
        print(f"median {anchor_name} / octune over {len(ratios)} configs: event {medians[0]:.2f}, "
              f"stream {medians[1]:.2f}, unprofiled {medians[2]:.2f}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"device": device.name, **floor, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
