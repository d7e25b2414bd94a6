"""Candidates measured per minute, builds included: serial (the measurer builds each candidate
itself) versus parallel builders, side by side in one run, on one workload.

    python benchmarks/throughput.py --device NVIDIA --size 1024 --seconds 90 --jobs 16

Each mode gets its own empty program cache, so every candidate is compiled. The GPU-busy
fraction is the kernel time of the timed runs (profiling events) over the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from octune.catalogue.registry import load_kernel
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Budget, Settings, run_session


def measure_mode(
    store: Store, device: str, size: int, seconds: float, jobs: int, seed: int, energy: bool
) -> dict[str, float]:
    info = DeviceInfo.from_cl(select_device(device))
    kernel = load_kernel("gemm")
    table = kernel.space.enumerate(info.limits)
    workload = gemm_workload(size, size, size)
    with tempfile.TemporaryDirectory() as cache:
        settings = Settings(jobs=jobs, confirm=0, energy=energy, cache_root=cache)
        started = time.perf_counter()
        report = run_session(
            store, info, kernel, workload, table,
            strategy="random", budget=Budget(seconds=seconds), settings=settings, seed=seed,
        )  # fmt: skip
        wall = time.perf_counter() - started
    measurements = store.session_measurements(report.session_id)
    busy = sum(m.extra.get("device_s", 0.0) for m in measurements)
    energies = [m.extra["energy_j"] for m in measurements if "energy_j" in m.extra]
    powers = [m.extra["power_w"] for m in measurements if "power_w" in m.extra]
    best = report.progress.best
    return {
        "jobs": jobs,
        "candidates": len(measurements),
        "wall_s": wall,
        "per_minute": 60 * len(measurements) / wall,
        "gpu_busy": busy / wall,
        "failures": sum(report.progress.failures.values()),
        "best_tflops": (best.gflops or 0) / 1e3 if best else 0.0,
        "mean_energy_j": sum(energies) / len(energies) if energies else float("nan"),
        "mean_power_w": sum(powers) / len(powers) if powers else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--energy", action="store_true", help="read the energy sensor too")
    parser.add_argument("--db", default="sqlite:///throughput.db")
    parser.add_argument("--out", type=Path, default=Path("throughput.json"))
    args = parser.parse_args()
    store = Store(args.db)
    rows = [
        measure_mode(store, args.device, args.size, args.seconds, 0, 1, args.energy),
        measure_mode(store, args.device, args.size, args.seconds, args.jobs, 2, args.energy),
    ]
    print(f"\nGEMM {args.size}^3, random candidates, {args.seconds:.0f} s per mode")
    print("| mode | build processes | candidates | per minute | GPU busy | J/run | W |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, row in zip(("serial", "parallel"), rows, strict=True):
        print(
            f"| {name} | {row['jobs']} | {row['candidates']} | {row['per_minute']:.0f} | "
            f"{row['gpu_busy']:.1%} | {row['mean_energy_j']:.3f} | {row['mean_power_w']:.0f} |"
        )
    print(f"parallel / serial: {rows[1]['per_minute'] / rows[0]['per_minute']:.1f}x")
    args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
