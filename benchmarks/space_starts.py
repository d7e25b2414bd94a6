"""Configs a search measures first on a device type it knows nothing of (a space's ``starts:``),
chosen from measurements, in two steps:

``pool``: from stored tuning databases of devices of that type, each workload's fastest few
configs of each kernel (workloads of at least ``--min-flops``), legal as the spaces stand now.

``pick``: from a matrix of the pool measured on shapes of every kind (``starts_pool.py``, on
the device), a greedy facility location on the training shapes: each pick adds the most to
the sum, over those shapes, of the best ``fastest in the pool / its time`` among the picks. It
prints the picks as a space's ``starts:`` entry, and what the picks reach on the held-out
shapes, which took no part in choosing them.

    python benchmarks/space_starts.py pool /tmp/dbs/*.db --out pool.json
    python benchmarks/space_starts.py pick matrix.json.gz --eval 1500x2048x512 ...
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
from collections import defaultdict
from pathlib import Path

from lib.runs import read_run

from octune.catalogue.registry import load_kernel
from octune.tuner.cost_model import Context

KERNELS = ["gemm", "gemm_splitk_serial", "gemm_splitk"]


def pool(paths: list[Path], kernels: list[str], per_workload: int, min_flops: float,
         device_type: str) -> dict[str, list[dict[str, int]]]:  # fmt: skip
    """Each kernel's configs that were among a workload's ``per_workload`` fastest verified
    ones in any of the databases, legal now on the first database's device.
    """
    found: dict[str, dict[str, float]] = defaultdict(dict)
    limits = None
    for path in paths:
        with sqlite3.connect(path) as db:
            db.row_factory = sqlite3.Row
            device = db.execute("SELECT * FROM devices WHERE device_type = ?",
                                (device_type,)).fetchone()  # fmt: skip
            db.row_factory = None
            if device is None:
                continue
            if limits is None:  # as the search reads a stored device's
                limits = Context(dict(device)).limits()
            rows = db.execute(
                "SELECT kv.name, w.shape, m.config_key, MIN(m.median_s) FROM measurements m "
                "JOIN tuning_sessions s ON m.session_id = s.id "
                "JOIN kernel_versions kv ON s.kernel_version_id = kv.id "
                "JOIN workloads w ON s.workload_id = w.id JOIN devices d ON s.device_id = d.id "
                "WHERE m.status = 'ok' AND m.median_s > 0 AND d.device_type = ? "
                "AND w.problem = 'gemm' GROUP BY kv.name, w.key, m.config_key",
                (device_type,),
            ).fetchall()
        by_workload: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
        for kernel, shape, config, seconds in rows:
            s = json.loads(shape)
            if kernel in kernels and 2 * s["m"] * s["n"] * s["k"] >= min_flops:
                by_workload[kernel, shape].append((seconds, config))
        for (kernel, _), timed in by_workload.items():
            for seconds, config in sorted(timed)[:per_workload]:
                found[kernel][config] = min(seconds, found[kernel].get(config, math.inf))
    if limits is None:
        raise SystemExit(f"no {device_type} device in the databases: name databases tuned on one")
    chosen = {}
    for name in kernels:
        kernel = load_kernel(name)
        table = kernel.space.enumerate(limits)
        own = set(kernel.space.parameter_names)
        chosen[name] = [
            json.loads(key) for key in sorted(found[name])
            if set(json.loads(key)) == own and table.index_json(key) is not None
        ]  # fmt: skip
    return chosen


def pick(times: dict[str, list[float | None]], count: int) -> list[int]:
    """Up to ``count`` config indices, each adding most to the shapes' summed best score."""
    scores = {}
    for shape, row in times.items():
        fastest = min((t for t in row if t), default=None)
        if fastest:
            scores[shape] = [fastest / t if t else 0.0 for t in row]
    covered = dict.fromkeys(scores, 0.0)
    chosen: list[int] = []
    width = len(next(iter(scores.values())))
    for _ in range(count):
        gains = [
            sum(max(0.0, s[i] - covered[shape]) for shape, s in scores.items())
            if i not in chosen else -1.0
            for i in range(width)
        ]  # fmt: skip
        best = max(range(width), key=gains.__getitem__)
        if gains[best] <= 0:
            break
        chosen.append(best)
        covered = {shape: max(covered[shape], scores[shape][best]) for shape in scores}
    return chosen


def reach(times: dict[str, list[float | None]], chosen: list[int]) -> dict[str, float]:
    """Per shape, the pool's fastest over the picks' fastest (1.0: the picks hold it)."""
    found = {}
    for shape, row in times.items():
        fastest = min((t for t in row if t), default=None)
        picked = [row[i] for i in chosen if row[i]]
        found[shape] = fastest / min(picked) if fastest and picked else 0.0
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    make = steps.add_parser("pool")
    make.add_argument("databases", type=Path, nargs="+")
    make.add_argument("--kernels", nargs="+", default=KERNELS)
    make.add_argument("--per-workload", type=int, default=2)
    make.add_argument("--min-flops", type=float, default=1e8)
    make.add_argument("--device-type", default="gpu")
    make.add_argument("--out", type=Path, required=True)
    choose = steps.add_parser("pick")
    choose.add_argument("matrix", type=Path, help="starts_pool.py's --out")
    choose.add_argument("--count", type=int, default=6)
    choose.add_argument("--eval", nargs="*", default=[], help="held-out shapes: not for picking")
    args = parser.parse_args()
    if args.step == "pool":
        chosen = pool(args.databases, args.kernels, args.per_workload, args.min_flops,
                      args.device_type)  # fmt: skip
        args.out.write_text(json.dumps(chosen))
        print({name: len(configs) for name, configs in chosen.items()})
        return
    run = json.loads(read_run(args.matrix))
    for name, measured in run["kernels"].items():
        train = {s: t for s, t in measured["times"].items() if s not in args.eval}
        held = {s: t for s, t in measured["times"].items() if s in args.eval}
        chosen = pick(train, args.count)
        on_train, on_held = reach(train, chosen), reach(held, chosen)
        print(f"# {name}: {len(measured['configs'])} configs, {len(train)} training shapes; "
              f"the picks reach a median {sorted(on_train.values())[len(on_train) // 2]:.2f} "
              "of the pool's fastest there")  # fmt: skip
        for shape, ratio in sorted(on_held.items()):
            print(f"#   held out {shape}: {ratio:.2f}")
        for index in chosen:
            flow = ", ".join(f"{k}: {v}" for k, v in measured["configs"][index].items())
            print(f"    - {{{flow}}}")


if __name__ == "__main__":
    main()
