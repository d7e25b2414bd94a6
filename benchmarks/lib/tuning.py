"""Tuning as the per-shape benchmarks (conv_layers.py, gemm_classes.py) do it: tune one workload
with every kernel of its family that takes it, re-time the fastest stored (kernel, config); and a
copy of a tuning database in which some workloads were never tuned, for the leave-one-out
benchmarks (untuned_shapes.py, model_live.py).
"""

from __future__ import annotations

import math
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import pyopencl as cl

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec
from octune.db.store import Store
from octune.tuner.campaign import Task, for_device, tasks_for, tune_in_turn
from octune.tuner.device import DeviceInfo
from octune.tuner.measure import DeviceRunner
from octune.tuner.session import Budget, Progress, SessionReport, Settings, run_session
from octune.tuner.workers import Workers


def kernels_taking(workload: Workload, device_type: str | None = None) -> list[KernelSpec]:
    """The kernels of the workload's family that take it, as ``octune tune FAMILY`` picks them
    for a device of ``device_type`` (``for_device``: a GPU tunes no CPU template where GPU ones
    take the shape); every one where None.
    """
    tasks = tasks_for(workload.problem, workload.shape, workload.dtype)
    if device_type is not None:
        tasks, _ = for_device(tasks, device_type)
    return [task.kernel for task in tasks]


def tune_workload(
    store: Store,
    info: DeviceInfo,
    workload: Workload,
    seconds: float,
    strategy: str,
    settings: Settings,
    seed: int,
    only: list[str] | None = None,
    workers: Workers | None = None,
) -> list[dict[str, object]]:
    """Tune the workload as ``octune tune FAMILY --shape`` does on this device (the kernels
    ``kernels_taking`` lists, of ``only`` if given, in the campaign's two rounds: a first even
    part, then the rest leaning toward the kernels ahead); each kernel's trace of (tried,
    elapsed s, best s so far) over both its turns, and each turn's part, time, candidates and
    best. ``workers``: the run's, as one `octune tune` run of many workloads shares them.
    """
    tasks, _ = for_device(tasks_for(workload.problem, workload.shape, workload.dtype),
                          info.device_type)  # fmt: skip
    tasks = [task for task in tasks if only is None or task.kernel.name in only]
    traces = {task.kernel.name: {"kernel": task.kernel.name, "tried": 0, "failures": {},
                                 "trace": [], "turns": []} for task in tasks}  # fmt: skip

    def tune(task: Task, part: Budget, workers: Workers, turn: Settings, _: str) -> SessionReport:
        entry = traces[task.kernel.name]
        tried, spent = entry["tried"], sum(t["took_s"] for t in entry["turns"])
        best = entry["trace"][-1][2] if entry["trace"] else math.inf

        def record(progress: Progress) -> None:
            found = progress.best.median_s if progress.best is not None else None
            if found:
                entry["trace"].append((tried + progress.tried, spent + progress.elapsed_s,
                                       min(best, found)))  # fmt: skip

        report = run_session(
            store, info, task.kernel, task.workload, task.kernel.space.enumerate(info.limits),
            strategy=strategy, budget=part, settings=turn, seed=seed, on_result=record,
            workers=workers,
        )  # fmt: skip
        progress = report.progress
        entry["tried"] = tried + progress.tried
        entry["failures"] = dict(Counter(entry["failures"]) + Counter(progress.failures))
        entry["turns"].append(
            {
                "part_s": part.seconds,
                "took_s": progress.elapsed_s,
                "tried": progress.tried,
                "best_s": progress.best.median_s if progress.best else None,
            }
        )
        return report

    turns = tune_in_turn(tasks, Budget(seconds=seconds), tune, device=info, settings=settings,
                         workers=workers)  # fmt: skip
    for _ in turns:
        pass
    return list(traces.values())


class Timed(NamedTuple):
    """A kernel's fastest stored config re-measured now: the median of its profiled runs, and
    seconds per run in a stream of back-to-back launches (what a CUDA graph of vendor calls is
    compared with on an equal footing), by profiling events and by the host's clock in a queue
    without profiling.
    """

    seconds: float
    kernel: KernelSpec
    config: dict[str, int]
    back_to_back_s: float
    unprofiled_s: float


def fastest_stored(
    store: Store, device: cl.Device, info: DeviceInfo, workload: Workload
) -> Timed | None:
    """The fastest stored kernel and config for the workload, re-measured (and re-verified)
    now, or None where nothing verified is stored.
    """
    timed = stored_timings(store, device, info, workload)
    return timed[0] if timed else None


def stored_timings(
    store: Store, device: cl.Device, info: DeviceInfo, workload: Workload, back_to_back: int = 20
) -> list[Timed]:
    """Each kernel's fastest stored config for the workload, re-measured (and re-verified) now,
    fastest first.
    """
    timed = []
    for kernel in kernels_taking(workload):
        best = store.best(info.fingerprint, kernel.name, workload.key, kernel.sha256)
        if best is None:
            continue
        runner = DeviceRunner(device, kernel, workload, seed=7, repeats=50, max_seconds=0.5,
                              back_to_back=back_to_back)  # fmt: skip
        measurement = runner.measure(best.config)
        if measurement.ok and measurement.median_s:
            streams = (measurement.extra.get(clock, measurement.median_s)
                       for clock in ("back_to_back_s", "back_to_back_unprofiled_s"))  # fmt: skip
            timed.append(Timed(measurement.median_s, kernel, best.config, *streams))
    return sorted(timed, key=lambda entry: entry.seconds)


def without_workloads(source: Path, copy: Path, workload_keys: Iterable[str]) -> Path:
    """A copy of a tuning database in which some workloads were never tuned: what the
    leave-one-out benchmarks ask the lookup and the cost model about.
    """
    shutil.copyfile(source, copy)
    with sqlite3.connect(copy) as connection:
        connection.executemany(
            "DELETE FROM measurements WHERE session_id IN (SELECT s.id FROM tuning_sessions s "
            "JOIN workloads w ON s.workload_id = w.id WHERE w.key = ?)",
            [(key,) for key in workload_keys],
        )
    return copy
