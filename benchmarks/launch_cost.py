"""What a short kernel's time is made of on a driver with a costly launch: each GEMM-family config
that earlier ``gemm_classes.py`` runs chose (their ``--out`` JSON), re-timed by every clock in one
run beside the vendor library, without tuning again:

- ``event``: the median of single runs' profiling events (what the tuner ranks by);
- ``stream``: gated bursts of back-to-back runs in the profiling queue, first start to last end
  by their events (``DeviceRunner``'s ``back_to_back_s``);
- ``unprofiled``: the same bursts in a queue without profiling, as a runtime's queue is, by the
  host's clock (``back_to_back_unprofiled_s``).

An empty kernel is timed the same ways, and by the host's clock in the profiling queue too
(``gemm_classes.launch_floor``), which tells the clock's share from profiling's. cuBLAS runs as
a CUDA graph of back-to-back calls, and an empty CUDA kernel the same way gives that side's floor.

    python benchmarks/launch_cost.py --device NVIDIA --runs data/h100_async/four_classes.json.gz
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gemm_classes import (  # beside this script
    assignments,
    chosen_configs,
    finite_median,
    launch_floor,
    parse_shape,
    vendor_anchor,
)

from octune.tuner.device import select_device
from octune.tuner.errors import OctuneError
from octune.tuner.kernels import load_kernel
from octune.tuner.measure import DeviceRunner

STREAM = 20  # runs per burst


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
    missing = assignments(args.missing)
    device = select_device(args.device)
    anchor_name, anchor = vendor_anchor(device)
    floor = {**launch_floor(device, stream=STREAM), "cuda_empty_graph_us": cuda_empty_us()}
    print(f"an empty kernel (us): {floor}", flush=True)
    print(f"{'shape':>18} {'kernel':>18} {'event':>8} {'stream':>8} {'unprof.':>8} "
          f"{anchor_name:>8}   {anchor_name} / octune: event stream unprofiled (us)",
          flush=True)  # fmt: skip
    rows = []
    ratios: list[tuple[float, float, float]] = []
    seen: set[tuple[str, str, tuple[tuple[str, int], ...]]] = set()
    for shape, name, chosen in chosen_configs(args.runs, prefix=""):
        config = {**missing, **chosen}
        key = (shape, name, tuple(sorted(config.items())))
        if key in seen:
            continue
        seen.add(key)
        workload = parse_shape(shape)
        runner = DeviceRunner(device, load_kernel(name), workload, seed=7, repeats=50,
                              max_seconds=0.5, back_to_back=STREAM)  # fmt: skip
        row: dict[str, object] = {"shape": shape, "kernel": name, "config": config}
        rows.append(row)
        try:
            measured = runner.measure(config)
            failure = None if measured.ok and measured.median_s else measured.message
        except OctuneError as error:  # a config the space has outlawed since that run
            failure = str(error)
        if failure is not None:
            row["failed"] = failure[:300]
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
        medians = [finite_median(clock) for clock in zip(*ratios, strict=True)]
        print(f"median {anchor_name} / octune over {len(ratios)} configs: event {medians[0]:.2f}, "
              f"stream {medians[1]:.2f}, unprofiled {medians[2]:.2f}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"device": device.name, **floor, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
