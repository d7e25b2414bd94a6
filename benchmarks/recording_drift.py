"""Did the device stay steady while a space was recorded? A check before trusting a recording.

A recording keeps its configs in the order they were measured, in a random order of the space.
If the device ran slower for a while (another job on the same cores, heat), the configs
measured then look slow whatever they are, and the "best" configs are those measured in the
quiet minutes: no strategy can find them from the configs' features. This prints

- the sentinel's spread, for recordings that measured one fixed config before every config;
- the drift: per tenth of the measuring order, the median of (log time minus a cross-validated
  model's prediction from the config's features); a steady recording stays near 0;
- where the ten fastest configs were measured (per cent of the way through the recording).

    python benchmarks/recording_drift.py benchmarks/data/*.json.gz
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from lib.recordings import steadiness
from sklearn.ensemble import RandomForestRegressor
from sklearn.model_selection import cross_val_predict

from octune.replay.harness import RecordedSpace
from octune.tuner.cost_model import Features

TENTHS = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", type=Path, nargs="+")
    args = parser.parse_args()
    for path in args.recordings:
        recorded = RecordedSpace.load(path)
        table = recorded.table()
        x = Features(table.space).matrix(table.values[recorded.table_rows(table)], recorded.context)
        y = np.log(recorded.time_s)
        ok = np.isfinite(y)
        forest = RandomForestRegressor(n_estimators=100, max_features=0.5, random_state=0)
        predicted = cross_val_predict(forest, np.nan_to_num(x[ok], nan=-1.0), y[ok], cv=5)
        residual = np.full(len(y), np.nan)
        residual[ok] = y[ok] - predicted
        tenths = np.array_split(residual, TENTHS)
        drift = " ".join(f"{np.nanmedian(part):+.2f}" for part in tenths)
        fastest = np.argsort(np.where(ok, y, np.inf))[:10]
        where = " ".join(f"{100 * i / len(y):.0f}" for i in sorted(fastest))
        print(f"{path.name}: {len(y)} configs")
        if sentinel_s := recorded.notes.get("sentinel_s"):
            print(f"  {steadiness(sentinel_s)}")
        print(f"  drift (log residual per tenth of the measuring order): {drift}")
        print(f"  ten fastest measured at (% of the order): {where}")


if __name__ == "__main__":
    main()
