"""Record a GEMM space on a real device for offline replay: every legal config of a sub-grid.

Configs are measured in a seeded random order and the files are rewritten every few configs,
so a recording cut short by --time (or a kill) is a uniform sample of the sub-grid, and
re-running the same command resumes it, with the kernel source kept in the file even when the
checkout's template has changed since. Several shapes are recorded from one build per config
(the shape is a kernel argument), so a second shape costs only its runs.

Background load makes a recording lie: configs measured while something else ran look slow,
the rest fast, and the "best" configs are then just those measured in quiet minutes (the
first PoCL recordings, made while tests ran on the same two cores, were like that). So a fixed
sentinel config is measured right before every config, and its times are kept in the file:
their spread says how steady the device stayed. On a CPU device, --warm-jobs compiles every
config in parallel processes first (PoCL compiles at the first launch and caches the result),
so that the measurements run afterwards on otherwise idle cores.

    python benchmarks/record_space.py --shapes 128x128x128 32x512x128 --time 25m \
        --values MWG=16,32,64 --values SA=1 --out benchmarks/data/pocl_gemm
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from lib.recordings import steadiness

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec, kernel_from_texts, load_kernel
from octune.core.results import Config
from octune.kernels.gemm import gemm_workload, parse_gemm
from octune.replay.harness import RecordedSpace, parse_sub_grid, restrict
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner
from octune.tuner.session import parse_duration
from octune.tuner.workers import find_device

CHECKPOINT_EVERY = 10

_warm_runners: list[DeviceRunner] = []


def _warm_start(fingerprint: str, kernel: KernelSpec, workloads: list[Workload]) -> None:
    device = find_device(fingerprint)
    _warm_runners.extend(
        DeviceRunner(device, kernel, w, repeats=1, min_repeats=1) for w in workloads
    )


def _warm(config: Config) -> None:
    """Build and launch a config once per shape: fills the driver's and octune's caches."""
    for runner in _warm_runners:
        runner.measure(config)


def warm(
    info: DeviceInfo,
    kernel: KernelSpec,
    workloads: list[Workload],
    configs: list[Config],
    jobs: int,
) -> None:
    started = time.monotonic()
    with ProcessPoolExecutor(
        jobs, mp.get_context("spawn"), initializer=_warm_start,
        initargs=(info.fingerprint, kernel, workloads),
    ) as pool:  # fmt: skip
        for count, _ in enumerate(pool.map(_warm, configs, chunksize=4), start=1):
            if count % 100 == 0:
                seconds = time.monotonic() - started
                print(f"warmed {count}/{len(configs)} in {seconds:.0f} s", flush=True)
    print(f"warmed {len(configs)} configs in {time.monotonic() - started:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes", type=parse_gemm, nargs="+", required=True, help="e.g. 128x128x128"
    )
    parser.add_argument("--transa", action="store_true")
    parser.add_argument("--transb", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--values", action="append", default=[], help="NAME=v1,v2 sub-grid")
    parser.add_argument("--time", default=None, help="stop after this long, e.g. 25m")
    parser.add_argument("--configs", type=int, default=None, help="stop after this many")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warm-jobs", type=int, default=0, help="processes that compile every config first"
    )
    parser.add_argument("--out", required=True, help="file prefix: PREFIX_NN_MxNxK.json.gz")
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    workloads = [gemm_workload(w.m, w.n, w.k, args.transa, args.transb) for w in args.shapes]
    paths = [
        Path(f"{args.out}_{w.family.describe(w.shape).split()[1]}_{w.m}x{w.n}x{w.k}.json.gz")
        for w in workloads
    ]
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
    order = np.random.default_rng(args.seed).permutation(len(table))[: args.configs]
    print(f"{info.name}: {len(table):,} legal configs in the sub-grid of {full:,}")

    runners = [
        DeviceRunner(cl_device, kernel, w, seed=args.seed, repeats=args.repeats, max_seconds=0.5)
        for w in workloads
    ]
    columns = [
        (r.configs.tolist(), r.status, r.time_s.tolist()) if r else ([], [], []) for r in previous
    ]
    sentinel = table.config(int(order[0]))
    sentinels = [list(r.notes.get("sentinel_s", [])) if r else [] for r in previous]
    done = {tuple(row) for row in columns[0][0]}
    spent = float(previous[0].notes.get("seconds", 0.0)) if previous[0] else 0.0
    limit = parse_duration(args.time) if args.time else float("inf")
    started = time.monotonic()

    def save() -> None:
        for workload, path, (configs, status, times), sentinel_s in zip(
            workloads, paths, columns, sentinels, strict=True
        ):
            RecordedSpace.of(
                kernel, info, workload, space, configs, status, times,
                notes={
                    "seconds": spent + time.monotonic() - started,
                    "shapes_per_build": len(workloads),
                    "subgrid_configs": len(table),
                    "full_space_configs": full,
                    "order_seed": args.seed,
                    "sentinel": sentinel,
                    "sentinel_s": sentinel_s,
                },
            ).save(path)  # fmt: skip

    if args.warm_jobs:
        todo = [table.config(int(row)) for row in order]
        todo = [c for c in todo if tuple(c[n] for n in space.parameter_names) not in done]
        warm(info, kernel, workloads, todo, args.warm_jobs)
    measuring = time.monotonic()  # --time limits the measuring, not the warm-up

    for count, row in enumerate(order, start=1):
        if time.monotonic() - measuring >= limit:
            break
        config = table.config(int(row))
        key = tuple(config[name] for name in space.parameter_names)
        if key in done:
            continue
        for runner, (configs, status, times), sentinel_s in zip(
            runners, columns, sentinels, strict=True
        ):
            steady = runner.measure(sentinel)
            sentinel_s.append(steady.median_s if steady.ok else float("nan"))
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
    for workload, sentinel_s in zip(workloads, sentinels, strict=True):
        print(
            f"{workload.shape['m']}x{workload.shape['n']}x{workload.shape['k']}: "
            f"{steadiness(sentinel_s)}"
        )


if __name__ == "__main__":
    main()
