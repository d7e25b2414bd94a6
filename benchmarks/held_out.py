"""A copy of a tuning database in which some workloads were never tuned: what the leave-one-out
benchmarks (untuned_shapes.py, model_live.py) ask the lookup and the cost model about.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterable
from pathlib import Path


def without_workloads(source: Path, copy: Path, workload_keys: Iterable[str]) -> Path:
    shutil.copyfile(source, copy)
    with sqlite3.connect(copy) as connection:
        connection.executemany(
            "DELETE FROM measurements WHERE session_id IN (SELECT s.id FROM tuning_sessions s "
            "JOIN workloads w ON s.workload_id = w.id WHERE w.key = ?)",
            [(key,) for key in workload_keys],
        )
    return copy
