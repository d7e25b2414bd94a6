"""How many measurements each strategy needs on recorded spaces: ours, random, Kernel Tuner's.

Every strategy runs against the same recordings without a device, over many seeds: octune's
through the replay runner, Kernel Tuner's (pip install '.[bench]') through its own simulation
mode, fed a cache file written from the same recording. Prints, per recording, how many
measurements reach 90/95/99 % of the recorded best speed (median [quartiles], and how many
seeds got there within the budget), the model's own cost per round, and draws convergence
curves (median best-so-far speed over seeds) to a PNG.

    python benchmarks/replay.py benchmarks/data/pocl_gemm_128.json.gz --seeds 20 --png curves.png

"model+transfer" warm-starts from every other recording of the same kernel version (other
shapes on the same device, other devices): give several recordings to compare it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from lib.recordings import stored_history

from octune.core.results import HistoryRecord
from octune.replay.harness import RecordedSpace, ReplayRunner, replay, to_reach
from octune.tuner.strategies.model import ModelSearch
from octune.tuner.strategies.random import RandomSearch

FRACTIONS = (0.90, 0.95, 0.99)
#: A strategy under test: (seed, budget) -> (recorded times in measurement order, seconds
#: each propose took).
Run = Callable[[int, int], tuple[list[float], list[float]]]
KT_STRATEGIES = ("genetic_algorithm", "simulated_annealing", "pso", "bayes_opt")
#: Kernel Tuner's Bayesian optimisation refits a Gaussian process over all its evaluations
#: every step (cubic cost): it gets at most this many, and counts as not reaching beyond.
KT_BAYES_BUDGET = 300
#: Failed configs in Kernel Tuner's cache: it skips them like any failed compile or launch.
KT_FAILED = {"build_error": "CompilationFailedConfig"}


class Timed:
    """Wraps a strategy's propose to time it: the model's train + propose cost per round."""

    def __init__(self, strategy: ModelSearch) -> None:
        self.strategy = strategy
        self.seconds: list[float] = []
        original = strategy.propose

        def propose(count: int) -> list[int]:
            started = time.perf_counter()
            rows = original(count)
            self.seconds.append(time.perf_counter() - started)
            return rows

        strategy.propose = propose  # type: ignore[method-assign]


def ours(
    recorded: RecordedSpace, history: list[HistoryRecord], model: str, window: int
) -> dict[str, Run]:
    """octune's strategies: seed, budget -> (trace, seconds per propose), ``window`` candidates
    in flight as in a session with half that many builders."""
    table = recorded.table()
    runner = ReplayRunner(recorded)
    best = recorded.best_s

    def blind(seed: int, budget: int) -> tuple[list[float], list[float]]:
        return replay(RandomSearch(table, seed=seed), runner, budget, window, stop_s=best), []

    def learned(
        records: list[HistoryRecord],
    ) -> Run:
        def run(seed: int, budget: int) -> tuple[list[float], list[float]]:
            strategy = ModelSearch(
                table, seed=seed, target=recorded.context, history=records, model=model
            )
            timed = Timed(strategy)
            return replay(strategy, runner, budget, window, stop_s=best), timed.seconds

        return run

    strategies = {"random": blind, "model": learned([])}
    if history:
        strategies["model+transfer"] = learned(history)
    return strategies


def kernel_tuner(recorded: RecordedSpace, directory: Path) -> dict[str, Run]:
    """Kernel Tuner's strategies in simulation mode over a cache written from the recording."""
    from kernel_tuner import tune_kernel

    names = recorded.parameters
    cache = {}
    for row, status, seconds in zip(
        recorded.configs.tolist(), recorded.status, recorded.time_s.tolist(), strict=True
    ):
        entry: dict[str, object] = dict(zip(names, row, strict=True))
        if status == "ok":
            entry.update(time=seconds * 1e3, times=[seconds * 1e3])
        else:
            entry["time"] = KT_FAILED.get(status, "RuntimeFailedConfig")
        entry.update(compile_time=0.0, verification_time=0.0, benchmark_time=0.0)
        cache[",".join(map(str, row))] = entry
    values = {name: recorded.values[name] for name in names}
    path = directory / f"kt_{recorded.device['fingerprint']}_{id(recorded)}.json"
    shape = recorded.workload["shape"]
    path.write_text(
        json.dumps(
            {
                "device_name": recorded.device["name"],
                "kernel_name": recorded.kernel["name"],
                "problem_size": [shape.get("m", 1), shape.get("n", 1)],
                "tune_params_keys": list(names),
                "tune_params": values,
                "objective": "time",
                "cache": cache,
            }
        )
    )
    # Every recorded config is legal, failed ones too (they cost a measurement, as for us).
    # One restriction per prefix of the parameters, so that Kernel Tuner's solver prunes a
    # branch as soon as no recorded config starts that way: a random sample of a whole space
    # (a product of 10^7 and more) then builds in a second instead of never.
    rows = recorded.configs.tolist()
    restrictions = [
        f"({', '.join(names[:size])},) in {{{', '.join(map(str, prefixes))}}}"
        for size in range(1, len(names) + 1)
        for prefixes in [sorted({tuple(row[:size]) for row in rows})]
    ]

    def strategy(name: str) -> Run:
        def run(seed: int, budget: int) -> tuple[list[float], list[float]]:
            limit = min(budget, KT_BAYES_BUDGET) if name == "bayes_opt" else budget
            random.seed(seed)
            np.random.seed(seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results, _ = tune_kernel(
                    recorded.kernel["name"], "", tuple(shape.get(d, 1) for d in "mn"), [],
                    values, restrictions=restrictions, strategy=name,
                    strategy_options={"max_fevals": limit}, cache=str(path),
                    simulation_mode=True, quiet=True, verbose=False,
                )  # fmt: skip
            seen, trace = set(), []
            for result in results:  # unique configs in the order first measured
                key = ",".join(str(result[n]) for n in names)
                if key in seen or key not in cache:
                    continue
                seen.add(key)
                value = cache[key]["time"]
                trace.append(value / 1e3 if isinstance(value, float) else math.nan)
            return trace[:budget], []

        return run

    return {f"kt:{name}": strategy(name) for name in KT_STRATEGIES}


def summary(reached: Sequence[int | None], budget: int) -> str:
    hits = [r for r in reached if r is not None]
    censored = [r if r is not None else budget + 1 for r in reached]
    median = statistics.median(censored)
    q1, _, q3 = statistics.quantiles(censored, n=4, method="inclusive")
    shown = f"{median:.0f}" if median <= budget else f">{budget}"
    return f"{shown} [{q1:.0f}-{q3:.0f}] {len(hits)}/{len(reached)}"


def curve(trace: Sequence[float], best: float, budget: int) -> np.ndarray:
    """Best-so-far speed relative to the recorded best after each measurement."""
    speeds = np.nan_to_num(best / np.asarray(trace, dtype=float), nan=0.0)
    so_far = np.maximum.accumulate(speeds) if len(speeds) else np.zeros(1)
    return np.pad(so_far, (0, max(0, budget - len(so_far))), mode="edge")[:budget]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", type=Path, nargs="+")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=None, help="default: min(space, 2000)")
    parser.add_argument("--model", default="xgb-regression")
    parser.add_argument("--only", nargs="*", default=None, help="strategy names to run")
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument(
        "--raw",
        type=Path,
        default=None,
        help="write each seed's measurements to each fraction (null: never) to this JSON file "
        "(benchmarks/median_gap.py reads it)",
    )
    parser.add_argument(
        "--window", type=int, default=1,
        help="octune's candidates in flight, fixed: 1 on a CPU device; a GPU session starts at "
        "4 and widens up to 32 with the H100 machine's 16 builders (proposals come half a "
        "window at a time, the other half still unmeasured)",
    )  # fmt: skip
    parser.add_argument(
        "--history-db", type=Path, default=None,
        help="model+transfer learns from this tuning database (SQLite; the recording's own "
        "shape left out) instead of the other recordings, e.g. the 55-shape H100 grid: "
        "gunzip -k benchmarks/data/h100_grid/grid.db.gz",
    )  # fmt: skip
    args = parser.parse_args()

    recordings = [RecordedSpace.load(path) for path in args.recordings]
    panels = []
    raw: dict[str, dict[str, Any]] = {}  # per recording: its budget, each seed's counts
    with tempfile.TemporaryDirectory() as scratch:
        for path, recorded in zip(args.recordings, recordings, strict=True):
            if args.history_db is None:
                history = [
                    record
                    for other in recordings
                    if other is not recorded and other.kernel["sha256"] == recorded.kernel["sha256"]
                    for record in other.records()
                ]
            else:
                history = stored_history(args.history_db, recorded)
            budget = args.budget or min(len(recorded), 2000)
            per_measurement = recorded.notes.get("seconds", 0.0) / max(len(recorded), 1)
            print(
                f"\n### {path.name}: {recorded.device['name']}, {recorded.workload['shape']}, "
                f"{len(recorded)} configs, {sum(s == 'ok' for s in recorded.status)} ok, "
                f"budget {budget}, {args.seeds} seeds, model {args.model}, window {args.window}"
            )
            print("| strategy | to 90 % | to 95 % | to 99 % | train+propose per round |")
            print("| --- | --- | --- | --- | --- |")
            strategies = ours(recorded, history, args.model, args.window)
            if args.only is None or set(args.only) - set(strategies):  # Kernel Tuner's wanted
                strategies.update(kernel_tuner(recorded, Path(scratch)))
            curves = {}
            for name, run in strategies.items():
                if args.only is not None and name not in args.only:
                    continue
                reached: dict[float, list[int | None]] = {f: [] for f in FRACTIONS}
                rounds: list[float] = []
                traces = []
                started = time.perf_counter()
                for seed in range(args.seeds):
                    trace, seconds = run(seed, budget)
                    traces.append(trace)
                    rounds.extend(seconds)
                    for fraction in FRACTIONS:
                        reached[fraction].append(to_reach(trace, recorded.best_s, fraction))
                counts = raw.setdefault(path.name, {"budget": budget, "reached": {}})["reached"]
                counts[name] = {str(f): reached[f] for f in FRACTIONS}
                cost = f"{statistics.mean(rounds) * 1e3:.0f} ms" if rounds else "-"
                cells = " | ".join(summary(reached[f], budget) for f in FRACTIONS)
                print(f"| {name} | {cells} | {cost} |", flush=True)
                curves[name] = np.median(
                    [curve(t, recorded.best_s, budget) for t in traces], axis=0
                )
                elapsed = time.perf_counter() - started
                print(f"<!-- {name}: {elapsed:.0f} s for {args.seeds} seeds -->", flush=True)
            if per_measurement:
                print(f"recorded cost per measurement: {per_measurement:.1f} s (build + run)")
            panels.append((path.name, curves))
    if args.raw:
        args.raw.write_text(json.dumps(raw, indent=1))
    if args.png:
        plot(panels, args.png)
        print(f"wrote {args.png}")


def plot(panels: list[tuple[str, dict[str, np.ndarray]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for axis, (title, curves) in zip(axes[0], panels, strict=True):
        for name, values in curves.items():
            axis.plot(np.arange(1, len(values) + 1), values, label=name)
        axis.set_xscale("log")
        axis.set_ylim(0, 1.02)
        axis.axhline(0.95, color="grey", linewidth=0.5, linestyle="--")
        axis.set_title(title)
        axis.set_xlabel("measurements")
        axis.set_ylabel("best speed so far / recorded best (median of seeds)")
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
