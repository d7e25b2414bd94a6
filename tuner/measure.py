"""Build, run, time and verify one candidate config on a real OpenCL device.

Every candidate ends as a Measurement, failures included: a build error, a launch error or
a wrong result is recorded with its message, and the session carries on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Protocol

import numpy as np
import pyopencl as cl

from octune.tuner.device import DeviceInfo
from octune.tuner.energy import EnergySensor
from octune.tuner.family import Workload
from octune.tuner.kernels import KernelSpec
from octune.tuner.programs import ProgramCache
from octune.tuner.results import Measurement, Status

MESSAGE_LIMIT = 2000
# Energy counters update every few tens of milliseconds: a burst must last well beyond that.
ENERGY_BURST_SECONDS = 0.3
ENERGY_BURST_MAX_RUNS = 2000


class Runner(Protocol):
    """Turns a config into a Measurement: on a device, or (later) from recorded data."""

    def measure(self, config: Mapping[str, int]) -> Measurement: ...


def first_lines(text: str, limit: int = MESSAGE_LIMIT) -> str:
    return text.strip()[:limit]


class DeviceRunner:
    """Measures configs of one kernel and one workload on one OpenCL device.

    Programs are cached in memory and on disk (ProgramCache), so asking twice for a config
    never rebuilds it. Timing uses profiling events: warm up, then repeat until `repeats` runs
    or `max_seconds` of kernel time, and keep every run. With an energy sensor, a burst of
    back-to-back runs gives joules per run and mean power.
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
    ) -> None:
        self.device = device
        self.info = DeviceInfo.from_cl(device)
        self.kernel = kernel
        self.workload = workload
        self.repeats = repeats
        self.min_repeats = min_repeats
        self.max_seconds = max_seconds
        self.seed = seed
        self.cache = cache or ProgramCache()
        self.energy = energy
        self._open()

    def _open(self) -> None:
        """A fresh context: after a failed launch some drivers refuse all further work in it."""
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self.data = self.workload.bind(
            self.kernel.name, self.context, self.queue, np.random.default_rng(self.seed)
        )
        self._programs: dict[tuple[str, ...], cl.Program] = {}

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
        space = self.kernel.space
        config = {name: int(config[name]) for name in space.parameter_names}
        flops = self.workload.flops

        def failed(status: Status, message: str) -> Measurement:
            return Measurement(config, status, flops=flops, message=first_lines(message))

        try:
            program = self.build(self.kernel.build_options(config, self.workload))
            kernel = cl.Kernel(program, space.entry)
        except cl.Error as error:
            return failed(Status.BUILD_ERROR, str(error))

        global_size, local_size = space.launch(config, self.workload.shape_vars(), self.info.limits)
        allowed = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device)
        if int(np.prod(local_size)) > allowed:
            return failed(
                Status.LAUNCH_ERROR,
                f"work-group of {int(np.prod(local_size))} exceeds the {allowed} this kernel "
                "allows on the device (registers or local memory)",
            )

        def run(input_set: int) -> float:
            event = kernel(self.queue, global_size, local_size, *self.data.args(input_set))
            event.wait()
            return (event.profile.end - event.profile.start) * 1e-9

        try:
            self.data.poison_output()
            run(0)
            error_ratio = self.data.error_ratio()
        except cl.Error as error:
            self._open()
            return failed(Status.LAUNCH_ERROR, str(error))
        if not error_ratio < 1.0:
            return Measurement(
                config,
                Status.WRONG_RESULT,
                flops=flops,
                max_error=error_ratio,
                message=f"output off the float64 reference by {error_ratio:.3g} x tolerance",
            )

        times: list[float] = []
        extra: dict[str, float] = {}
        try:
            for repeat in range(1, self.repeats + 1):  # set 0 is warm from the check: start at 1
                times.append(run(repeat % self.data.input_sets))
                if len(times) >= self.min_repeats and sum(times) >= self.max_seconds:
                    break
            if self.energy is not None:
                extra = self._energy_burst(kernel, global_size, local_size, sorted(times))
        except cl.Error as error:
            self._open()
            return failed(Status.LAUNCH_ERROR, str(error))
        extra["device_s"] = sum(times)
        return Measurement(
            config, Status.OK, times_s=tuple(times), flops=flops, max_error=error_ratio, extra=extra
        )

    def _energy_burst(
        self,
        kernel: cl.Kernel,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...],
        times: list[float],
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
            kernel(
                self.queue, global_size, local_size, *self.data.args(repeat % self.data.input_sets)
            )
        self.queue.finish()
        spent, elapsed = self.energy.joules() - joules, time.perf_counter() - started
        return {"energy_j": spent / runs, "power_w": spent / elapsed, "energy_runs": runs}
