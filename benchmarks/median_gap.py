"""How sure a gap between two strategies' medians is: a bootstrap over seeds.

A replay's medians move with the seeds drawn (a recording with three configs within 95 % of its
best moves by ±8 at 40 seeds), so "fewer measurements than X" is a finding only when the
interval of the gap excludes 0. Reads the per-seed counts `benchmarks/replay.py --raw` writes:

    python benchmarks/median_gap.py raw.json model kt:bayes_opt --fraction 0.95
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

RESAMPLES = 10_000


def counts(reached: list[int | None], budget: int) -> np.ndarray:
    """Measurements to the level per seed; a seed that never got there counts as budget + 1."""
    return np.array([budget + 1 if n is None else n for n in reached], dtype=float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="a file written by replay.py --raw")
    parser.add_argument("first", help="strategy name, e.g. model")
    parser.add_argument("second", help="strategy name, e.g. kt:bayes_opt")
    parser.add_argument("--fraction", default="0.95", help="the level: fraction of the best")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for recording, replayed in json.loads(args.raw.read_text()).items():
        strategies, budget = replayed["reached"], replayed["budget"]
        if args.first not in strategies or args.second not in strategies:
            continue
        a = counts(strategies[args.first][args.fraction], budget)
        b = counts(strategies[args.second][args.fraction], budget)
        gaps = np.median(rng.choice(a, (RESAMPLES, len(a))), axis=1) - np.median(
            rng.choice(b, (RESAMPLES, len(b))), axis=1
        )
        low, high = np.percentile(gaps, [2.5, 97.5])
        print(
            f"{recording}: median {args.first} {np.median(a):g} ({len(a)} seeds), "
            f"{args.second} {np.median(b):g} ({len(b)}); gap {np.median(a) - np.median(b):+g}, "
            f"95 % interval {low:+g} to {high:+g}, "
            f"P({args.first} needs fewer) {np.mean(gaps < 0):.2f}"
        )


if __name__ == "__main__":
    main()
