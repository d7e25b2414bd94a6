"""Record a uniform random sample of the GEMM space, or of a sub-grid of it, on a device, fast:
candidates go through the tuning pipeline (parallel builders, supervised measurer), so a GPU
records about a thousand configs a minute where benchmarks/record_space.py, which measures one
config on several shapes at a time with inline builds, records about eighty.

    python benchmarks/record_sample.py --device NVIDIA --shapes 4096x4096x4096 64x4096x4096 \
        --seconds 150 90 --out benchmarks/data/h100_gemm

With --values NAME=v1,v2 (repeatable) the sample is of that sub-grid, and a sub-grid small
enough for the time given is recorded whole, which Kernel Tuner's simulation mode needs.

Each shape becomes PREFIX_<layout>_<MxNxK>.json.gz (benchmarks/replay.py reads it); the
measurements also stay in --db, where `octune best`, the service and bundles can use them.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from octune.catalogue.registry import load_kernel
from octune.db.store import Store
from octune.kernels.gemm import parse_gemm
from octune.replay.harness import RecordedSpace, parse_sub_grid, restrict
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Budget, Settings, run_session
from octune.tuner.workers import default_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_gemm, nargs="+", required=True)
    parser.add_argument("--seconds", type=float, nargs="+", required=True, help="per shape")
    parser.add_argument("--device", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--values", action="append", default=[], help="NAME=v1,v2 sub-grid")
    parser.add_argument("--jobs", type=int, default=None, help="builders (default: per device)")
    parser.add_argument("--db", default="sqlite:///record_sample.db")
    parser.add_argument("--out", required=True, help="file prefix")
    args = parser.parse_args()
    if len(args.seconds) not in (1, len(args.shapes)):
        parser.error("give one --seconds for all shapes or one per shape")
    seconds = args.seconds * len(args.shapes) if len(args.seconds) == 1 else args.seconds

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    kernel = load_kernel("gemm")
    space = restrict(kernel.space, parse_sub_grid(args.values))
    table = space.enumerate(info.limits)
    full = len(table) if not args.values else len(kernel.space.enumerate(info.limits))
    print(f"{info.name}: {len(table):,} legal configs to sample of {full:,}", flush=True)
    store = Store(args.db)
    jobs = default_jobs(cl_device) if args.jobs is None else args.jobs
    settings = Settings(jobs=jobs, confirm=0)
    for workload, limit in zip(args.shapes, seconds, strict=True):
        report = run_session(
            store, info, kernel, workload, table,
            strategy="random", budget=Budget(seconds=limit), settings=settings, seed=args.seed,
        )  # fmt: skip
        measurements = store.session_measurements(report.session_id)
        notes = {
            "seconds": limit,
            "sample": "uniform random over the legal configs of the sub-grid in `values`",
            "sub_grid_configs": len(table),
            "full_space_configs": full,
            "builders": jobs,
            "order_seed": args.seed,
        }
        path = Path(
            f"{args.out}_{workload.layout}_{workload.shape['m']}x{workload.shape['n']}x{workload.shape['k']}.json.gz"
        )
        names = kernel.space.parameter_names
        RecordedSpace.of(
            kernel, info, workload, space,
            configs=[[m.config[name] for name in names] for m in measurements],
            status=[m.status.value for m in measurements],
            time_s=[m.median_s if m.ok else math.nan for m in measurements],
            notes=notes,
        ).save(path)  # fmt: skip
        best = report.progress.best
        tflops = (best.gflops or 0) / 1e3 if best else 0.0
        print(
            f"{workload}: {len(measurements)} of {len(table):,} configs in {limit:.0f} s, "
            f"best {tflops:.2f} TFLOP/s -> {path}",
            flush=True,
        )


if __name__ == "__main__":
    main()
