"""Which of a family's kernels a device tunes (``for_device``), and the campaign that shares one
budget among many workloads (``tune_in_turn``), run in process on the test device."""

from __future__ import annotations

from dataclasses import replace

import pytest

from octune.core.results import Measurement, Status
from octune.tuner.campaign import (
    CONTENDER,
    JUDGED_AFTER,
    Task,
    Tune,
    Turn,
    for_device,
    kernel_shares,
    measured_weights,
    tasks_for,
    tune_in_turn,
)
from octune.tuner.device import DeviceInfo
from octune.tuner.memory_store import MemoryStore
from octune.tuner.session import (
    Budget,
    Progress,
    SessionReport,
    Settings,
    open_workers,
    run_session,
)
from octune.tuner.workers import Workers

GEMM = {"m": 256, "n": 256, "k": 256}
CONV = {"n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "pad": 1}
NHWC = {**CONV, "nhwc": 1}


def test_a_cpu_tunes_the_family_kernels_written_for_cpus_with_the_whole_weight() -> None:
    tasks = tasks_for("gemm", GEMM, weight=2.0)
    kept, left_out = for_device(tasks, "cpu")
    assert [(t.kernel.name, t.weight) for t in kept] == [("gemm_panel", 2.0)]
    assert set(left_out) == {t.kernel.name for t in tasks} - {"gemm_panel"}


def test_a_gpu_leaves_out_the_kernels_written_for_cpus() -> None:
    tasks = tasks_for("gemm", GEMM, weight=2.0)
    kept, left_out = for_device(tasks, "gpu")
    assert left_out == ["gemm_panel"]
    assert len(kept) == len(tasks) - 1
    assert sum(t.weight for t in kept) == pytest.approx(2.0)


def test_a_kernel_named_on_its_own_is_kept_on_any_device() -> None:
    named = tasks_for("gemm_panel", GEMM)
    assert for_device(named, "gpu") == (named, [])


def test_each_workload_keeps_the_kernels_that_suit_it_best() -> None:
    """conv2d_panel (written for CPUs) takes NCHW layers only: an NHWC layer of the same run
    keeps every kernel written for any device.
    """
    nchw, nhwc = tasks_for("conv2d", CONV), tasks_for("conv2d", NHWC)
    kept, left_out = for_device([*nchw, *nhwc], "cpu")
    assert [t.kernel.name for t in kept if t.workload == nchw[0].workload] == ["conv2d_panel"]
    assert [t for t in kept if t.workload == nhwc[0].workload] == nhwc
    assert set(left_out) == {t.kernel.name for t in nchw} - {"conv2d_panel"}


def exhaustive_turns(
    store: MemoryStore, device_info: DeviceInfo, seen: list[tuple[str, Workers]] | None = None
) -> Tune:
    """A campaign's ``tune``: each turn an exhaustive session into ``store``, in the space's
    order, whose first values are the cautious ones (so a few candidates verify on any
    device); each turn's place and workers noted in ``seen``.
    """

    def tune(
        task: Task, part: Budget, workers: Workers, settings: Settings, place: str
    ) -> SessionReport:
        if seen is not None:
            seen.append((place, workers))
        table = task.kernel.space.enumerate(device_info.limits)
        return run_session(store, device_info, task.kernel, task.workload, table,
                           strategy="exhaustive", budget=part, settings=settings,
                           workers=workers)  # fmt: skip

    return tune


def test_a_campaign_measures_every_task_before_any_gets_more(device_info: DeviceInfo) -> None:
    """The library's campaign, which `octune tune` and a farm agent both run: the heaviest
    task first, each task measured in the first round, then what is left by weight, and never
    more candidates than the total. In the space's order, whose first values are the cautious
    ones, so each task's few candidates verify on any device.
    """
    tasks = [
        task
        for size, weight in ((16, 1.0), (32, 3.0), (24, 2.0))
        for task in tasks_for("gemm_panel", {"m": size, "n": size, "k": size}, weight=weight)
    ]
    store = MemoryStore()  # the in-memory TuningStore: a campaign needs nothing more
    seen: list[tuple[str, Workers]] = []
    tune = exhaustive_turns(store, device_info, seen)
    settings = Settings(jobs=0, confirm=0)
    turns = list(tune_in_turn(tasks, Budget(candidates=9), tune, device=device_info,
                              settings=settings))  # fmt: skip
    places = [place for place, _ in seen]
    stored = {task.workload.key: store.best(device_info.fingerprint, "gemm_panel",
                                            task.workload.key) for task in tasks}  # fmt: skip
    weights = [turn.task.weight for turn in turns]
    assert weights[:3] == [3.0, 2.0, 1.0]  # the first round, heaviest first
    assert all(turn.report.progress.tried >= 1 for turn in turns[:3])
    assert weights[3:] == [3.0, 2.0, 1.0][: len(weights) - 3]  # then by weight, in turn
    # Each turn's heading says where it stands in the run.
    assert (
        places == ["1/3", "2/3", "3/3", *(f"{i}/3, second turn" for i in (1, 2, 3))][: len(turns)]
    )
    assert sum(turn.report.progress.tried for turn in turns) <= 9
    assert all(best is not None for best in stored.values())  # each verified and stored


def test_a_campaign_confirms_in_the_second_round(device_info: DeviceInfo) -> None:
    """A first turn confirms nothing; the second confirms what the task brought to the top."""
    tasks = [
        task
        for size in (16, 24)
        for task in tasks_for("gemm_panel", {"m": size, "n": size, "k": size})
    ]
    store = MemoryStore()
    tune = exhaustive_turns(store, device_info)
    turns = list(tune_in_turn(tasks, Budget(candidates=6), tune, device=device_info,
                              settings=Settings(jobs=0, confirm=1)))  # fmt: skip
    assert len(turns) == 4
    assert [turn.report.confirm_session_id is None for turn in turns] == [True] * 2 + [False] * 2
    assert all(len(turn.report.confirmed) == 1 for turn in turns[2:])


def test_a_campaign_runs_on_workers_a_longer_run_opened(device_info: DeviceInfo) -> None:
    """A run that tunes its workloads one call at a time passes its own workers: every turn
    gets them, and they outlive the call (the run closes them), so no call pays their start.
    """
    tasks = tasks_for("gemm_panel", {"m": 16, "n": 16, "k": 16})
    seen: list[tuple[str, Workers]] = []
    tune = exhaustive_turns(MemoryStore(), device_info, seen)
    settings = Settings(jobs=0, confirm=0)
    pids = []
    with open_workers(device_info, settings) as workers:
        for _ in range(2):
            turns = list(tune_in_turn(tasks, Budget(candidates=2), tune, device=device_info,
                                      settings=settings, workers=workers))  # fmt: skip
            assert turns and all(turn.report.progress.tried for turn in turns)
            assert workers._measurer is not None
            pids.append(workers._measurer.pid)
    assert seen and all(used is workers for _, used in seen)
    assert pids[0] is not None and pids == [pids[0]] * 2  # the same measuring process, kept


def _turn(task: Task, seconds: float | None, tried: int = JUDGED_AFTER) -> Turn:
    """A first-round turn whose session's best verified time was ``seconds`` (None: none),
    of ``tried`` candidates.
    """
    progress = Progress(space_size=10, already_measured=0, tried=tried)
    if seconds is not None:
        progress.best = Measurement({}, Status.OK, times_s=(seconds,))
    return Turn(task, SessionReport(1, progress, interrupted=False))


def test_network_layers_get_the_second_round_by_measured_time() -> None:
    """Estimated by flops, the 64^3 layer is 64 times the 16^3 one; measured, the small layer,
    launched 200 times a pass, takes most of the time: it gets the larger second part. A
    layer nothing verified keeps its estimate, scaled as the measured ones compare.
    """
    small, large, unverified = (
        replace(tasks_for("gemm_panel", {"m": size, "n": size, "k": size}, weight=weight)[0],
                launches=launches)
        for size, weight, launches in ((16, 1.0, 200), (64, 64.0, 1), (32, 8.0, 1))
    )  # fmt: skip
    turns = [_turn(large, 40e-6), _turn(unverified, None), _turn(small, 10e-6)]
    weights = measured_weights([large, unverified, small], turns)
    scale = (200 * 10e-6 + 40e-6) / (1.0 + 64.0)  # seconds per unit of estimate
    assert weights == pytest.approx([40e-6, 8.0 * scale, 200 * 10e-6])


def test_a_batched_matmul_keeps_its_estimate() -> None:
    """Attention's 192 matrices measured one launch each would weigh 192 launches; the runtime
    runs them in one launch of its own where that is faster, so the layer keeps its estimate,
    scaled as the measured layer's compares, and the measured layer gets the rest.
    """
    large, attention = (
        replace(tasks_for("gemm_panel", {"m": size, "n": size, "k": size}, weight=weight)[0],
                launches=launches, batched=batched)
        for size, weight, launches, batched in ((64, 64.0, 1, False), (16, 1.0, 192, True))
    )  # fmt: skip
    weights = measured_weights([large, attention], [_turn(large, 40e-6), _turn(attention, 10e-6)])
    assert weights == pytest.approx([40e-6, 1.0 * 40e-6 / 64.0])


def test_a_family_layer_splits_its_measured_time_among_its_kernels() -> None:
    """The layer's time is its fastest kernel's; its kernels within CONTENDER x of that, and
    those nothing verified, get even parts, a slower one less (here 2 x: (1.5 / 2)^2 of one).
    """
    tasks = [replace(task, launches=3) for task in tasks_for("gemm", GEMM, weight=5.0)]
    assert len(tasks) >= 3
    seconds = (2e-3, 1e-3, 1.4e-3) + (None,) * (len(tasks) - 3)
    turns = [_turn(task, time) for task, time in zip(tasks, seconds, strict=True)]
    weights = measured_weights(tasks, turns)
    raw = [(CONTENDER / 2) ** 2] + [1.0] * (len(tasks) - 1)
    assert weights == pytest.approx([3 * 1e-3 * r / sum(raw) for r in raw])


def test_a_workload_of_a_file_leans_its_second_round_to_its_fastest_kernels() -> None:
    """Without launches a workload keeps its own weight, still split by kernel_shares: a
    kernel 6 x the fastest gets (1.5 / 6)^2 of a contender's part, not nothing.
    """
    tasks = tasks_for("gemm", GEMM, weight=4.0)
    seconds = (6e-3, 1e-3) + (1e-3,) * (len(tasks) - 2)
    turns = [_turn(task, time) for task, time in zip(tasks, seconds, strict=True)]
    weights = measured_weights(tasks, turns)
    assert sum(weights) == pytest.approx(4.0)
    assert weights[0] == pytest.approx(weights[1] * (CONTENDER / 6) ** 2) and weights[0] > 0
    assert kernel_shares(tasks, []) == pytest.approx([1 / len(tasks)] * len(tasks))


def test_a_kernel_that_measured_too_few_candidates_is_not_judged_yet() -> None:
    """A first turn that went on starting the run's workers measured one candidate, the
    space's first: 3.5 x behind is no verdict on the kernel, which keeps a contender's part.
    """
    tasks = tasks_for("gemm", GEMM)
    seconds = (3.5e-3,) + (1e-3,) * (len(tasks) - 1)
    judged = kernel_shares(tasks, [_turn(t, s) for t, s in zip(tasks, seconds, strict=True)])
    assert judged[0] < judged[1]
    early = [_turn(tasks[0], seconds[0], tried=1)]
    early += [_turn(t, s) for t, s in zip(tasks[1:], seconds[1:], strict=True)]
    assert kernel_shares(tasks, early) == pytest.approx([1 / len(tasks)] * len(tasks))


def test_workloads_that_are_not_a_networks_layers_keep_their_weights() -> None:
    """Without launches per pass, workloads of a file share nothing to be measured against."""
    tasks = tasks_for("gemm_panel", GEMM, weight=2.0) + tasks_for("gemm_panel", {**GEMM, "m": 64})
    assert measured_weights(tasks, [_turn(tasks[0], 1e-3)]) == [2.0, 1.0]
