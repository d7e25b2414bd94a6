"""GEMM on every CPU OpenCL runtime of this machine, beside numpy's matmul, in one run.

Each CPU device that passes the compile check gets the same session (model strategy, the same
budget and seed, float32 NN GEMM); a device that cannot compile is listed with its reason.
numpy's float32 matmul (its BLAS, on all cores) is timed before and after the sessions, so a
machine that changed speed during the run shows it.

    python benchmarks/cpu_runtimes.py --size 512 --budget 60 --out cpu_runtimes.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyopencl as cl
from gemm_device import headline  # benchmarks/gemm_device.py, beside this script

from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo, compile_check, list_devices
from octune.tuner.kernels import load_kernel
from octune.tuner.session import Budget, Settings, run_session


def numpy_gflops(size: int, repeats: int = 20) -> float:
    """Median GFLOP/s of a float32 matmul on random inputs, after a warm-up."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    a @ b
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - started)
    return 2 * size**3 / statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("cpu_runtimes.json"))
    args = parser.parse_args()

    kernel = load_kernel("gemm")
    workload = gemm_workload(args.size, args.size, args.size)
    numpy_before = numpy_gflops(args.size)
    print(f"numpy matmul {args.size}^3: {numpy_before:.1f} GFLOP/s", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        store = Store(f"sqlite:///{Path(scratch) / 'cpu_runtimes.db'}")
        for device in list_devices():
            if not device.type & cl.device_type.CPU:
                continue
            info = DeviceInfo.from_cl(device)
            row: dict[str, object] = {
                "platform": f"{info.platform_name} ({info.platform_version})",
                "device": info.name,
            }
            check = compile_check(device, recheck=True)
            if not check.ok:
                rows.append({**row, "compile_error": check.reason})
                print(f"{info.platform_name}: cannot compile: {check.reason}", flush=True)
                continue
            started = time.perf_counter()
            report = run_session(
                store, info, kernel, workload, kernel.space.enumerate(info.limits),
                strategy="model", budget=Budget(candidates=args.budget),
                settings=Settings(jobs=0, cache_root=scratch), seed=args.seed,
            )  # fmt: skip
            best = headline(report)
            row |= {
                "gflops": best.gflops if best else None,
                "search_best_gflops": report.progress.best.gflops if report.progress.best else None,
                "tried": report.progress.tried,
                "failures": dict(report.progress.failures),
                "seconds": time.perf_counter() - started,
                "best_config": best.config if best else None,
            }
            rows.append(row)
            print(f"{info.platform_name}: {row['gflops']} GFLOP/s", flush=True)
    numpy_after = numpy_gflops(args.size)
    numpy_mean = (numpy_before + numpy_after) / 2

    print(f"\n| runtime | candidates | GEMM {args.size}^3 GFLOP/s (search best) | / numpy |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        if "compile_error" in row:
            print(f"| {row['platform']} | - | cannot compile: {row['compile_error']} | - |")
            continue
        gflops = row["gflops"] or 0.0
        assert isinstance(gflops, float)
        print(
            f"| {row['platform']} | {row['tried']} | {gflops:.1f} "
            f"({row['search_best_gflops'] or 0.0:.1f}) | {gflops / numpy_mean:.2f} |"
        )
    print(
        f"| numpy matmul (float32) | - | {numpy_before:.1f} before, {numpy_after:.1f} after | 1 |"
    )
    args.out.write_text(
        json.dumps(
            {
                "size": args.size,
                "budget": args.budget,
                "numpy_gflops": [numpy_before, numpy_after],
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
