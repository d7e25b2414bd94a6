"""Recorded spaces (``octune.replay``): the stored history a recording's replay transfers from, and
how steady the device stayed while one was recorded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from octune.core.results import HistoryRecord
from octune.db.store import Store
from octune.replay.harness import RecordedSpace


def stored_history(database: Path, recorded: RecordedSpace) -> list[HistoryRecord]:
    """Every stored measurement of the recording's kernel version but those of its shape."""
    if not database.is_file():
        raise SystemExit(f"no tuning database at {database}: give an SQLite file")
    shape = recorded.workload["shape"]
    store = Store(f"sqlite:///{database}")
    return [
        record
        for record in store.history(recorded.kernel["name"], recorded.kernel["sha256"])
        if any(record.workload.get(name) != value for name, value in shape.items())
    ]


def steadiness(sentinel_s: list[float]) -> str:
    """How much the sentinel's time moved over the recording: 5th to 95th percentile."""
    times = np.asarray([t for t in sentinel_s if np.isfinite(t)])
    if not len(times):
        return "no sentinel times"
    low, median, high = np.percentile(times, [5, 50, 95])
    return f"sentinel median {median * 1e3:.3f} ms, 5-95 % spread {high / low:.3f}x"
