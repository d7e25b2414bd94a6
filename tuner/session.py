"""A tuning session: enumerate the space, let a strategy pick, measure, store every result.

Each measurement is committed before the next candidate starts, so an interrupted session
keeps all it measured, and a repeated session skips configs already stored for the same
device, kernel version and workload.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version

from octune.db.store import Store
from octune.tuner.device import DeviceInfo
from octune.tuner.errors import OctuneError
from octune.tuner.kernels import KernelSpec
from octune.tuner.measure import Runner
from octune.tuner.results import Measurement, config_key
from octune.tuner.space import ConfigTable
from octune.tuner.strategies.base import get_strategy
from octune.tuner.workloads import Workload

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in '90s', '30m', '1h30m' or '8h'."""
    compact = text.replace(" ", "").lower()
    parts = _DURATION.findall(compact)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise OctuneError(f"cannot read duration '{text}': write it like 90s, 30m, 1h30m or 8h")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


@dataclass(frozen=True)
class Budget:
    """When to stop: after `candidates` measurements or `seconds` of wall time, whichever first."""

    candidates: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.candidates is not None and self.candidates < 1:
            raise OctuneError(f"budget of {self.candidates} candidates: use --budget 1 or more")
        if self.seconds is not None and self.seconds <= 0:
            raise OctuneError("time budget must be positive: use e.g. --time 30m")

    def spent(self, measured: int, elapsed: float) -> bool:
        return (self.candidates is not None and measured >= self.candidates) or (
            self.seconds is not None and elapsed >= self.seconds
        )


@dataclass
class Progress:
    """What a progress display needs after each measurement."""

    space_size: int
    already_measured: int
    tried: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    best: Measurement | None = None

    def record(self, measurement: Measurement) -> None:
        self.tried += 1
        if not measurement.ok:
            self.failures[measurement.status.value] += 1
        elif self.best is None or (measurement.median_s or 0) < (self.best.median_s or 0):
            self.best = measurement


@dataclass(frozen=True)
class SessionReport:
    session_id: int
    progress: Progress
    interrupted: bool


def run_session(
    store: Store,
    device: DeviceInfo,
    kernel: KernelSpec,
    workload: Workload,
    table: ConfigTable,
    runner: Runner,
    *,
    strategy: str,
    budget: Budget,
    seed: int | None = None,
    on_result: Callable[[Progress], None] | None = None,
) -> SessionReport:
    strategy_class = get_strategy(strategy)
    device_id = store.device_id(device)
    kernel_id = store.kernel_version_id(
        kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
    )
    workload_id = store.workload_id(workload.problem, workload.key, workload.shape, workload.dtype)
    done_keys = store.measured_config_keys(device_id, kernel_id, workload_id)
    done_rows = {row for row in (table.index_json(key) for key in done_keys) if row is not None}
    search = strategy_class(table, seed=seed, skip=done_rows)
    session_id = store.start_session(
        device_id,
        kernel_id,
        workload_id,
        strategy=strategy,
        seed=seed,
        settings={
            "budget_candidates": budget.candidates,
            "budget_seconds": budget.seconds,
            "octune_version": version("octune"),
        },
    )
    progress = Progress(space_size=len(table), already_measured=len(done_rows))
    started = time.monotonic()
    interrupted = False
    try:
        while not budget.spent(progress.tried, time.monotonic() - started):
            proposed = search.propose(1)
            if not proposed:
                break
            row = proposed[0]
            measurement = runner.measure(table.config(row))
            store.add_measurement(session_id, measurement)
            search.observe(row, measurement)
            progress.record(measurement)
            if on_result is not None:
                on_result(progress)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        store.finish_session(session_id, "interrupted" if interrupted else "completed")
    return SessionReport(session_id=session_id, progress=progress, interrupted=interrupted)


__all__ = ["Budget", "Progress", "SessionReport", "config_key", "parse_duration", "run_session"]
