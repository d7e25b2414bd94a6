"""Worker processes: parallel builders, and one supervised measurer that may hang or die.

Building takes about a second per candidate while running takes milliseconds, so builders
fill the program cache ahead of the measurer and the device never waits for the compiler.
Everything that touches the device runs in a child process: a kernel that never returns is
killed at its time limit (`timeout`), a driver that segfaults takes down only the child
(`crash`), and the session restarts the child and goes on.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Self

import pyopencl as cl

from octune.catalogue.family import OperandMemo, Workload
from octune.catalogue.registry import KernelSpec
from octune.core.errors import DeviceError
from octune.core.results import Config, Measurement, Status
from octune.tuner.device import DeviceInfo, list_devices
from octune.tuner.energy import sensor_for
from octune.tuner.measure import DeviceRunner, RunnerChain
from octune.tuner.programs import ProgramCache

# Spawned, not forked: a forked child would share the parent's OpenCL driver state.
_CONTEXT = mp.get_context("spawn")
# Seconds a measurer may take besides running the candidate: start-up, binding the workload
# (inputs and the float64 reference), loading the program.
START_SECONDS = 60.0
# A candidate that kills the measurer is tried once more in a fresh one (the first death may
# have been a neighbour's fault), then recorded as a crash.
CRASH_ATTEMPTS = 2


@dataclass(frozen=True)
class MeasuringContext:
    """Everything a worker process needs to rebuild the measuring context by itself."""

    device_fingerprint: str
    kernel: KernelSpec
    workload: Workload
    seed: int | None = None
    cache_root: str | None = None
    repeats: int = 10
    min_repeats: int = 3
    max_seconds: float = 1.0
    energy: bool = False

    @property
    def cache(self) -> ProgramCache:
        return ProgramCache(None if self.cache_root is None else Path(self.cache_root))


def default_timeout(workload: Workload) -> float:
    """Seconds a candidate may run: generous for any config worth keeping (0.5 GFLOP/s over
    a check run and the repeats, plus a minute for drivers such as PoCL that compile at the
    first launch), short enough that a hung kernel costs minutes, not a night.
    """
    return 60.0 + workload.flops / 5e8


def default_jobs(device: cl.Device) -> int:
    """One builder per core for a GPU; none for a CPU device, whose timings builders running
    on the same cores would spoil (the measurer then builds each candidate itself).
    """
    if device.type & cl.device_type.CPU:
        return 0
    return os.cpu_count() or 1


def find_device(fingerprint: str) -> cl.Device:
    for device in list_devices():
        if DeviceInfo.from_cl(device).fingerprint == fingerprint:
            return device
    raise DeviceError(f"no OpenCL device with fingerprint {fingerprint}: see `octune devices`")


def _detach() -> None:
    """A worker ignores Ctrl-C (the session stops it cleanly) and dies with its parent, so a
    session killed with SIGKILL leaves no orphans computing on the device.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# ---- builders -------------------------------------------------------------------------

_builder: tuple[cl.Context, str, ProgramCache] | None = None


def _builder_start(device_fingerprint: str, cache_root: str | None) -> None:
    global _builder
    _detach()
    device = find_device(device_fingerprint)
    cache = ProgramCache(None if cache_root is None else Path(cache_root))
    _builder = (cl.Context([device]), device_fingerprint, cache)


def _build(source: str, options: list[str]) -> str | None:
    """Fill the program cache; the compiler's message on failure, None on success."""
    assert _builder is not None
    context, fingerprint, cache = _builder
    try:
        cache.build(context, fingerprint, source, options)
    except cl.Error as error:
        return str(error).strip()
    return None


class BuildPool:
    """`jobs` builder processes for one device and any kernel; `submit` returns a future of
    the build error (None: built).
    """

    def __init__(self, device_fingerprint: str, cache_root: str | None, jobs: int) -> None:
        self.jobs = jobs
        self._pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=_CONTEXT,
            initializer=_builder_start,
            initargs=(device_fingerprint, cache_root),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def submit(self, source: str, options: list[str]) -> Future[str | None]:
        return self._pool.submit(_build, source, options)

    def close(self) -> None:
        processes = list((self._pool._processes or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()  # a build in a hung compiler must not outlive the run


def build_all(
    device: cl.Device,
    cache: ProgramCache,
    builds: Iterable[tuple[str, Sequence[str]]],
    jobs: int | None = None,
) -> None:
    """Fill the program cache with these (source, build options), ``jobs`` builders at once
    (by default ``default_jobs``: none for a CPU, whose cores a builder would take from the
    timings), so that the measuring that follows only loads. A failed build is left to the
    measuring, which meets it and records it as any other; so is the rest where a builder dies
    (a compiler crash).
    """
    jobs = default_jobs(device) if jobs is None else jobs
    unique = {(source, tuple(options)) for source, options in builds}
    if jobs <= 0 or len(unique) < 2:
        return
    with BuildPool(DeviceInfo.from_cl(device).fingerprint, str(cache.root), jobs) as pool:
        for future in [pool.submit(source, list(options)) for source, options in unique]:
            try:
                future.result()
            except BrokenExecutor:
                return


# ---- the measurer ---------------------------------------------------------------------


def _runner(context: MeasuringContext, chain: RunnerChain) -> DeviceRunner:
    """A runner for ``context``, the next of ``chain`` (its OpenCL context and host operands):
    on the last runner's device when ``context`` names it, else on the device found for it.
    """
    last = chain.last
    if last is not None and last.info.fingerprint == context.device_fingerprint:
        device = last.device
    else:
        device = find_device(context.device_fingerprint)
    return chain.runner(
        device,
        context.kernel,
        context.workload,
        seed=context.seed,
        repeats=context.repeats,
        min_repeats=context.min_repeats,
        max_seconds=context.max_seconds,
        cache=context.cache,
        energy=sensor_for(device) if context.energy else None,
    )


def _measurer_main(connection: Connection, context: MeasuringContext) -> None:
    """Measure configs as they arrive; a new context arriving instead switches the kernel and
    the workload (keeping the OpenCL context and the last workloads' host operands: a switch
    took 1.3 s on the H200's host at batch 16, 67 of a 90 s ResNet-50 run's seconds).
    """
    _detach()
    chain = RunnerChain(OperandMemo())
    runner = _runner(context, chain)
    connection.send("ready")
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        if isinstance(message, MeasuringContext):
            runner = _runner(message, chain)
            connection.send("ready")
        else:
            connection.send(runner.measure(message))


class Measurer:
    """One supervised measuring process; restarted after a timeout or a crash.

    `start` hands a candidate over and returns at once, `finish` collects its result: the
    caller can store and propose while the device measures.
    """

    def __init__(self, context: MeasuringContext, timeout: float) -> None:
        self.context = context
        self.timeout = timeout
        self.restarts = 0
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._in_flight: Config | None = None
        self._deadline = 0.0

    def _start(self) -> Connection:
        parent, child = _CONTEXT.Pipe()
        process = _CONTEXT.Process(target=_measurer_main, args=(child, self.context), daemon=True)
        process.start()
        child.close()
        if not parent.poll(START_SECONDS + self.timeout) or parent.recv() != "ready":
            process.kill()
            raise DeviceError(
                "the measuring process could not start on device "
                f"{self.context.device_fingerprint} (exit code {process.exitcode}): check "
                "`octune devices`"
            )
        self._process, self._connection = process, parent
        return parent

    @property
    def pid(self) -> int | None:
        """The measuring process's, while one runs."""
        return None if self._process is None else self._process.pid

    def use(self, context: MeasuringContext, timeout: float) -> None:
        """Measure for another kernel or workload from now on, in the same process: a fresh
        one costs an interpreter, imports and a device context (seconds on a GPU's driver).
        """
        if self._in_flight is not None:
            raise RuntimeError("the measurer is busy: finish() the candidate in flight first")
        self.context, self.timeout = context, timeout
        connection = self._connection
        if connection is None:
            return  # the next candidate starts a process for the new context
        try:
            connection.send(context)
            if connection.poll(START_SECONDS) and connection.recv() == "ready":
                return
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass
        self._stop()  # it could not switch: the next candidate starts a fresh one

    def measure(self, config: Config) -> Measurement:
        self.start(config)
        return self.finish()

    def start(self, config: Config) -> None:
        if self._in_flight is not None:
            raise RuntimeError("the measurer is busy: finish() the candidate in flight first")
        self._in_flight = dict(config)
        self._send(self._in_flight)

    def finish(self) -> Measurement:
        config, self._in_flight = self._in_flight, None
        if config is None:
            raise RuntimeError("nothing to finish: start() a candidate first")
        for attempt in range(1, CRASH_ATTEMPTS + 1):
            if attempt > 1:
                self._send(config)
            result = self._receive(config)
            if result.status is not Status.CRASH or attempt == CRASH_ATTEMPTS:
                return result
        raise AssertionError("unreachable")

    def _send(self, config: Config) -> None:
        connection = self._connection or self._start()
        self._deadline = time.monotonic() + self.timeout
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.send(config)  # a dead process shows as end of file in _receive

    def _receive(self, config: Config) -> Measurement:
        connection = self._connection
        assert connection is not None
        flops = self.context.workload.flops
        try:
            if connection.poll(max(0.0, self._deadline - time.monotonic())):
                return connection.recv()
            self._stop()
            self.restarts += 1
            message = f"no result within {self.timeout:.0f} s: the kernel hung or ran far too long"
            return Measurement(dict(config), Status.TIMEOUT, flops=flops, message=message)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            exitcode = self._stop()
            self.restarts += 1
            return Measurement(
                dict(config), Status.CRASH, flops=flops, message=_death_message(exitcode)
            )

    def _stop(self) -> int | None:
        process, self._process, self._connection = self._process, None, None
        if process is None:
            return None
        process.kill()
        process.join()
        return process.exitcode

    def close(self) -> None:
        """Stop the process; a candidate still in flight is dropped."""
        self._in_flight = None
        if self._connection is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self._connection.send(None)
        if self._process is not None:
            self._process.join(timeout=5)
        self._stop()


class Workers:
    """The processes a run's sessions share: the builders and the measurer. Starting them costs
    seconds (an interpreter, imports and a device context each), as much as a short session
    measures in, so ``octune tune`` starts them once for all its workloads and kernels.
    """

    def __init__(self, device_fingerprint: str, cache_root: str | None, jobs: int) -> None:
        self.builds = BuildPool(device_fingerprint, cache_root, jobs) if jobs > 0 else None
        self._measurer: Measurer | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def measurer(self, context: MeasuringContext, timeout: float) -> Measurer:
        """The measurer, switched to ``context``."""
        if self._measurer is None:
            self._measurer = Measurer(context, timeout)
        else:
            self._measurer.use(context, timeout)
        return self._measurer

    def close(self) -> None:
        if self.builds is not None:
            self.builds.close()
        if self._measurer is not None:
            self._measurer.close()


def _death_message(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        return f"the measuring process died with {name} (driver crash, abort or out of memory)"
    return f"the measuring process exited with code {exitcode} while running this candidate"
