"""Build, run, time and verify one candidate config on a real OpenCL device.

Every candidate ends as a Measurement, failures included: a build error, a launch error or
a wrong result is recorded with its message, and the session carries on.
"""

from __future__ import annotations

import itertools
import math
import secrets
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyopencl as cl

from octune.catalogue.family import OperandMemo, Workload
from octune.catalogue.registry import KernelSpec
from octune.catalogue.space import LaunchSizes
from octune.core.errors import SpaceError
from octune.core.results import Measurement, Status
from octune.tuner.device import DeviceInfo
from octune.tuner.energy import EnergySensor
from octune.tuner.programs import ProgramCache

MESSAGE_LIMIT = 2000
# Energy counters update every few tens of milliseconds: a burst must last well beyond that.
ENERGY_BURST_SECONDS = 0.3
ENERGY_BURST_MAX_RUNS = 2000
# On a CPU device other threads, processes and virtual machines only ever add time, in phases
# of up to seconds (this project's 2-vCPU VM ran one GEMM at 0.5 ms and at 0.9 ms by turns:
# docs/runtimes.md). There a measurement warms up, runs for CPU_SECONDS_PER_SAMPLE per sample it
# keeps (five to fifty runs a sample), and keeps the fastest fifth.
CPU_WARMUP_SECONDS = 0.02
CPU_SECONDS_PER_SAMPLE = 0.025


class Runner(Protocol):
    """Turns a config into a Measurement: on a device, or (later) from recorded data."""

    def measure(self, config: Mapping[str, int]) -> Measurement: ...


def first_lines(text: str, limit: int = MESSAGE_LIMIT) -> str:
    return text.strip()[:limit]


class DeviceRunner:
    """Measures configs of one kernel and one workload on one OpenCL device.

    Programs are cached in memory and on disk (ProgramCache), so asking twice for a config
    never rebuilds it. Timing uses profiling events: warm up, then repeat until `repeats` runs
    or `max_seconds` of kernel time, and keep every run; on a CPU device, run for longer and
    keep the fastest (``fastest_fifth``). With an energy sensor, a burst of
    back-to-back runs gives joules per run and mean power. With ``back_to_back`` > 0, bursts of
    that many runs enqueued back to back also give seconds per run as a runtime sees them: some
    drivers' profiling events of one short kernel include a fixed cost that a stream of launches
    hides, as a CUDA graph of vendor calls does. ``extra["back_to_back_s"]`` times the stream by
    its profiling events; ``extra["back_to_back_unprofiled_s"]`` by the host's clock in a queue
    without profiling, as a runtime's queue is, in case profiling itself costs per launch.
    """

    def __init__(
        self,
        device: cl.Device,
        kernel: KernelSpec,
        workload: Workload,
        *,
        seed: int | None = None,
        repeats: int = 10,
        min_repeats: int = 3,
        max_seconds: float = 1.0,
        cache: ProgramCache | None = None,
        energy: EnergySensor | None = None,
        back_to_back: int = 0,
        memo: OperandMemo | None = None,
        context: cl.Context | None = None,
    ) -> None:
        self.device = device
        self.info = DeviceInfo.from_cl(device)
        self.kernel = kernel
        self.workload = workload
        self.repeats = repeats
        self.min_repeats = min_repeats
        self.max_seconds = max_seconds
        if seed is None and memo is not None:  # one for the runner's life: a re-open after a
            seed = secrets.randbits(63)  # failed launch binds the same inputs, from the memo
        self.seed = seed
        self.cache = cache or ProgramCache()
        self.energy = energy
        self.back_to_back = back_to_back
        self._memo = memo
        self._open(context)

    def _open(self, context: cl.Context | None = None) -> None:
        """``context`` (a healthy one another runner used: creating one costs a GPU's driver
        a tenth of a second and more), else a fresh one: after a failed launch some drivers
        refuse all further work in it. Host operands from ``memo`` where it has them.
        """
        self.context = context or cl.Context([self.device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        recall = None if self._memo is None else self._memo.recall((self.workload.key, self.seed))
        self.data = self.workload.bind(
            self.kernel.name, self.context, self.queue, np.random.default_rng(self.seed), recall
        )
        self.unprofiled_queue = cl.CommandQueue(self.context) if self.back_to_back else None
        self._programs: dict[tuple[str, ...], cl.Program] = {}
        self._scratch: cl.Buffer | None = None

    def build(self, options: list[str]) -> cl.Program:
        key = tuple(options)
        program = self._programs.get(key)
        if program is None:
            program = self.cache.build(
                self.context, self.info.fingerprint, self.kernel.source, options
            )
            self._programs[key] = program
        return program

    def measure(self, config: Mapping[str, int]) -> Measurement:
        """Build, check, time and check again; a failure at any step is its Measurement."""
        config = {name: int(config[name]) for name in self.kernel.space.parameter_names}
        candidate = self._prepare(config)
        if isinstance(candidate, Measurement):
            return candidate
        extra: dict[str, float] = {}
        try:
            checked = candidate.verify(first=True)
            if isinstance(checked, Measurement):
                return checked
            timed = self._cpu_times if self.info.device_type == "cpu" else self._times
            times, busy = timed(candidate.run)
            if self.energy is not None:
                extra = self._energy_burst(candidate.enqueue, sorted(times))
            if self.unprofiled_queue is not None:
                candidate.set_args(1 % self.data.input_sets)
                extra["back_to_back_s"] = back_to_back_seconds(
                    self.queue, candidate.launch, self.back_to_back
                )
                extra["back_to_back_unprofiled_s"] = host_clock_seconds(
                    self.unprofiled_queue, candidate.launch, self.back_to_back
                )
            again = candidate.verify(first=False)
            if isinstance(again, Measurement):
                return again
        except cl.Error as error:
            self._open()
            return candidate.failed(Status.LAUNCH_ERROR, str(error))
        extra["device_s"] = busy
        return Measurement(
            config, Status.OK, times_s=tuple(times), flops=self.workload.flops,
            max_error=max(checked, again), extra=extra,
        )  # fmt: skip

    def _prepare(self, config: dict[str, int]) -> Candidate | Measurement:
        """The config's kernels built, checked against the device's work-group limit, with
        their workspace: or the build or launch error that stops it.
        """
        space = self.kernel.space
        shape = self.workload.shape_vars()
        launches = space.launches(config, shape, self.info.limits)
        candidate = Candidate(self, config, [], launches, (), 0)
        try:
            elements = space.workspace_elements(config, shape, self.info.limits)
        except SpaceError as error:  # too big a workspace for the device at this shape
            return candidate.failed(Status.LAUNCH_ERROR, str(error))
        try:
            program = self.build(self.kernel.build_options(config, self.workload))
            candidate.kernels = [cl.Kernel(program, launch.entry) for launch in launches]
        except cl.Error as error:
            return candidate.failed(Status.BUILD_ERROR, str(error))
        for kernel, launch in zip(candidate.kernels, launches, strict=True):
            allowed = kernel.get_work_group_info(
                cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device
            )
            if math.prod(launch.local_size) > allowed:
                return candidate.failed(
                    Status.LAUNCH_ERROR,
                    f"work-group of {math.prod(launch.local_size)} exceeds the {allowed} "
                    f"{launch.entry} allows on the device (registers or local memory)",
                )
        try:
            candidate.workspace = self._workspace(elements)
            candidate.zeroed = space.zeroed_elements(config, shape, self.info.limits)
        except cl.Error as error:
            self._open()
            return candidate.failed(Status.LAUNCH_ERROR, f"workspace: {error}")
        return candidate

    def _times(self, run: Callable[[int], float]) -> tuple[list[float], float]:
        """Every run, until ``repeats`` or ``max_seconds`` (input set 0 is warm from the check:
        the runs start at 1); and their sum.
        """
        times: list[float] = []
        for repeat in range(1, self.repeats + 1):
            times.append(run(repeat % self.data.input_sets))
            if len(times) >= self.min_repeats and sum(times) >= self.max_seconds:
                break
        return times, sum(times)

    def _cpu_times(self, run: Callable[[int], float]) -> tuple[list[float], float]:
        """A CPU device's samples: after a warm-up, runs until they last CPU_SECONDS_PER_SAMPLE
        per sample asked for, from five to fifty runs a sample (or until ``max_seconds``), then
        the fastest fifth (``fastest_fifth``); and the runs' sum.
        """
        least, most = 5 * self.repeats, 50 * self.repeats
        warm = 0.0
        for _ in range(least):
            warm += run(1 % self.data.input_sets)
            if warm >= CPU_WARMUP_SECONDS:
                break
        runs: list[float] = []
        busy, span = 0.0, CPU_SECONDS_PER_SAMPLE * self.repeats
        while (len(runs) < least or busy < span) and len(runs) < most:
            runs.append(run((1 + len(runs)) % self.data.input_sets))
            busy += runs[-1]
            if len(runs) >= self.min_repeats and busy >= self.max_seconds:
                break
        return fastest_fifth(runs, self.repeats, self.min_repeats), busy

    def _workspace(self, elements: int) -> tuple[cl.Buffer, ...]:
        """The scratch buffer a config's launches share (none for most kernels), reused while
        big enough: the last argument of every launch.
        """
        if elements == 0:
            return ()
        if self._scratch is None or self._scratch.size < 4 * elements:
            self._scratch = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=4 * elements)
        return (self._scratch.get_sub_region(0, 4 * elements),)

    def dirty_counters(self, workspace: tuple[cl.Buffer, ...], zeroed: int) -> int:
        """How many of the workspace's leading ``zeroed`` elements are not zero now."""
        if not zeroed:
            return 0
        counters = np.empty(zeroed, np.int32)
        cl.enqueue_copy(self.queue, counters, workspace[0])
        return int(np.count_nonzero(counters))

    def _energy_burst(
        self, enqueue: Callable[[int], list[cl.Event]], times: list[float]
    ) -> dict[str, float]:
        """Joules per run and mean watts over runs enqueued back to back, so that the counter
        sees the device busy rather than the host's gaps between timed runs.
        """
        assert self.energy is not None
        median = times[len(times) // 2]
        runs = min(ENERGY_BURST_MAX_RUNS, max(3, math.ceil(ENERGY_BURST_SECONDS / median)))
        self.queue.finish()
        joules, started = self.energy.joules(), time.perf_counter()
        for repeat in range(runs):
            enqueue(repeat % self.data.input_sets)
        self.queue.finish()
        spent, elapsed = self.energy.joules() - joules, time.perf_counter() - started
        return {"energy_j": spent / runs, "power_w": spent / elapsed, "energy_runs": runs}


#: One run of a candidate: enqueues its launches on the queue, returns their events.
Enqueue = Callable[[cl.CommandQueue], list[cl.Event]]


class RunnerChain:
    """DeviceRunners made one after another, each handed the last one's OpenCL context (on the
    same device) and one memo of host operands: a fresh context and a batch-16 layer's inputs and
    float64 reference cost each runner 1.3 s on the H200's host. The context is taken when the
    next runner is made, so a runner that replaced its own after a failed launch hands on the
    healthy one.
    """

    def __init__(self, memo: OperandMemo) -> None:
        self.memo = memo
        self.last: DeviceRunner | None = None

    def runner(
        self, device: cl.Device, kernel: KernelSpec, workload: Workload, **settings: Any
    ) -> DeviceRunner:
        """A runner of ``kernel`` on ``workload``; ``settings`` as ``DeviceRunner`` takes them."""
        last = self.last
        context = last.context if last is not None and last.device == device else None
        self.last = DeviceRunner(
            device, kernel, workload, memo=self.memo, context=context, **settings
        )
        return self.last


def fastest_fifth(runs: Sequence[float], samples: int, least: int) -> list[float]:
    """Up to ``samples`` evenly spaced order statistics of the fastest fifth of ``runs`` (at
    least ``least`` of them): their median is about the runs' 10th percentile, which on a
    busy machine stays where the median does not (docs/runtimes.md).
    """
    kept = sorted(runs)[: max(least, len(runs) // 5)]
    return kept[:: max(1, len(kept) // samples)][:samples]


def _gated_burst(
    queue: cl.CommandQueue, launch: Enqueue, runs: int
) -> tuple[tuple[cl.Event, cl.Event], float]:
    """``runs`` of ``launch`` enqueued behind a user event, released once all are enqueued:
    enqueueing from Python takes longer than a short kernel runs, so the device would otherwise
    wait on the host. Returns the first and last run's events and the host's seconds from the
    release to the queue's end.
    """
    queue.finish()
    gate = cl.UserEvent(queue.context)
    cl.enqueue_marker(queue, wait_for=[gate])
    events = [launch(queue) for _ in range(runs)]
    started = time.perf_counter()
    gate.set_status(cl.command_execution_status.COMPLETE)
    queue.finish()
    return (events[0][0], events[-1][-1]), time.perf_counter() - started


@dataclass
class Candidate:
    """One config's kernels built on a runner's device, with their launches and workspace:
    what a measurement runs, times and verifies.
    """

    runner: DeviceRunner
    config: dict[str, int]
    kernels: list[cl.Kernel]
    launches: Sequence[LaunchSizes]
    workspace: tuple[cl.Buffer, ...]
    zeroed: int  # workspace elements the launches count in, zero-filled as a runtime does

    def failed(self, status: Status, message: str) -> Measurement:
        return Measurement(
            self.config, status, flops=self.runner.workload.flops, message=first_lines(message)
        )

    def set_args(self, input_set: int) -> None:
        args = (*self.runner.data.args(input_set), *self.workspace)
        for kernel in self.kernels:
            kernel.set_args(*args)

    def launch(self, queue: cl.CommandQueue) -> list[cl.Event]:
        """The launches with the arguments last set."""
        return [
            cl.enqueue_nd_range_kernel(queue, kernel, launch.global_size, launch.local_size)
            for kernel, launch in zip(self.kernels, self.launches, strict=True)
        ]

    def enqueue(self, input_set: int) -> list[cl.Event]:
        """All launches back to back: arguments are set first, so that no host work separates
        them (a runtime enqueues prepared kernels the same way).
        """
        self.set_args(input_set)
        return self.launch(self.runner.queue)

    def run(self, input_set: int) -> float:
        """Seconds from the first launch's start to the last one's end."""
        events = self.enqueue(input_set)
        events[-1].wait()
        return (events[-1].profile.end - events[0].profile.start) * 1e-9

    def verify(self, first: bool) -> Measurement | float:
        """Input set 0 from a NaN output and workspace: a wrong result, or the error ratio.
        Run once before timing and once after, since a race between work-groups that the first
        run wins can lose the next ones.
        """
        runner, workspace, zeroed = self.runner, self.workspace, self.zeroed
        runner.data.poison_output()
        for buffer in workspace:  # a slice the launches forget to write shows as NaN
            cl.enqueue_fill_buffer(runner.queue, buffer, np.float32(np.nan), 0, buffer.size)
            if zeroed:  # ... but counters start at zero, as a runtime allocates them
                cl.enqueue_fill_buffer(runner.queue, buffer, np.int32(0), 0, 4 * zeroed)
        self.run(0)
        error_ratio = runner.data.error_ratio()
        after = "" if first else " after the timed runs"
        if dirty := runner.dirty_counters(workspace, zeroed):
            return self.failed(
                Status.WRONG_RESULT,
                f"left {dirty} of its {zeroed} zeroed workspace elements non-zero{after}; the "
                "launches must leave them at zero for the next run",
            )
        if not error_ratio < 1.0:
            return Measurement(
                self.config, Status.WRONG_RESULT, flops=runner.workload.flops,
                max_error=error_ratio,
                message=("output" if first else "right on its first run, then")
                + f" off the float64 reference by {error_ratio:.3g} x tolerance{after}",
            )  # fmt: skip
        return error_ratio


def back_to_back_seconds(
    queue: cl.CommandQueue, launch: Enqueue, runs: int, bursts: int = 5
) -> float:
    """Seconds per run of ``launch`` (one or more kernels) in gated bursts of ``runs`` back to
    back, by the queue's profiling events: the median over bursts of the first launch's start
    to the last one's end.
    """
    periods = []
    for _ in range(bursts):
        (first, last), _ = _gated_burst(queue, launch, runs)
        periods.append((last.profile.end - first.profile.start) * 1e-9 / runs)
    return statistics.median(periods)


def host_clock_seconds(
    queue: cl.CommandQueue, launch: Enqueue, runs: int, bursts: int = 3
) -> float:
    """Seconds per run of ``launch`` in gated bursts by the host's clock, in any queue (one
    without profiling too): the slope of burst time over bursts of 1 to 4 x ``runs``, so that
    the gate's release and the final wait drop out. Each size keeps its fastest burst, since
    other work on the host only ever adds time, and the slope is the median over pairs of sizes,
    since one size's bursts can all be slowed (on an H100 host with the tuner's build processes
    winding down, a difference of two sizes read -107 us). NaN where no pair of sizes grows.
    """
    sizes = [runs * multiple for multiple in range(1, 5)]
    _gated_burst(queue, launch, runs)  # warm
    fastest = dict.fromkeys(sizes, math.inf)
    for _ in range(bursts):
        for count in sizes:
            fastest[count] = min(fastest[count], _gated_burst(queue, launch, count)[1])
    slope = statistics.median(
        (fastest[big] - fastest[small]) / (big - small)
        for small, big in itertools.combinations(sizes, 2)
    )
    return slope if slope > 0 else math.nan
