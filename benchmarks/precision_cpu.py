"""GEMM in float32, float16 and int8 on one CPU OpenCL device, beside NumPy's float32 matmul,
in one run: what low precision buys on a CPU (benchmarks/results/cpu.md, "Low precision").

For each size and dtype the gemm family is tuned as `octune tune gemm --dtype D` does (the
kernels of that dtype written for CPUs), model strategy, seed 0, the same number of candidates
each; the confirmed best (top 3 re-measured, 30 repeats) is reported as G op/s, then NumPy's
float32 product of the same size is timed right after. Ratios are within this run only.

    python benchmarks/precision_cpu.py --sizes 512 1024 --budget 40 --device 0 --out p.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from octune.catalogue.family import host_seconds
from octune.db.store import Store
from octune.kernels.gemm import FAMILY
from octune.tuner.campaign import for_device, tasks_for
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Budget, Settings, run_session

DTYPES = ("float32", "float16", "int8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    parser.add_argument("--budget", type=int, default=40, help="candidates per size and dtype")
    parser.add_argument("--device", default=None, help="as `octune tune --device`")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    info = DeviceInfo.from_cl(select_device(args.device))
    print(f"{info.name} ({info.platform_name} {info.platform_version})")
    rows = []
    with tempfile.TemporaryDirectory() as folder, Store(f"sqlite:///{folder}/p.db") as store:
        settings = Settings(jobs=0, confirm=3)
        for size in args.sizes:
            shape = {"m": size, "n": size, "k": size}
            row: dict[str, object] = {"size": size}
            for dtype in DTYPES:
                tasks, _ = for_device(tasks_for("gemm", shape, dtype), info.device_type)
                best = None
                for task in tasks:
                    table = task.kernel.space.enumerate(info.limits)
                    run_session(store, info, task.kernel, task.workload, table, strategy="model",
                                budget=Budget(candidates=args.budget), settings=settings,
                                seed=0)  # fmt: skip
                    found = store.best(info.fingerprint, task.kernel.name, task.workload.key,
                                       task.kernel.sha256)  # fmt: skip
                    if found is not None and (best is None or found.median_s < best[1].median_s):
                        best = (task.kernel.name, found)
                assert best is not None, f"nothing verified for {dtype} {size}"
                row[dtype] = {"kernel": best[0], "gops": best[1].gflops, "config": best[1].config}
            baseline = FAMILY.host_baseline(FAMILY.workload(shape))
            row["numpy_float32_gops"] = 2 * size**3 / host_seconds(baseline) / 1e9
            rows.append(row)
            single = row["float32"]["gops"]  # type: ignore[index]
            print(
                f"{size}^3: "
                + ", ".join(f"{d} {row[d]['gops']:.1f}" for d in DTYPES)  # type: ignore[index]
                + f" G op/s; NumPy float32 {row['numpy_float32_gops']:.1f}; int8 / float32 "
                f"{row['int8']['gops'] / single:.2f}, float16 / float32 "  # type: ignore[index]
                f"{row['float16']['gops'] / single:.2f}"  # type: ignore[index]
            )
    if args.out is not None:
        device = {"name": info.name, "platform": info.platform_name}
        args.out.write_text(json.dumps({"device": device, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
