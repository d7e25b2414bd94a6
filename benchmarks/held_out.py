"""A copy of a tuning database in which one workload was never tuned: what the leave-one-out
benchmarks (untuned_shapes.py, model_live.py) ask the lookup and the cost model about.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path


def without_workload(source: Path, copy: Path, workload_key: str) -> Path:
    shutil.copyfile(source, copy)
    with sqlite3.connect(copy) as connection:
        connection.execute(
            "DELETE FROM measurements WHERE session_id IN (SELECT s.id FROM tuning_sessions s "
            "JOIN workloads w ON s.workload_id = w.id WHERE w.key = ?)",
            (workload_key,),
        )
    return copy
