"""How good is the service's answer for a shape nobody tuned? Leave one tuned shape out, ask
the lookup (the same code the server and bundles run) what to use for it, then measure that
config and the shape's own tuned best side by side on the device.

    python benchmarks/untuned_shapes.py --device NVIDIA --db sqlite:///tuned.db \
        --shapes 1024x1024x1024 3136x64x576 ...

Every shape must already be tuned in --db (e.g. by benchmarks/record_sample.py). Also printed:
the "one config per device" answer that libraries with a single tuned configuration give (the
best config of the largest tuned shape, used for every shape).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path

from octune.db.lookup_tables import build_table, resolve_device
from octune.db.store import Store
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.kernels import load_kernel
from octune.tuner.lookup import KernelIndex, gemm_query
from octune.tuner.measure import DeviceRunner
from octune.tuner.workloads import GemmWorkload


def shape(text: str) -> GemmWorkload:
    m, n, k = (int(part) for part in text.lower().split("x"))
    return GemmWorkload(m, n, k)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=shape, nargs="+", required=True)
    parser.add_argument("--device", default=None)
    parser.add_argument("--db", required=True)
    parser.add_argument("--out", type=Path, default=Path("untuned_shapes.json"))
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    kernel = load_kernel("gemm")
    store = Store(args.db)
    table = build_table(store, resolve_device(store, info.fingerprint), "gemm", kernel.sha256)
    tuned = {entry.workload_key: entry for entry in table.tuned}
    largest = max(table.tuned, key=lambda entry: _flops(entry.shape))
    rows = []
    for workload in args.shapes:
        own = tuned.get(workload.key)
        if own is None:
            raise SystemExit(f"{workload} is not tuned in {args.db}: tune it first")
        others = replace(table, tuned=tuple(e for e in table.tuned if e is not own))
        answer = KernelIndex(others).lookup(
            gemm_query(workload.m, workload.n, workload.k, workload.transa, workload.transb)
        )
        runner = DeviceRunner(cl_device, kernel, workload, seed=1, repeats=20, min_repeats=10)
        measured = {
            "answer": runner.measure(answer.config),
            "tuned": runner.measure(table.entry_config(own.config)),
            "one_config": runner.measure(table.entry_config(largest.config)),
        }
        gflops = {name: m.gflops or 0.0 for name, m in measured.items()}
        rows.append(
            {
                "shape": str(workload),
                "match": answer.match,
                "from": (answer.source or {}).get("workload_key"),
                "answer_gflops": gflops["answer"],
                "tuned_gflops": gflops["tuned"],
                "one_config_gflops": gflops["one_config"],
                "ratio": gflops["answer"] / gflops["tuned"] if gflops["tuned"] else 0.0,
                "one_config_ratio": gflops["one_config"] / gflops["tuned"]
                if gflops["tuned"]
                else 0.0,
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    print("\n| held-out shape | answer | answered from | answer TFLOP/s | tuned best TFLOP/s "
          "| answer / best | one config / best |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['shape']} | {row['match']} | {row['from']} | {row['answer_gflops'] / 1e3:.2f}"
            f" | {row['tuned_gflops'] / 1e3:.2f} | {row['ratio']:.2f} | "
            f"{row['one_config_ratio']:.2f} |"
        )
    ratios = [row["ratio"] for row in rows]
    singles = [row["one_config_ratio"] for row in rows]
    print(
        f"median answer / tuned best: {statistics.median(ratios):.2f} "
        f"(one config per device: {statistics.median(singles):.2f})"
    )
    args.out.write_text(json.dumps({"device": info.to_dict(), "rows": rows}, indent=2))


def _flops(shape: tuple[int, ...]) -> int:
    m, n, k = shape[:3]
    return 2 * m * n * k


if __name__ == "__main__":
    main()
