"""Record a GEMM space on a real device for offline replay: every legal config of a sub-grid.

Configs are measured in a seeded random order and the files are rewritten every few configs,
so a recording cut short by --time (or a kill) is a uniform sample of the sub-grid, and
re-running the same command resumes it, with the kernel source kept in the file even when the
checkout's template has changed since. Several shapes are recorded from one build per config
(the shape is a kernel argument), so a second shape costs only its runs.

    python benchmarks/record_space.py --shapes 128x128x128 32x512x128 --time 25m \
        --values MWG=16,32,64 --values SA=1 --out benchmarks/data/pocl_gemm
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.kernels import kernel_from_texts, load_kernel
from octune.tuner.measure import DeviceRunner
from octune.tuner.replay import RecordedSpace, parse_sub_grid, restrict
from octune.tuner.session import parse_duration
from octune.tuner.workloads import GemmWorkload

CHECKPOINT_EVERY = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes", type=GemmWorkload.parse, nargs="+", required=True, help="e.g. 128x128x128"
    )
    parser.add_argument("--transa", action="store_true")
    parser.add_argument("--transb", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--values", action="append", default=[], help="NAME=v1,v2 sub-grid")
    parser.add_argument("--time", default=None, help="stop after this long, e.g. 25m")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="file prefix: PREFIX_NN_MxNxK.json.gz")
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    workloads = [GemmWorkload(w.m, w.n, w.k, args.transa, args.transb) for w in args.shapes]
    paths = [Path(f"{args.out}_{w.layout}_{w.m}x{w.n}x{w.k}.json.gz") for w in workloads]
    kernel = load_kernel("gemm")
    previous = [RecordedSpace.load(path) if path.exists() else None for path in paths]
    for recorded in previous:
        if recorded is None:
            continue
        if recorded.device["fingerprint"] != info.fingerprint:
            raise SystemExit(f"recording {recorded.device['name']} is of another device")
        # Resume with the kernel the recording started with, whatever the checkout holds now.
        kernel = kernel_from_texts(
            recorded.kernel["name"], recorded.kernel["source"], recorded.kernel["space_source"]
        )
    space = restrict(kernel.space, parse_sub_grid(args.values))
    table = space.enumerate(info.limits)
    full = len(kernel.space.enumerate(info.limits))
    order = np.random.default_rng(args.seed).permutation(len(table))
    print(f"{info.name}: {len(table):,} legal configs in the sub-grid of {full:,}")

    runners = [
        DeviceRunner(cl_device, kernel, w, seed=args.seed, repeats=args.repeats, max_seconds=0.5)
        for w in workloads
    ]
    columns = [
        (r.configs.tolist(), r.status, r.time_s.tolist()) if r else ([], [], []) for r in previous
    ]
    done = {tuple(row) for row in columns[0][0]}
    spent = float(previous[0].notes.get("seconds", 0.0)) if previous[0] else 0.0
    limit = parse_duration(args.time) if args.time else float("inf")
    started = time.monotonic()

    def save() -> None:
        for workload, path, (configs, status, times) in zip(workloads, paths, columns, strict=True):
            RecordedSpace.of(
                kernel, info, workload, space, configs, status, times,
                notes={
                    "seconds": spent + time.monotonic() - started,
                    "shapes_per_build": len(workloads),
                    "subgrid_configs": len(table),
                    "full_space_configs": full,
                    "order_seed": args.seed,
                },
            ).save(path)  # fmt: skip

    for count, row in enumerate(order, start=1):
        if time.monotonic() - started >= limit:
            break
        config = table.config(int(row))
        key = tuple(config[name] for name in space.parameter_names)
        if key in done:
            continue
        for runner, (configs, status, times) in zip(runners, columns, strict=True):
            measurement = runner.measure(config)
            configs.append(list(key))
            status.append(measurement.status.value)
            times.append(measurement.median_s if measurement.ok else float("nan"))
        recorded_count = len(columns[0][0])
        if recorded_count % CHECKPOINT_EVERY == 0:
            save()
            print(f"{recorded_count}/{len(table)} recorded ({count} visited)", flush=True)
    save()
    print(f"wrote {', '.join(map(str, paths))}: {len(columns[0][0])} of {len(table)} configs")


if __name__ == "__main__":
    main()
