"""An offline stand-in for the live 4096³ search on the H100, whole space included.

The recorded samples and sub-grids hold a few hundred to a few thousand configs, so a replay
never meets what traps the live search: the 100,814 configs of the whole space, where the model
can spend a hundred measurements on the minor settings of one tile family. This script fills the
whole space instead: every config measured at 4096³ (the random sample and every live run in
benchmarks/data/h100_live, median speed per config) keeps its measured time, and a random forest
fitted to those measurements fills in the rest (failures from a forest classifier). A forest
never predicts beyond its training targets, so every config above the level is a measured one.

    python benchmarks/live_proxy.py --seeds 40 --window 8
    python benchmarks/live_proxy.py --seeds 40 --window 8 --history-db grid.db

prints, per seed, how many measurements the model search needs to reach --level (CLBlast's
43.6 TFLOP/s on this device), and how many seeds get there within --budget.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

from octune.replay.harness import RecordedSpace, ReplayRunner, replay, to_reach
from octune.tuner.cost_model import Features
from octune.tuner.strategies.model import ModelSearch

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "h100_gemm_samples" / "h100_gemm_NN_4096x4096x4096.json.gz"
LIVE = DATA / "h100_live"


def measured(sample: RecordedSpace) -> tuple[dict[tuple[int, ...], float], dict[tuple, str]]:
    """Median GFLOP/s of every config measured at the sample's shape, and the status of those
    that only ever failed."""
    flops = sample.workload["flops"]
    speeds: dict[tuple[int, ...], list[float]] = defaultdict(list)
    failed: dict[tuple[int, ...], str] = {}
    recorded = zip(sample.configs.tolist(), sample.status, sample.time_s.tolist(), strict=True)
    runs = [
        [
            (dict(zip(sample.parameters, row, strict=True)), status, flops / t / 1e9)
            for row, status, t in recorded
        ]
    ]
    for path in sorted(LIVE.glob("*4096*.json")):
        runs += [row.get("measurements", []) for row in json.loads(path.read_text())["rows"]]
    for run in runs:
        for config, status, gflops in run:
            key = tuple(int(config[name]) for name in sample.parameters)
            if status == "ok":
                speeds[key].append(gflops)
            else:
                failed.setdefault(key, status)
    medians = {key: statistics.median(values) for key, values in speeds.items()}
    return medians, {key: status for key, status in failed.items() if key not in medians}


def whole_space(sample: RecordedSpace) -> RecordedSpace:
    """The sample's recording grown to the whole space: measured where measured, a forest's
    guess elsewhere."""
    medians, failed = measured(sample)
    space = sample.space()
    table = space.enumerate(sample.limits)
    features = Features(space)
    x = np.nan_to_num(features.matrix(table.values, sample.context), nan=-1.0)
    names = sample.parameters
    ok_rows, bad_rows = (
        np.array([table.index(dict(zip(names, key, strict=True))) for key in keys], dtype=np.int64)
        for keys in (medians, failed)
    )
    measured_s = sample.workload["flops"] / np.array(list(medians.values())) / 1e9
    speed = RandomForestRegressor(
        n_estimators=200, min_samples_leaf=2, max_features=0.5, n_jobs=-1, random_state=0
    ).fit(x[ok_rows], np.log(measured_s))
    seen = np.concatenate([ok_rows, bad_rows])
    columns = features.config_columns
    fails = RandomForestClassifier(
        n_estimators=200, min_samples_leaf=2, n_jobs=-1, random_state=0
    ).fit(x[seen][:, columns], np.r_[np.zeros(len(ok_rows)), np.ones(len(bad_rows))])
    time_s = np.exp(speed.predict(x))
    failing = fails.predict_proba(x[:, columns])[:, 1] > 0.5
    status = np.where(failing, "launch_error", "ok").astype(object)
    time_s[failing] = math.nan
    time_s[ok_rows] = measured_s
    status[ok_rows] = "ok"
    time_s[bad_rows] = math.nan
    status[bad_rows] = list(failed.values())
    sample.configs, sample.status, sample.time_s = table.values, status.tolist(), time_s
    sample.notes = {
        "sample": "whole space: measured configs at their median speed, a random forest elsewhere",
        "measured_configs": len(medians) + len(failed),
    }
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--window", type=int, default=8, help="candidates in flight")
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--level", type=float, default=43_600, help="GFLOP/s to reach")
    parser.add_argument("--history-db", type=Path, default=None, help="transfer from this DB")
    parser.add_argument("--model", default="xgb-regression")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "octune_h100_4096_whole_proxy.json.gz",
        help="the stand-in, built once and reused",
    )
    args = parser.parse_args()
    if args.cache.is_file():
        recorded = RecordedSpace.load(args.cache)
    else:
        recorded = whole_space(RecordedSpace.load(SAMPLE))
        recorded.save(args.cache)
    history = []
    if args.history_db:
        from lib.recordings import stored_history

        history = stored_history(args.history_db, recorded)
    table, runner = recorded.table(), ReplayRunner(recorded)
    level_s = recorded.workload["flops"] / (args.level * 1e9)
    reached = []
    for seed in range(args.seeds):
        search = ModelSearch(
            table, seed=seed, target=recorded.context, history=history, model=args.model
        )
        trace = replay(search, runner, args.budget, args.window, stop_s=level_s)
        hit = to_reach(trace, level_s, 1.0)
        reached.append(hit)
        print(f"seed {seed}: {hit or '-'}", flush=True)
    censored = [hit or args.budget + 1 for hit in reached]
    print(
        f"{len(recorded)} configs ({recorded.notes.get('measured_configs', '?')} measured), "
        f"window {args.window}, history {len(history)} records: "
        f"{sum(hit is not None for hit in reached)} / {args.seeds} seeds reach "
        f"{args.level / 1e3:.1f} TFLOP/s within {args.budget}, median {statistics.median(censored)}"
    )


if __name__ == "__main__":
    main()
