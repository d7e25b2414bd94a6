"""What a short kernel's time is made of on a driver with a costly launch: each config that
earlier ``gemm_classes.py`` or ``conv_layers.py`` runs chose (their ``--out`` JSON), re-timed by
every clock in one run beside the vendor library (cuBLAS, cuDNN), without tuning again:

- ``event``: the median of single runs' profiling events (what the tuner ranks by);
- ``stream``: gated bursts of back-to-back runs in the profiling queue, first start to last end
  by their events (``DeviceRunner``'s ``back_to_back_s``);
- ``unprofiled``: the same bursts in a queue without profiling, as a runtime's queue is, by the
  host's clock (``back_to_back_unprofiled_s``);
- ``PTX graph``: on NVIDIA's OpenCL, the same PTX launched through CUDA as a graph of 20
  back-to-back runs, as cuBLAS is timed (``lib/cuda.py``): the kernel without OpenCL's
  launch cost.

An empty kernel is timed the same ways, and by the host's clock in the profiling queue too
(``lib.baselines.launch_floor``), which tells the clock's share from profiling's. The vendor's
call runs as a CUDA graph of back-to-back calls, and an empty CUDA kernel the same way gives that
side's floor. Ratios are summarised by GEMM shape class or by conv layer kind.

    python benchmarks/launch_cost.py --device NVIDIA --runs data/h100_async/four_classes.json.gz
    python benchmarks/launch_cost.py --device NVIDIA --latest --runs <the class runs, in order>
    python benchmarks/launch_cost.py --device NVIDIA --runs \\
        data/h200_session22/call1_conv_held2_b1.json.gz
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from lib.baselines import launch_floor, vendor_anchor
from lib.cuda import cuda_driver_for, cuda_graph_seconds, ptx_graph_seconds
from lib.gemm_shapes import class_of, class_summary
from lib.runs import add_missing_argument, assignments, chosen_picks, read_run, write_run

from octune.catalogue.registry import load_kernel
from octune.core.errors import OctuneError
from octune.tuner.device import select_device
from octune.tuner.measure import DeviceRunner

STREAM = 20  # runs per burst


def cuda_empty_us() -> float | None:
    """Microseconds per launch of a one-element CUDA kernel in a graph, where torch has a GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.zeros(1, device="cuda")
    return cuda_graph_seconds(lambda: x.add_(1.0)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--runs", type=Path, nargs="+", default=None)
    parser.add_argument("--report", type=Path, default=None, metavar="OUT",
                        help="only print the summary of an earlier run's --out file")  # fmt: skip
    add_missing_argument(parser, "ASYNC=0", "KDIMC=1")
    parser.add_argument("--latest", action="store_true",
                        help="each shape's last chosen config only, as gemm_classes --report "
                             "keeps them")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.report:
        earlier = json.loads(read_run(args.report))
        summary(earlier["rows"], earlier.get("anchor", "cuBLAS"))
        return
    if not args.runs:
        parser.error("--runs is required (or --report)")
    device = select_device(args.device)
    cuda = cuda_driver_for(device)
    picks = chosen_picks(args.runs, missing=assignments(args.missing), latest=args.latest)
    floor = {**launch_floor(device, stream=STREAM), "cuda_empty_graph_us": cuda_empty_us()}
    print(f"an empty kernel (us): {floor}", flush=True)
    print(f"{'workload':>26} {'kernel':>18} {'event':>8} {'stream':>8} {'unprof.':>8} "
          f"{'PTX gr.':>8} {'vendor':>8}   vendor / octune: event stream unprofiled "
          f"PTX-graph (us)", flush=True)  # fmt: skip
    rows = []
    anchors = set()
    seen: set[tuple[str, str, tuple[tuple[str, int], ...]]] = set()
    for pick in picks:
        key = (pick.label, pick.kernel, tuple(sorted(pick.config.items())))
        if key in seen:
            continue
        seen.add(key)
        name = pick.kernel
        runner = DeviceRunner(device, load_kernel(name), pick.workload, seed=7, repeats=50,
                              max_seconds=0.5, back_to_back=STREAM)  # fmt: skip
        anchor_name, anchor = vendor_anchor(device, pick.workload.problem)
        anchors.add(anchor_name)
        row: dict[str, object] = {"label": pick.label, "group": pick.group, "kernel": name,
                                  "config": pick.config}  # fmt: skip
        rows.append(row)
        try:
            measured = runner.measure(pick.config)
            failure = None if measured.ok and measured.median_s else measured.message
        except OctuneError as error:  # a config the space has outlawed since that run
            failure = str(error)
        if failure is not None:
            row["failed"] = failure[:300]
            print(f"{pick.label:>26} {name:>18} failed: {row['failed']}", flush=True)
            continue
        ptx_s = ptx_graph_seconds(cuda, device, runner.kernel, pick.workload, measured.config)
        ours = (measured.median_s, measured.extra["back_to_back_s"],
                measured.extra["back_to_back_unprofiled_s"], ptx_s)  # fmt: skip
        theirs = anchor(pick.workload)
        row |= {"event_s": ours[0], "stream_s": ours[1], "unprofiled_s": ours[2],
                "ptx_graph_s": ptx_s, "anchor_s": theirs}  # fmt: skip
        print(f"{pick.label:>26} {name:>18} " + " ".join(f"{t * 1e6:8.1f}" for t in ours)
              + f" {theirs * 1e6:8.1f}   " + " ".join(f"{theirs / t:5.2f}" for t in ours),
              flush=True)  # fmt: skip
    anchor_names = " and ".join(sorted(anchors))
    if args.out:
        write_run(args.out, {"device": device.name, "anchor": anchor_names, **floor, "rows": rows})
    summary(rows, anchor_names)


#: A row's seconds by each clock, in the order of the tables.
CLOCKS = {"event": "event_s", "stream": "stream_s", "unprofiled": "unprofiled_s",
          "PTX graph": "ptx_graph_s"}  # fmt: skip


def summary(rows: list[dict[str, object]], anchor_name: str) -> None:
    """The median and lowest anchor / octune ratio by each clock, per shape class and over all."""
    by_class: dict[str, list[tuple[float, ...]]] = {}
    for row in rows:
        if "anchor_s" in row:
            theirs = float(str(row["anchor_s"]))
            ratio = tuple(theirs / float(str(row.get(key, math.nan))) for key in CLOCKS.values())
            group = row.get("group") or class_of(str(row["shape"]))  # runs before conv rows
            by_class.setdefault(str(group), []).append(ratio)
    clocks = "; ".join(CLOCKS)
    print(f"\n| class | configs | median {anchor_name} / octune: {clocks} | lowest: {clocks} |")
    print("| --- | --- | --- | --- |")
    for name, count, medians, lowest in class_summary(by_class, sorted(by_class)):
        print(f"| {name} | {count} | {'; '.join(f'{m:.2f}' for m in medians)} | "
              f"{'; '.join(f'{m:.2f}' for m in lowest)} |")  # fmt: skip


if __name__ == "__main__":
    main()
