"""Live search on a device, side by side in one run: random search, the cost model from
scratch, and the cost model warm-started from other shapes already tuned on the device.

    python benchmarks/model_live.py --device NVIDIA --shape 4096x4096x4096 --budget 150 \
        --history tuned.db --level 43600

--history is an SQLite file of earlier tuning on this device (its measurements of the tuned
shape itself are left out); --level is the GFLOP/s to reach (43,600: CLBlast after its own
tuner at 4096³ on the H100). Each mode tunes into its own copy, so no mode sees another's
measurements; candidates are built by the parallel pipeline as in a real session.

It also prices the model (issue 4, item 5): the seconds its strategy took, against the
measurement time it saved, which is how many more candidates random search needed to reach
95 % of the best any mode found, times random search's seconds per candidate.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from lib.tuning import without_workloads

from octune.catalogue.registry import load_kernel
from octune.db.store import Store
from octune.kernels.gemm import gemm_workload, parse_gemm
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.session import Budget, Settings, run_session
from octune.tuner.workers import default_jobs

MODES = {"random": ("random", False), "model": ("model", False), "transfer": ("model", True)}


def first_reaching(trace: list[float], level: float) -> int | None:
    return next((i + 1 for i, gflops in enumerate(trace) if gflops >= level), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--shape", type=parse_gemm, default=gemm_workload(4096, 4096, 4096))
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--history", type=Path, required=True)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--confirm", type=int, default=3, help="top candidates re-measured")
    parser.add_argument("--level", type=float, default=None, help="GFLOP/s to reach")
    parser.add_argument("--out", type=Path, default=Path("model_live.json"))
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    kernel = load_kernel("gemm")
    table = kernel.space.enumerate(info.limits)
    workload = args.shape
    settings = Settings(jobs=default_jobs(cl_device), confirm=args.confirm)
    rows, traces = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for mode in args.modes:
            strategy, warm = MODES[mode]
            path = Path(folder) / f"{mode}.db"
            if warm:
                without_workloads(args.history, path, [workload.key])
            store = Store(f"sqlite:///{path}")
            report = run_session(
                store, info, kernel, workload, table, strategy=strategy,
                budget=Budget(candidates=args.budget), settings=settings, seed=args.seed,
            )  # fmt: skip
            measured = store.session_measurements(report.session_id)
            trace = [m.gflops or 0.0 for m in measured]
            traces[mode] = trace
            progress = report.progress
            rows.append(
                {
                    "mode": mode,
                    "measured": len(trace),
                    "failed": sum(progress.failures.values()),
                    "search_best_tflops": max(trace, default=0.0) / 1e3,
                    "confirmed_best_tflops": max(
                        (m.gflops or 0.0 for m in report.confirmed), default=0.0
                    )
                    / 1e3,
                    "to_reach_level": args.level and first_reaching(trace, args.level),
                    "search_s": progress.elapsed_s,
                    "strategy_s": progress.strategy_s,
                    # what was measured, in order: to study a search afterwards
                    "measurements": [[dict(m.config), m.status.value, m.gflops] for m in measured],
                }
            )
            shown = {key: value for key, value in rows[-1].items() if key != "measurements"}
            print(json.dumps(shown), flush=True)
    best = max(max(trace, default=0.0) for trace in traces.values())
    for row in rows:
        row["to_95"] = first_reaching(traces[row["mode"]], 0.95 * best)
    print(f"\n{workload}, budget {args.budget}, best of all modes {best / 1e3:.2f} TFLOP/s")
    print("| mode | measured (failed) | per minute | strategy s | best TFLOP/s (search) | "
          "confirmed TFLOP/s | to 95 % of best | to level | search s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['mode']} | {row['measured']} ({row['failed']}) | "
            f"{60 * row['measured'] / row['search_s']:.0f} | {row['strategy_s']:.1f} | "
            f"{row['search_best_tflops']:.2f} | {row['confirmed_best_tflops']:.2f} | "
            f"{row['to_95'] or 'not reached'} | {row['to_reach_level'] or '-'} | "
            f"{row['search_s']:.0f} |"
        )
    random = next((row for row in rows if row["mode"] == "random"), None)
    if random is not None:
        per_candidate = random["search_s"] / random["measured"]
        random_to_95 = random["to_95"] or random["measured"] + 1  # a lower bound if not reached
        bound = "" if random["to_95"] else "at least "
        for row in rows:
            if row is random or row["to_95"] is None:
                continue
            saved = (random_to_95 - row["to_95"]) * per_candidate
            row["saved_s"] = saved
            print(
                f"{row['mode']}: strategy {row['strategy_s']:.1f} s against {bound}{saved:.1f} s "
                f"of measurements saved to 95 % ({100 * row['strategy_s'] / saved:.1f} %)"
                if saved > 0
                else f"{row['mode']}: saved no measurements to 95 %"
            )
    args.out.write_text(json.dumps({"device": info.to_dict(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
