"""Live search on a device, side by side in one run: random search, the cost model from
scratch, and the cost model warm-started from other shapes already tuned on the device.

    python benchmarks/model_live.py --device NVIDIA --size 4096 --budget 150 \
        --history tuned.db --level 43600

--history is an SQLite file of earlier tuning on this device (its measurements of the tuned
shape itself are left out); --level is the GFLOP/s to reach (43,600: CLBlast after its own
tuner at 4096³ on the H100). Each mode tunes into its own copy, so no mode sees another's
measurements; candidates are built by the parallel pipeline as in a real session.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from held_out import without_workloads  # benchmarks/held_out.py, beside this script

from octune.db.store import Store
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.kernels import load_kernel
from octune.tuner.session import Budget, Settings, run_session
from octune.tuner.workers import default_jobs
from octune.tuner.workloads import GemmWorkload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--history", type=Path, required=True)
    parser.add_argument("--level", type=float, default=43600.0, help="GFLOP/s to reach")
    parser.add_argument("--out", type=Path, default=Path("model_live.json"))
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    kernel = load_kernel("gemm")
    table = kernel.space.enumerate(info.limits)
    workload = GemmWorkload(args.size, args.size, args.size)
    settings = Settings(jobs=default_jobs(cl_device), confirm=3)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for mode, strategy, warm in (
            ("random", "random", False),
            ("model", "model", False),
            ("model + transfer", "model", True),
        ):
            path = Path(folder) / f"{strategy}-{warm}.db"
            if warm:
                without_workloads(args.history, path, [workload.key])
            store = Store(f"sqlite:///{path}")
            started = time.perf_counter()
            report = run_session(
                store, info, kernel, workload, table, strategy=strategy,
                budget=Budget(candidates=args.budget), settings=settings, seed=args.seed,
            )  # fmt: skip
            wall = time.perf_counter() - started
            trace = [m.gflops or 0.0 for m in store.session_measurements(report.session_id)]
            reached = next((i + 1 for i, g in enumerate(trace) if g >= args.level), None)
            confirmed = max((m.gflops or 0.0 for m in report.confirmed), default=0.0)
            rows.append(
                {
                    "mode": mode,
                    "measured": len(trace),
                    "search_best_tflops": max(trace, default=0.0) / 1e3,
                    "confirmed_best_tflops": confirmed / 1e3,
                    "to_reach_level": reached,
                    "wall_s": wall,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nGEMM NN {args.size}^3, budget {args.budget}, level {args.level / 1e3:.1f} TFLOP/s")
    print("| mode | measured | best TFLOP/s (search) | confirmed TFLOP/s | measurements to level "
          "| wall s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['mode']} | {row['measured']} | {row['search_best_tflops']:.2f} | "
            f"{row['confirmed_best_tflops']:.2f} | {row['to_reach_level'] or 'not reached'} | "
            f"{row['wall_s']:.0f} |"
        )
    args.out.write_text(json.dumps({"device": info.to_dict(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
