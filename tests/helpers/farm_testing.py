"""Helpers of the tuning-farm tests: devices, workloads files, agents as processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import select

from helpers.cli_testing import OCTUNE
from octune.db.models import JobSession, MeasurementRow, TuningSession
from octune.db.server_store import ServerStore

#: Small shapes: candidates take well under a second on a CPU through PoCL.
WORKLOADS = [
    {"kernel": "gemm", "m": 16, "n": 16, "k": 16},
    {"kernel": "gemm", "m": 8, "n": 8, "k": 8},
]


def device_in(info) -> dict:
    fields = ("platform_name", "platform_version", "vendor", "name", "driver_version",
              "compute_units", "max_work_group_size", "local_mem_size", "global_mem_size",
              "device_type")  # fmt: skip
    return {name: getattr(info, name) for name in fields}


class Agent:
    """`octune agent` in a process group of its own (its measurer and builders too), so a
    SIGKILL takes the whole machine's worth of processes, as a crash would.
    """

    def __init__(self, server: str, token: str, log: Path, *flags: str) -> None:
        self.log = log
        # A cold PoCL program cache of its own: each candidate compiles, so a job is still
        # running when a test kills, freezes or cancels it (with programs cached by an earlier
        # test, a job of gemm_panel's measured all its candidates in about a second).
        pocl_cache = log.parent / f"{log.stem}-pocl-cache"
        env = {**os.environ, "COLUMNS": "200", "POCL_CACHE_DIR": str(pocl_cache)}
        with log.open("w") as sink:
            self.process = subprocess.Popen(
                [*OCTUNE, "agent", "--server", server, "--token", token, "--poll", "0.3",
                 "--workdir", str(log.parent / f"{log.stem}-work"), *flags],
                stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip

    def signal(self, number: int) -> None:
        os.killpg(self.process.pid, number)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            self.kill()


def wait_for(what: Callable[[], object], timeout: float = 120, every: float = 0.2) -> object:
    """``what()`` once it is truthy; a test that never gets there fails, it does not hang."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting after {timeout} s")
        time.sleep(every)


def job(server: str, job_id: int) -> dict:
    return httpx.get(f"{server}/v1/jobs/{job_id}", timeout=10).json()


def job_measurements(store: ServerStore, job_id: int) -> list[tuple[int, int, str, str]]:
    """(kernel version, workload, strategy, config key) of every measurement of the job."""
    query = (
        select(TuningSession.kernel_version_id, TuningSession.workload_id,
               TuningSession.strategy, MeasurementRow.config_key)
        .join(JobSession, JobSession.session_id == TuningSession.id)
        .join(MeasurementRow, MeasurementRow.session_id == TuningSession.id)
        .where(JobSession.job_id == job_id)
    )  # fmt: skip
    with store._session() as session:
        return [tuple(row) for row in session.execute(query)]


def session_statuses(store: ServerStore, job_id: int) -> list[str]:
    """The status of each tuning session uploaded for the job, oldest first."""
    query = (
        select(TuningSession.status)
        .join(JobSession, JobSession.session_id == TuningSession.id)
        .where(JobSession.job_id == job_id)
        .order_by(TuningSession.id)
    )
    with store._session() as session:
        return list(session.scalars(query))


def duplicates(measured: list[tuple[int, int, str, str]]) -> list[tuple]:
    """Configs that a job's search sessions measured more than once: a resumed job must
    never measure again what an earlier lease uploaded.
    """
    search = Counter(
        (kernel, workload, key) for kernel, workload, strategy, key in measured
        if strategy != "confirm"
    )  # fmt: skip
    return [item for item, count in search.items() if count > 1]
