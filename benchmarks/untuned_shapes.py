"""How good is the service's answer for a shape nobody tuned? Leave one tuned shape out (a
copy of the database without its measurements), ask the lookup (the same code, cost model
included, that the server and bundles run) what to use for it, then measure side by side on the
device: the service's answer (its live model scores the shape itself), a bundle's (the model's
answers on a grid of shapes, after tuned neighbours within two octaves), the nearest tuned
shape's best, and the shape's own tuned best.

    python benchmarks/untuned_shapes.py --device NVIDIA --db tuned.db \
        --shapes 1024x1024x1024 3136x64x576 ...

With --hold-out-all the lookup sees none of the listed shapes (a grid of tuned shapes answers
for a set of held-out ones) instead of all but the one asked about (leave-one-out).

Every shape must already be tuned in --db (e.g. by benchmarks/record_sample.py). Also printed:
the "one config per device" answer that libraries with a single tuned configuration give (the
best config of the largest tuned shape, used for every shape).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from held_out import without_workloads  # benchmarks/held_out.py, beside this script

from octune.db.store import Store
from octune.kernels.gemm import gemm_query, parse_gemm
from octune.lookup.predictor import ModelAnswers
from octune.lookup.semantics import Answer, KernelIndex
from octune.lookup.tables import build_table, resolve_device
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.kernels import load_kernel
from octune.tuner.measure import DeviceRunner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_gemm, nargs="+", required=True)
    parser.add_argument("--device", default=None)
    parser.add_argument("--db", required=True, help="an SQLite file tuned with every shape")
    parser.add_argument("--hold-out-all", action="store_true", help="hide every listed shape")
    parser.add_argument("--out", type=Path, default=Path("untuned_shapes.json"))
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    kernel = load_kernel("gemm")
    full = Store(f"sqlite:///{args.db}")
    table = build_table(full, resolve_device(full, info.fingerprint), "gemm", kernel.sha256)
    tuned = {entry.workload_key: entry for entry in table.tuned}
    largest = max(table.tuned, key=lambda entry: _flops(entry.shape))
    for workload in args.shapes:
        if workload.key not in tuned:
            raise SystemExit(f"{workload} is not tuned in {args.db}: tune it first")
    groups = [args.shapes] if args.hold_out_all else [[workload] for workload in args.shapes]
    asked: dict[str, tuple[Answer, Answer, Answer]] = {}
    for group in groups:
        with tempfile.TemporaryDirectory() as folder:
            hidden = [w.key for w in group]
            copy = without_workloads(Path(args.db), Path(folder) / "held_out.db", hidden)
            store = Store(f"sqlite:///{copy}")
            device = resolve_device(store, info.fingerprint)
            model = ModelAnswers()
            others = build_table(store, device, "gemm", kernel.sha256, model=model)
            neighbours = KernelIndex(replace(others, predictions=()))
            service = KernelIndex(others, model.model(store, device, others))
            bundle = KernelIndex(others)
            for workload in group:
                query = gemm_query(
                    workload.shape["m"],
                    workload.shape["n"],
                    workload.shape["k"],
                    workload.shape["transa"],
                    workload.shape["transb"],
                )
                asked[workload.key] = (
                    service.lookup(query),
                    bundle.lookup(query),
                    neighbours.lookup(query),
                )
    rows = []
    for workload in args.shapes:
        own = tuned[workload.key]
        answer, bundle, nearest = asked[workload.key]
        runner = DeviceRunner(cl_device, kernel, workload, seed=1, repeats=20, min_repeats=10)
        configs = {
            "answer": answer.config,
            "bundle": bundle.config,
            "nearest": nearest.config,
            "tuned": table.entry_config(own.config),
            "one_config": table.entry_config(largest.config),
        }
        gflops = {name: runner.measure(config).gflops or 0.0 for name, config in configs.items()}
        best = gflops["tuned"] or float("nan")
        rows.append(
            {
                "shape": str(workload),
                "match": answer.match,
                "bundle_match": bundle.match,
                "from": (answer.source or {}).get("workload_key"),
                **{f"{name}_gflops": value for name, value in gflops.items()},
                "ratio": gflops["answer"] / best,
                "nearest_ratio": gflops["nearest"] / best,
                "bundle_ratio": gflops["bundle"] / best,
                "one_config_ratio": gflops["one_config"] / best,
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    print("\n| held-out shape | service answer | TFLOP/s | tuned best TFLOP/s | service / best "
          "| bundle / best | nearest / best | one config / best |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['shape']} | {row['match']} | {row['answer_gflops'] / 1e3:.2f} | "
            f"{row['tuned_gflops'] / 1e3:.2f} | {row['ratio']:.2f} | "
            f"{row['bundle_ratio']:.2f} ({row['bundle_match']}) | {row['nearest_ratio']:.2f} | "
            f"{row['one_config_ratio']:.2f} |"
        )
    names = {"ratio": "service", "bundle_ratio": "bundle", "nearest_ratio": "nearest tuned shape",
             "one_config_ratio": "one config per device"}  # fmt: skip
    medians = ", ".join(
        f"{label} {statistics.median(row[name] for row in rows):.2f}"
        for name, label in names.items()
    )
    print(f"median / tuned best: {medians}")
    args.out.write_text(json.dumps({"device": info.to_dict(), "rows": rows}, indent=2))


def _flops(shape: tuple[int, ...]) -> int:
    m, n, k = shape[:3]
    return 2 * m * n * k


if __name__ == "__main__":
    main()
