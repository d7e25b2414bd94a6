"""Record a GEMM space on a real device for offline replay: every legal config of a sub-grid.

Configs are measured in a seeded random order and the file is rewritten every few configs, so a
recording cut short by --time (or a kill) is a uniform sample of the sub-grid, and re-running
the same command resumes it.

    python benchmarks/record_space.py --m 128 --n 128 --k 128 --time 25m \
        --values MWG=16,32,64 --values SA=1 --out benchmarks/data/pocl_gemm_128.json.gz
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.kernels import load_kernel
from octune.tuner.measure import DeviceRunner
from octune.tuner.replay import RecordedSpace, restrict
from octune.tuner.session import parse_duration
from octune.tuner.workloads import GemmWorkload

CHECKPOINT_EVERY = 10


def parse_values(items: list[str]) -> dict[str, list[int]]:
    values = {}
    for item in items:
        name, _, text = item.partition("=")
        values[name.strip()] = [int(v) for v in text.split(",") if v.strip()]
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--transa", action="store_true")
    parser.add_argument("--transb", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--values", action="append", default=[], help="NAME=v1,v2 sub-grid")
    parser.add_argument("--time", default=None, help="stop after this long, e.g. 25m")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    kernel = load_kernel("gemm")
    workload = GemmWorkload(args.m, args.n, args.k, args.transa, args.transb)
    values = parse_values(args.values)
    space = restrict(kernel.space, values)
    table = space.enumerate(info.limits)
    full = len(kernel.space.enumerate(info.limits))
    order = np.random.default_rng(args.seed).permutation(len(table))
    print(f"{info.name}: {len(table):,} legal configs in the sub-grid of {full:,} ({workload})")

    if args.out.exists():
        recorded = RecordedSpace.load(args.out)
        if recorded.kernel["sha256"] != kernel.sha256 or recorded.device["fingerprint"] != (
            info.fingerprint
        ):
            raise SystemExit(f"{args.out} holds another kernel version or device: pick --out")
        done = {tuple(row) for row in recorded.configs.tolist()}
        configs, status = recorded.configs.tolist(), recorded.status
        times = recorded.time_s.tolist()
        spent = float(recorded.notes.get("seconds", 0.0))
    else:
        done, configs, status, times, spent = set(), [], [], [], 0.0
    runner = DeviceRunner(
        cl_device, kernel, workload, seed=args.seed, repeats=args.repeats, max_seconds=0.5
    )
    limit = parse_duration(args.time) if args.time else float("inf")
    started = time.monotonic()

    def save() -> None:
        RecordedSpace(
            kernel={
                "name": kernel.name,
                "sha256": kernel.sha256,
                "space_source": kernel.space.source_text,
            },
            device=info.to_dict(),
            limits=info.limits,
            workload={
                "problem": workload.problem,
                "shape": workload.shape,
                "dtype": workload.dtype,
                "flops": workload.flops,
            },
            values={p.name: list(p.values) for p in space.parameters},
            parameters=space.parameter_names,
            configs=np.asarray(configs, dtype=np.int64).reshape(-1, len(space.parameter_names)),
            status=status,
            time_s=np.asarray(times, dtype=float),
            notes={
                "seconds": spent + time.monotonic() - started,
                "subgrid_configs": len(table),
                "full_space_configs": full,
                "order_seed": args.seed,
            },
        ).save(args.out)

    for count, row in enumerate(order, start=1):
        if time.monotonic() - started >= limit:
            break
        config = table.config(int(row))
        key = tuple(config[name] for name in space.parameter_names)
        if key in done:
            continue
        measurement = runner.measure(config)
        configs.append(list(key))
        status.append(measurement.status.value)
        times.append(measurement.median_s if measurement.ok else float("nan"))
        if len(configs) % CHECKPOINT_EVERY == 0:
            save()
            best = np.nanmin(times) if np.isfinite(times).any() else float("nan")
            print(f"{len(configs)}/{len(table)} recorded ({count} visited), best {best:.3e} s")
    save()
    print(f"wrote {args.out}: {len(configs)} of {len(table)} configs")


if __name__ == "__main__":
    main()
