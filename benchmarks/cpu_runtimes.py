"""GEMM on every CPU OpenCL runtime of this machine, beside NumPy's matmul, in one run.

Each CPU device that passes the compile check tunes the gemm family as `octune tune gemm` does
(the kernels written for CPUs, ``for_device``) for the same time per size, model strategy,
seed 0; a device that cannot compile is listed with its reason. For each size: candidates
measured and per minute, the confirmed best (top 3 re-measured, 30 repeats each) against the
search's own median of the same config (how far a CPU timing moves between the two), and
NumPy's float32 matmul (its BLAS, every core) timed right after the session.

    python benchmarks/cpu_runtimes.py --sizes 256 512 1024 --seconds 120 --out cpu_gemm.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyopencl as cl

from octune.catalogue.family import host_seconds
from octune.core.results import config_key
from octune.db.store import Store
from octune.kernels.gemm import FAMILY, gemm_workload
from octune.tuner.campaign import for_device, tasks_for
from octune.tuner.device import DeviceInfo, compile_check, list_devices
from octune.tuner.session import Budget, Settings, run_session


def tune_size(store: Store, info: DeviceInfo, size: int, seconds: float, cache: str) -> dict:
    """One size's session(s) on one device, with NumPy timed right after."""
    shape = {"m": size, "n": size, "k": size}
    tasks, _ = for_device(tasks_for("gemm", shape), info.device_type)
    started = time.perf_counter()
    rows = []
    for task in tasks:
        report = run_session(
            store, info, task.kernel, task.workload, task.kernel.space.enumerate(info.limits),
            strategy="model", budget=Budget(seconds=seconds / len(tasks)),
            settings=Settings(jobs=0, cache_root=cache), seed=0,
        )  # fmt: skip
        search = {config_key(m.config): m for m in store.session_measurements(report.session_id)}
        for confirmed in (m for m in report.confirmed if m.ok):
            first = search.get(config_key(confirmed.config))
            rows.append((task.kernel.name, confirmed, first, report.progress.tried))
    elapsed = time.perf_counter() - started
    numpy_gflops = (
        gemm_workload(size, size, size).flops
        / 1e9
        / host_seconds(FAMILY.host_baseline(gemm_workload(size, size, size)))
    )
    kernel, best, first, tried = max(rows, key=lambda row: row[1].gflops or 0.0)
    return {
        "size": size,
        "kernel": kernel,
        "tried": tried,
        "per_minute": 60 * tried / elapsed,
        "gflops": best.gflops,
        "search_gflops": first.gflops if first else None,
        "confirmed_over_search": [
            row[1].median_s / row[2].median_s for row in rows if row[2] is not None
        ],
        "numpy_gflops": numpy_gflops,
        "config": best.config,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--out", type=Path, default=Path("cpu_gemm.json"))
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as scratch:
        store = Store(f"sqlite:///{Path(scratch) / 'cpu_runtimes.db'}")
        for device in list_devices():
            if not device.type & cl.device_type.CPU:
                continue
            info = DeviceInfo.from_cl(device)
            platform = f"{info.platform_name} {info.platform_version}"
            check = compile_check(device, recheck=True)
            if not check.ok:
                results.append({"platform": platform, "compile_error": check.reason})
                print(f"{platform}: cannot compile: {check.reason}", flush=True)
                continue
            for size in args.sizes:
                row = {"platform": platform, **tune_size(store, info, size, args.seconds, scratch)}
                results.append(row)
                print(json.dumps(row), flush=True)

    print("\n| runtime | GEMM | kernel | candidates (per minute) | confirmed GFLOP/s (search) "
          "| confirmed / search time | NumPy GFLOP/s | / NumPy |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in results:
        if "compile_error" in row:
            print(f"| {row['platform']} | - | - | - | cannot compile: {row['compile_error']} |")
            continue
        ratios = ", ".join(f"{r:.2f}" for r in row["confirmed_over_search"])
        print(
            f"| {row['platform']} | {row['size']}³ | {row['kernel']} | {row['tried']} "
            f"({row['per_minute']:.0f}) | {row['gflops']:.1f} ({row['search_gflops'] or 0:.1f}) "
            f"| {ratios} | {row['numpy_gflops']:.1f} | {row['gflops'] / row['numpy_gflops']:.2f} |"
        )
    args.out.write_text(json.dumps({"seconds": args.seconds, "rows": results}, indent=2))


if __name__ == "__main__":
    main()
