"""The benchmarks that run on a CPU, run small: a benchmark that stops working is noticed in CI,
not by the next person who needs its figures (benchmarks/service_db.py once stopped at a
device-limits change, and service_load.py's figures could not be made again).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from octune.db.store import Store

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.slow
def test_the_service_database_benchmark_builds_its_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'service.db'}"
    ran = subprocess.run([sys.executable, str(BENCHMARKS / "service_db.py"), url,
                          "--workloads", "3", "--per-session", "5"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with Store(url) as store:
        assert len(store.stored_devices()) == 4
        assert store.measurement_stamp() > 0
