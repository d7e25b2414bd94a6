"""Configs a search measures first on a device type it knows nothing of (a space's ``starts:``),
chosen from measurements, in two steps:

``pool``: from stored tuning databases of devices of that type, each workload's fastest few
configs of each kernel (workloads of at least ``--min-flops``), legal as the spaces stand now,
at most ``--most``, taken from each batch size in turn (GEMM: one).

``starts_pool.py`` measures the pool on GEMM shapes or conv layers (``NET@BATCH``).

``pick``: from a matrix of the pool measured on shapes of every kind (``starts_pool.py``, on
the device), a greedy facility location on the training shapes: each pick adds the most to
the sum, over those shapes, of the best ``fastest in the pool / its time`` among the picks. It
prints the picks as a space's ``starts:`` entry, and what the picks reach on the held-out
shapes, which took no part in choosing them; with ``--against``, what a shipped starts file
reaches beside them, set by set.

    python benchmarks/space_starts.py pool /tmp/dbs/*.db --out pool.json
    python benchmarks/space_starts.py pool /tmp/dbs/*.db --kernels conv2d_igemm conv2d_1x1 \
        --per-workload 1 --min-flops 1e7 --most 24 --out conv_pool.json
    python benchmarks/space_starts.py pool /tmp/dbs/*.db --kernels conv2d_direct --grouped \
        --extend conv_pool.json --out grouped_pool.json
    python benchmarks/space_starts.py pick matrix.json.gz --eval 1500x2048x512 ...
    python benchmarks/space_starts.py pick b1.json.gz b16.json.gz --eval held_out_2@1 ...
    python benchmarks/space_starts.py pick b1.json.gz b16.json.gz --count 8 \
        --eval grouped_held@1 grouped_held@16 --against search_spaces/starts/conv2d_direct.yaml
"""

from __future__ import annotations

import argparse
import itertools
import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import yaml
from lib.runs import read_run

from octune.catalogue.registry import family, load_kernel
from octune.core.errors import WorkloadError
from octune.tuner.cost_model import Context

KERNELS = ["gemm", "gemm_splitk_serial", "gemm_splitk"]


def pool(paths: list[Path], kernels: list[str], per_workload: int, min_flops: float,
         device_type: str, most: int, grouped: bool = False,
         extend: dict[str, list[dict[str, int]]] | None = None,
         ) -> dict[str, list[dict[str, int]]]:  # fmt: skip
    """Each kernel's configs that were among a workload's ``per_workload`` fastest verified
    ones in any of the databases, legal now on the first database's device: at most ``most``,
    taken from each batch size in turn (a conv's tiles at batch 16 are not batch 1's), those
    fast on the most workloads first. ``grouped``: grouped convs' workloads only (neither one
    group nor depthwise). ``extend``: an earlier pool, whose configs come first and stay, so
    that its picks can be picked again beside the new ones.
    """
    # kernel: batch: config: workloads it is among the fastest on
    found: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
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
                "SELECT kv.name, w.problem, w.shape, w.dtype, m.config_key, MIN(m.median_s) "
                "FROM measurements m JOIN tuning_sessions s ON m.session_id = s.id "
                "JOIN kernel_versions kv ON s.kernel_version_id = kv.id "
                "JOIN workloads w ON s.workload_id = w.id JOIN devices d ON s.device_id = d.id "
                "WHERE m.status = 'ok' AND m.median_s > 0 AND d.device_type = ? "
                "GROUP BY kv.name, w.key, m.config_key",
                (device_type,),
            ).fetchall()
        by_workload: dict[tuple[str, int, str], list[tuple[float, str]]] = defaultdict(list)
        for kernel, problem, shape, dtype, config, seconds in rows:
            if kernel not in kernels or problem != load_kernel(kernel).space.problem:
                continue
            sizes = json.loads(shape)
            if grouped and not 1 < sizes.get("groups", 1) < sizes.get("c", 0):
                continue
            try:
                flops = family(problem).workload(sizes, dtype).flops
            except WorkloadError:  # a shape an older version of the family took
                continue
            if flops >= min_flops:
                by_workload[kernel, sizes.get("n", 1), shape].append((seconds, config))
        for (kernel, batch, _), timed in by_workload.items():
            for _, config in sorted(timed)[:per_workload]:
                counts = found[kernel][batch]
                counts[config] = counts.get(config, 0) + 1
    if limits is None:
        raise SystemExit(f"no {device_type} device in the databases: name databases tuned on one")
    chosen = {}
    for name in kernels:
        kernel = load_kernel(name)
        table = kernel.space.enumerate(limits)
        first = {p.name: p.values[0] for p in kernel.space.parameters}
        ranked = [sorted(counts, key=lambda key: -counts[key])
                  for counts in found[name].values()]  # fmt: skip
        earlier = (extend or {}).get(name, [])
        chosen[name], room = list(earlier), len(earlier) + most
        for key in itertools.chain.from_iterable(itertools.zip_longest(*ranked)):
            # a parameter added since at its first value
            config = {**first, **json.loads(key)} if key else {}
            fresh = config.keys() == first.keys() and config not in chosen[name]
            if len(chosen[name]) < room and fresh and table.index(config) is not None:
                chosen[name].append(config)
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


def compare(measured: dict, chosen: list[int], shipped: list[dict[str, int]]) -> None:
    """Per shape set (a conv layer set, ``NET@BATCH``; a GEMM shape alone), the median and
    worst of what the picks and the ``shipped`` starts (those in the pool) reach.
    """
    configs = measured["configs"]
    others = [configs.index(c) for c in shipped if c in configs]
    print(f"#   against: {len(others)} of {len(shipped)} starts in the pool")
    sets: dict[str, dict[str, list[float | None]]] = defaultdict(dict)
    for shape, row in measured["times"].items():
        sets[shape.split(" ")[0]][shape] = row
    for name, times in sorted(sets.items()):
        parts = []
        for label, indices in (("picks", chosen), ("against", others)):
            found = sorted(reach(times, indices).values())
            parts.append(f"{label} median {found[len(found) // 2]:.2f}, worst {found[0]:.2f}")
        print(f"#   {name} ({len(times)}): " + "; ".join(parts))


def held_out(key: str, named: list[str]) -> bool:
    """Whether a matrix's shape is one of ``named``: a GEMM shape, or a conv layer set
    (``NET@BATCH``, the start of its layers' keys).
    """
    return key in named or key.split(" ")[0] in named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    make = steps.add_parser("pool")
    make.add_argument("databases", type=Path, nargs="+")
    make.add_argument("--kernels", nargs="+", default=KERNELS)
    make.add_argument("--per-workload", type=int, default=2)
    make.add_argument("--min-flops", type=float, default=1e8)
    make.add_argument("--device-type", default="gpu")
    make.add_argument("--most", type=int, default=1000, help="configs per kernel at most")
    make.add_argument("--grouped", action="store_true", help="grouped convs' workloads only")
    make.add_argument("--extend", type=Path, help="an earlier pool: its configs first")
    make.add_argument("--out", type=Path, required=True)
    choose = steps.add_parser("pick")
    choose.add_argument("matrix", type=Path, nargs="+", help="starts_pool.py's --out files")
    choose.add_argument("--count", type=int, default=6)
    choose.add_argument(
        "--eval",
        nargs="*",
        default=[],
        help="held-out shapes or conv layer sets (NET@BATCH): not for picking",
    )
    choose.add_argument(
        "--against", type=Path,
        help="a starts file (search_spaces/starts/K.yaml): what its --device-type list reaches, "
             "set by set, beside the picks",
    )  # fmt: skip
    choose.add_argument("--device-type", default="gpu")
    args = parser.parse_args()
    if args.step == "pool":
        earlier = json.loads(read_run(args.extend)) if args.extend else None
        chosen = pool(args.databases, args.kernels, args.per_workload, args.min_flops,
                      args.device_type, args.most, args.grouped, earlier)  # fmt: skip
        args.out.write_text(json.dumps(chosen))
        print({name: len(configs) for name, configs in chosen.items()})
        return
    kernels: dict[str, dict] = {}  # matrices of one pool on several shape sets, merged
    for path in args.matrix:
        for name, measured in json.loads(read_run(path))["kernels"].items():
            merged = kernels.setdefault(name, {"configs": measured["configs"], "times": {}})
            if merged["configs"] != measured["configs"]:
                raise SystemExit(f"{path}: {name}'s configs are another pool's")
            merged["times"].update(measured["times"])
    for name, measured in kernels.items():
        held = {s: t for s, t in measured["times"].items() if held_out(s, args.eval)}
        train = {s: t for s, t in measured["times"].items() if s not in held}
        chosen = pick(train, args.count)
        on_train, on_held = reach(train, chosen), reach(held, chosen)
        print(f"# {name}: {len(measured['configs'])} configs, {len(train)} training shapes; "
              f"the picks reach a median {sorted(on_train.values())[len(on_train) // 2]:.2f} "
              "of the pool's fastest there")  # fmt: skip
        for shape, ratio in sorted(on_held.items()):
            print(f"#   held out {shape}: {ratio:.2f}")
        if args.against is not None:
            shipped = yaml.safe_load(args.against.read_text()).get(args.device_type, [])
            compare(measured, chosen, shipped)
        for index in chosen:
            flow = ", ".join(f"{k}: {v}" for k, v in measured["configs"][index].items())
            print(f"    - {{{flow}}}")


if __name__ == "__main__":
    main()
