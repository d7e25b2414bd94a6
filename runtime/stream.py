"""A forward pass's launches enqueued through OpenCL's own ``clEnqueueNDRangeKernel`` with no
event asked for.

pyopencl's enqueue always asks the driver for an event and wraps it in a Python object. On
NVIDIA's OpenCL a network of short kernels is bound by the host's enqueueing (7-12 us a launch
on H200 hosts, where the GPU runs a MobileNet v2 layer in less), and the event was 7-16 % of a
pass's wall time (``benchmarks/enqueue_cost.py``, benchmarks/RESULTS.md). Each launch's sizes
are laid out once as C arrays; a pass is then one C call per launch. Through the ICD loader,
any loader dispatches pyopencl's objects to their driver, so this needs only that one be found.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyopencl as cl

from octune.core.errors import OctuneError
from octune.runtime.steps import Step


@dataclass(frozen=True)
class BoundLaunch:
    kernel: cl.Kernel  # its arguments set
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


@dataclass(frozen=True)
class Planned:
    """A step ready to enqueue: its launches, and what the per-layer table says of it."""

    step: Step
    kernel: str  # octune's kernel, or the runtime's own (ops.cl) for untuned steps
    match: str  # the lookup's match (or "device"); "-" for the runtime's own kernels
    config: dict[str, int]
    launches: tuple[BoundLaunch, ...]


@dataclass(frozen=True)
class Timing:
    """Per planned step, the median over repeats of its launches' profiled kernel time summed;
    and the best wall time of a whole forward pass enqueued back to back with one finish.
    """

    kernel_s: tuple[float, ...]
    wall_s: float
    repeats: int

    @property
    def total_kernel_s(self) -> float:
        return sum(self.kernel_s)


@cache
def _enqueue_function() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """``clEnqueueNDRangeKernel`` from the ICD loader pyopencl's wheel carries, else the
    system's; None where neither loads (the stream then enqueues through pyopencl).
    """
    package = Path(cl.__file__).parent
    bundled = [*package.glob(".libs/libOpenCL*"), *package.parent.glob("pyopencl.libs/libOpenCL*")]
    for name in [*map(str, sorted(bundled)), ctypes.util.find_library("OpenCL")]:
        if name is None:
            continue
        try:
            function = ctypes.CDLL(name).clEnqueueNDRangeKernel
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        function.argtypes += [ctypes.c_void_p] * 6
        function.restype = ctypes.c_int32
        return function
    return None


def _sizes(values: tuple[int, ...]) -> ctypes.Array[ctypes.c_size_t]:
    return (ctypes.c_size_t * len(values))(*values)


class Stream:
    """The launches of a forward pass, ready to enqueue back to back without events."""

    def __init__(self, launches: Sequence[tuple[str, BoundLaunch]], direct: bool = True) -> None:
        """``launches``: each launch with the layer it belongs to, which errors name. Without
        ``direct`` (or where no loader is found), through pyopencl, events and all.
        """
        self.layers = tuple(layer for layer, _ in launches)
        self.launches = tuple(launch for _, launch in launches)
        self._enqueue = _enqueue_function() if direct else None
        # Sizes as C arrays, kept alive here; the kernels stay alive in self.launches.
        self._arrays = [(_sizes(la.global_size), _sizes(la.local_size)) for la in self.launches]
        self._calls = [
            (
                la.kernel.int_ptr,
                len(la.global_size),
                ctypes.addressof(g),
                ctypes.addressof(lo) if la.local_size else None,
            )
            for la, (g, lo) in zip(self.launches, self._arrays, strict=True)
        ]

    def enqueue_with_events(self, queue: cl.CommandQueue) -> list[cl.Event]:
        """One forward pass through pyopencl: one event per launch, for profiling."""
        return [
            cl.enqueue_nd_range_kernel(queue, la.kernel, la.global_size, la.local_size)
            for la in self.launches
        ]

    def enqueue(self, queue: cl.CommandQueue) -> None:
        """One forward pass into ``queue``, back to back; nothing waits."""
        if self._enqueue is None:
            self.enqueue_with_events(queue)
            return
        enqueue, q = self._enqueue, queue.int_ptr
        for i, (kernel, rank, global_size, local_size) in enumerate(self._calls):
            status = enqueue(q, kernel, rank, None, global_size, local_size, 0, None, None)
            if status:
                raise OctuneError(
                    f"layer '{self.layers[i]}': enqueueing its kernel failed with "
                    f"OpenCL status {status} "
                    f"({cl.status_code.to_string(status, 'unknown status %d')})"
                )

    def seconds(self, queue: cl.CommandQueue, repeats: int = 5) -> float:
        """Wall seconds of the launches back to back with one finish: the best of ``repeats``
        by the host's clock, after one pass to warm up.
        """
        self.enqueue(queue)
        queue.finish()
        best = math.inf
        for _ in range(repeats):
            started = time.perf_counter()
            self.enqueue(queue)
            queue.finish()
            best = min(best, time.perf_counter() - started)
        return best
