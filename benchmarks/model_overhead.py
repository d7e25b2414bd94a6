"""What the `model` strategy costs per round on a whole GEMM space, training and proposing apart.

The space is every legal GEMM config for a recorded device's limits (the H100's: 100,814), not
just the recorded sample, so each round scores what a real session scores. Results come from
the recording where the config was recorded; every other config gets the result (time or
failure) of its nearest recorded config, by Euclidean distance over log2 parameter values: a
deterministic stand-in with the recording's spread, so the model trains on realistic targets.

The strategy is driven the way ``run_session`` drives it: ``propose(1)`` while fewer than
``--window`` candidates are in flight (the session's window is twice its builder jobs, 1 inline),
then ``observe`` of the oldest. One round is one ``propose`` call; "train" is the time spent
refitting the model inside it, "score + propose" the rest (ranking the pool, picking).

    python benchmarks/model_overhead.py --budget 2000 --seeds 3

Prints a markdown table: mean milliseconds per round over rounds 1-N (``--rounds``: 100, 500
and 2,000), their total seconds and refits, and measurements to 95 % of the best stand-in speed
(a check that a cheaper model still searches as well; ``--pool 20000`` scores a sample).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from sklearn.neighbors import NearestNeighbors

from octune.catalogue.registry import load_kernel
from octune.catalogue.space import ConfigTable
from octune.core.results import Measurement, Status
from octune.replay.harness import RecordedSpace, to_reach
from octune.tuner.strategies.model import POOL, ModelSearch

DATA = Path(__file__).resolve().parent / "data" / "h100_gemm_samples"
RECORDING = DATA / "h100_gemm_NN_1024x1024x1024.json.gz"
ROUNDS = (100, 500, 2000)


@dataclass
class Run:
    """Per-round seconds of one seed's run, and its measured times in order (NaN: failed)."""

    train: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    trace: list[float] = field(default_factory=list)
    fits: list[int] = field(default_factory=list)  # refits so far, after each round


def stand_in(recorded: RecordedSpace, table: ConfigTable) -> tuple[list[str], NDArray[np.float64]]:
    """Status and time of every row: recorded, else the nearest recorded config's."""
    order = [recorded.parameters.index(name) for name in table.names]
    points = np.log2(recorded.configs[:, order].astype(float) + 1)
    search = NearestNeighbors(n_neighbors=1, algorithm="kd_tree").fit(points)
    nearest = search.kneighbors(np.log2(table.values.astype(float) + 1), return_distance=False)
    nearest = nearest[:, 0]
    return [recorded.status[i] for i in nearest], recorded.time_s[nearest]


def drive(
    strategy: ModelSearch,
    table: ConfigTable,
    outcome: tuple[list[str], NDArray[np.float64]],
    flops: int,
    budget: int,
    window: int,
) -> Run:
    """Propose and observe like the session does, timing each round's propose and refit."""
    run = Run()
    train = strategy._train
    spent = [0.0]

    def timed_train() -> None:
        started = time.perf_counter()
        train()
        spent[0] += time.perf_counter() - started

    strategy._train = timed_train  # type: ignore[method-assign]
    status, times = outcome
    pending: deque[int] = deque()
    while len(run.trace) < budget:
        while len(pending) < window and len(run.trace) + len(pending) < budget:
            spent[0] = 0.0
            started = time.perf_counter()
            rows = strategy.propose(1)
            run.total.append(time.perf_counter() - started)
            run.train.append(spent[0])
            run.fits.append(strategy.fits)
            if not rows:
                break
            pending.extend(rows)
        if not pending:
            break
        row = pending.popleft()
        config = table.config(row)
        if status[row] == Status.OK.value:
            measurement = Measurement(config, Status.OK, times_s=(float(times[row]),), flops=flops)
        else:
            measurement = Measurement(config, Status(status[row]), flops=flops)
        strategy.observe(row, measurement)
        run.trace.append(measurement.median_s if measurement.ok else math.nan)
    return run


def table_rows(runs: list[Run], rounds: list[int], best_s: float) -> list[str]:
    """Markdown rows: per-round means over rounds 1-N for each N, over all seeds."""
    lines = []
    for window in rounds:
        train = statistics.fmean(s for r in runs for s in r.train[:window])
        total = statistics.fmean(s for r in runs for s in r.total[:window])
        fits = statistics.fmean(r.fits[min(window, len(r.fits)) - 1] for r in runs)
        seconds = statistics.fmean(sum(r.total[:window]) for r in runs)
        lines.append(
            f"| 1-{window:,} | {train * 1e3:.1f} | {(total - train) * 1e3:.1f} | "
            f"**{total * 1e3:.1f}** | {seconds:.1f} | {fits:.0f} |"
        )
    reached = [to_reach(r.trace, best_s, 0.95) for r in runs]
    got = sorted(n for n in reached if n is not None)
    median = f"{statistics.median(got):.0f}" if got else "-"
    lines.append(f"\nto 95 % of the best: median {median}, reached by {len(got)}/{len(runs)} seeds")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", nargs="?", type=Path, default=RECORDING)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, nargs="+", default=ROUNDS, help="1-N rows")
    parser.add_argument("--window", type=int, default=1, help="candidates in flight")
    parser.add_argument(
        "--pool", type=int, default=POOL, help="configs scored per refit (300000: all)"
    )
    args = parser.parse_args()

    recorded = RecordedSpace.load(args.recording)
    kernel = load_kernel("gemm")
    if kernel.sha256 != recorded.kernel["sha256"]:
        print(f"note: {args.recording.name} was recorded with another kernel version")
    table = kernel.space.enumerate(recorded.limits)
    outcome = stand_in(recorded, table)
    flops = int(recorded.workload["flops"])
    runs = []
    for seed in range(args.seeds):
        strategy = ModelSearch(table, seed=seed, target=recorded.context, pool=args.pool)
        runs.append(drive(strategy, table, outcome, flops, args.budget, args.window))
    shape = "x".join(str(recorded.workload["shape"][d]) for d in "mnk")
    print(
        f"{len(table):,} configs ({recorded.device['name']} limits, {shape}), "
        f"{args.seeds} seeds, window {args.window}, pool {args.pool:,}\n"
    )
    print("| rounds | train ms/round | score + propose ms/round | total ms/round | s | refits |")
    print("| --- | --- | --- | --- | --- | --- |")
    rounds = sorted({min(n, args.budget) for n in args.rounds})
    print("\n".join(table_rows(runs, rounds, recorded.best_s)))


if __name__ == "__main__":
    main()
