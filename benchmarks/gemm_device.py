"""Tune float32 NN GEMM on a GPU with a fixed random budget, then compare with cuBLAS.

Run on the lent H100 through benchmarks/device_run.sh. Prints one row per size: octune's best
verified TFLOP/s, cuBLAS SGEMM (TF32 off) measured in the same run, and their ratio. octune's
number is the best of the session's confirmation (its top candidates re-measured with more
repeats on fresh inputs); the search's own best is printed beside it.

    python benchmarks/gemm_device.py --sizes 1024 4096 --budget 150 --out results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from octune.catalogue.registry import load_kernel
from octune.core.results import Measurement
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Budget, SessionReport, Settings, run_session
from octune.tuner.workers import default_jobs


def cublas_tflops(size: int, repeats: int = 30) -> float:
    """Median TFLOP/s of torch.matmul on CUDA with TF32 off, timed with CUDA events."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sets = [
        (torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda"))
        for _ in range(3)
    ]
    for a, b in sets:  # warm-up: handles, heuristics, clocks
        torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        a, b = sets[i % len(sets)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * size**3 / statistics.median(times) / 1e12


def tflops(measurement: Measurement | None) -> float:
    return (measurement.gflops or 0.0) / 1e3 if measurement is not None else 0.0


def headline(report: SessionReport) -> Measurement | None:
    """The best re-measured candidate; the search's best where nothing was confirmed."""
    confirmed = [m for m in report.confirmed if m.ok]
    return max(confirmed, key=tflops) if confirmed else report.progress.best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--db", default="sqlite:///gemm_device.db")
    parser.add_argument("--out", type=Path, default=Path("gemm_device.json"))
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    kernel = load_kernel("gemm")
    started = time.perf_counter()
    table = kernel.space.enumerate(info.limits)
    seconds = time.perf_counter() - started
    print(f"{info.name}: {len(table):,} legal configs, enumerated in {seconds:.2f} s")
    store = Store(args.db)
    settings = Settings(jobs=default_jobs(cl_device))
    rows = []
    for size in args.sizes:
        workload = gemm_workload(size, size, size)
        started = time.perf_counter()
        report = run_session(
            store, info, kernel, workload, table,
            strategy="random", budget=Budget(candidates=args.budget), settings=settings,
            seed=args.seed,
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        best = headline(report)
        octune = tflops(best)
        cublas = cublas_tflops(size)
        rows.append(
            {
                "size": size,
                "budget": args.budget,
                "tried": report.progress.tried,
                "failures": dict(report.progress.failures),
                "seconds": elapsed,
                "octune_tflops": octune,
                "search_best_tflops": tflops(report.progress.best),
                "confirmed_tflops": [tflops(m) for m in report.confirmed],
                "cublas_tflops": cublas,
                "ratio": octune / cublas,
                "best_config": best.config if best else None,
            }
        )
        tried = report.progress.tried
        print(
            f"  {size}^3: {octune:.2f} TFLOP/s confirmed "
            f"({tflops(report.progress.best):.2f} in the search), "
            f"{tried} candidates, {dict(report.progress.failures)} failed, {elapsed:.0f} s",
            flush=True,
        )

    print(
        "\n| GEMM NN fp32 | candidates | octune TFLOP/s (search best) | cuBLAS TFLOP/s "
        "| octune / cuBLAS |"
    )
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['size']}^3 | {row['tried']} | {row['octune_tflops']:.2f} "
            f"({row['search_best_tflops']:.2f}) | {row['cublas_tflops']:.2f} | {row['ratio']:.2f} |"
        )
    for row in rows:
        print(f"best {row['size']}: {row['best_config']}")
    args.out.write_text(json.dumps({"device": info.to_dict(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
