"""A packed A against a transpose through registers, config by config: each ``gemm`` config a
``gemm_classes.py`` run chose (its ``--out`` JSON), timed on NN shapes as ``gemm``, as
``gemm_packed`` (A transposed into a workspace by a first launch) and, for the bound a free
transpose would give, as ``gemm`` on the same shape in TN, in turns, beside the vendor library.
Every variant is verified on every measurement.

    python benchmarks/packed_ab.py --device NVIDIA --runs data/h100_squares/sq4096.json.gz \\
        --shapes 4096x4096x4096 8192x8192x8192
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyopencl as cl
from lib.ab import in_turns
from lib.baselines import opencl_copy_gbs, vendor_anchor
from lib.gemm_shapes import parse_shape
from lib.runs import chosen_configs

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec, load_kernel
from octune.core.errors import SpaceError
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner


def launch_times(
    device: cl.Device, kernel: KernelSpec, config: dict[str, int], workload: Workload
) -> tuple[float, float, float]:
    """Seconds of the packing launch, of the gap to the next launch's start, and of the tiled
    launch, each the best of 10 runs of both after a warm-up (profiling events).
    """
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    program = cl.Program(context, kernel.source).build(kernel.build_options(config, workload))
    shape = workload.shape_vars()
    limits = DeviceInfo.from_cl(device).limits
    m, n, k = (workload.shape[key] for key in ("m", "n", "k"))
    rng = np.random.default_rng(0)
    flags = cl.mem_flags
    a, b = (
        cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
        for x in (rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32))
    )
    c = cl.Buffer(context, flags.WRITE_ONLY, 4 * m * n)
    elements = kernel.space.workspace_elements(config, shape, limits)
    workspace = cl.Buffer(context, flags.READ_WRITE, 4 * elements)
    launches = kernel.space.launches(config, shape, limits)
    entries = [cl.Kernel(program, launch.entry) for launch in launches]
    for entry in entries:
        entry.set_args(
            np.int32(m), np.int32(n), np.int32(k), np.float32(1.0), np.float32(0.0),
            a, np.int32(k), b, np.int32(n), c, np.int32(n), workspace,
        )  # fmt: skip
    best = [float("inf")] * 3
    for _ in range(11):
        pack, tiled = (
            cl.enqueue_nd_range_kernel(queue, entry, launch.global_size, launch.local_size)
            for entry, launch in zip(entries, launches, strict=True)
        )
        tiled.wait()
        spans = (
            pack.profile.end - pack.profile.start,
            tiled.profile.start - pack.profile.end,
            tiled.profile.end - tiled.profile.start,
        )
        best = [min(old, new * 1e-9) for old, new in zip(best, spans, strict=True)]
    return best[0], best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--shapes", nargs="*", default=None, help="NN shapes (default: the run's)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = select_device(args.device)
    limits = DeviceInfo.from_cl(device).limits
    anchor_name, anchor = vendor_anchor(device)
    gemm, packed = load_kernel("gemm"), load_kernel("gemm_packed")
    copy_gbs = opencl_copy_gbs(device)
    print(f"float4 copy: {copy_gbs:.0f} GB/s", flush=True)
    rows = []
    for run_shape, name, chosen in chosen_configs(args.runs):
        if name != "gemm":
            continue
        chosen = {**chosen, "ASYNC": chosen.get("ASYNC", 0)}
        as_packed = {**chosen, "ASYNC": min(chosen["ASYNC"], 1), "PACK_A": 1}
        try:
            packed.space.check(as_packed, limits)
        except SpaceError as error:
            print(f"{run_shape} config: no packed variant ({error})", flush=True)
            continue
        for shape in args.shapes or [run_shape.partition(":")[0]]:
            nn, tn = parse_shape(shape), parse_shape(f"{shape}:TN")

            trials = {
                label: (
                    DeviceRunner(device, kernel, workload, seed=7, repeats=50, max_seconds=0.5),
                    config,
                )
                for label, kernel, workload, config in (
                    ("gemm NN", gemm, nn, chosen),
                    ("packed NN", packed, nn, as_packed),
                    ("gemm TN", gemm, tn, chosen),
                )
            }
            times, failed = in_turns(trials)
            best = {label: min(t) for label, t in times.items() if t}
            anchor_s = anchor(nn)
            base = best.get("gemm NN", float("nan"))
            pack_s, gap_s, tiled_s = launch_times(device, packed, as_packed, nn)
            pack_gbs = 8 * nn.shape["m"] * nn.shape["k"] / pack_s / 1e9
            print(f"\n{shape} with {run_shape}'s config (ASYNC {chosen['ASYNC']}, KWG "
                  f"{chosen['KWG']}, PF {chosen['PF']}); {anchor_name} {anchor_s * 1e6:.1f} us; "
                  f"the packing launch alone {pack_s * 1e6:.1f} us, {pack_gbs:.0f} GB/s "
                  f"({pack_gbs / copy_gbs:.0%} of the copy's), then {gap_s * 1e6:.1f} us to the "
                  f"tiled launch, {tiled_s * 1e6:.1f} us",
                  flush=True)  # fmt: skip
            for label in trials:
                seconds = best.get(label)
                cells = (
                    f"{seconds * 1e6:.1f} | {seconds / base:.3f} | {anchor_s / seconds:.2f}"
                    if seconds
                    else f"failed: {failed.get(label, '')}"
                )
                print(f"| {shape} | {label} | {cells} |", flush=True)
            rows.append({"shape": shape, "run_shape": run_shape, "config": chosen,
                         "times_s": times, "anchor_s": anchor_s, "failed": failed,
                         "pack_s": pack_s, "gap_s": gap_s, "tiled_s": tiled_s,
                         "copy_gbs": copy_gbs})  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
