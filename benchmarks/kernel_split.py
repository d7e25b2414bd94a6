"""Which kernel of a workload wins, read early: for each workload that several kernels tuned in
a ``gemm_classes.py`` or ``conv_layers.py`` run, each kernel's best after a fraction of its own
time, against the best any kernel had by then, and whether the kernel that won at the end was
already close. A budget that moves seconds from a workload's slow kernels to its fast ones
after a first round may do so only where the winners show early.

    python benchmarks/kernel_split.py data/h200_session20/call2_held4_a.json.gz --fraction 0.25
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from lib.runs import read_run


def early_best(trace: list[list[float]], fraction: float) -> float:
    """The best time a kernel's trace of (tried, elapsed s, best s) had reached by ``fraction``
    of its last entry's elapsed time (its first entry where nothing was in by then).
    """
    end = trace[-1][1]
    reached = [point for point in trace if point[1] <= end * fraction] or trace[:1]
    return reached[-1][2]


def workloads(run: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(name, each kernel's trace record) of a gemm_classes (``traces``) or conv_layers
    (``model``) run's rows.
    """
    found = []
    for row in run["rows"]:
        traces = row.get("traces") or row.get("model") or []
        name = row.get("shape") or f"{row['name']} n{row.get('n', 1)}"
        found.append((name, [t for t in traces if t["trace"]]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="--out files of the two scripts")
    parser.add_argument("--fraction", type=float, default=0.25, help="of each kernel's time")
    parser.add_argument("--close", type=float, default=1.25, help="within this x the best")
    args = parser.parse_args()
    print("| workload | winner | winner early / best early | the others early / best early |")
    print("| --- | --- | --- | --- |")
    close = counted = 0
    for path in args.runs:
        for name, traces in workloads(json.loads(read_run(path))):
            if len(traces) < 2:
                continue
            final = {t["kernel"]: t["trace"][-1][2] for t in traces}
            early = {t["kernel"]: early_best(t["trace"], args.fraction) for t in traces}
            winner, best = min(final, key=lambda k: final[k]), min(early.values())
            ratio = early.get(winner, math.inf) / best
            counted, close = counted + 1, close + (ratio <= args.close)
            others = ", ".join(f"{k} {v / best:.2f}" for k, v in early.items() if k != winner)
            print(f"| {name} | {winner} | {ratio:.2f} | {others} |")
    print(f"\n{close} of {counted} winners within {args.close:g} x of the best after "
          f"{args.fraction:g} of their time")  # fmt: skip


if __name__ == "__main__":
    main()
