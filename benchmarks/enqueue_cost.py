"""What the host's enqueueing costs a forward pass: per launch, pyopencl's enqueue (which always
asks the driver for an event) against OpenCL's own ``clEnqueueNDRangeKernel`` called through
ctypes without one (both through the runtime's ``runtime/stream.py``), with and without an
early flush; on an empty kernel, then on networks with
their confirmed configs (every way's outputs checked equal to pyopencl's).

    benchmarks/device_run.sh python3 benchmarks/enqueue_cost.py --device NVIDIA \
        --zoo /tmp/zoo --models mobilenet_v2 squeezenet1_1 --db sqlite:////tmp/t.db --out r.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

from octune.runtime.stream import BoundLaunch, Stream
from octune.tuner.device import select_device

Enqueue = Callable[[cl.CommandQueue], None]


def enqueuer(launches: Sequence[BoundLaunch], direct: bool, flush_after: int = 0) -> Enqueue:
    """The launches through the runtime's ``Stream``: ``direct``, OpenCL's entry point without
    events; else pyopencl's enqueue. With ``flush_after``, the queue is flushed after that many.
    """
    named = [("-", launch) for launch in launches]
    head, tail = Stream(named[:flush_after], direct), Stream(named[flush_after:], direct)

    def enqueue(queue: cl.CommandQueue) -> None:
        head.enqueue(queue)
        if flush_after:
            queue.flush()
        tail.enqueue(queue)

    return enqueue


def clock(queue: cl.CommandQueue, enqueue: Enqueue, repeats: int) -> dict[str, float]:
    """Best over repeats: the host's time to enqueue, and to enqueue and finish."""
    enqueue(queue)
    queue.finish()
    host, wall = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        enqueue(queue)
        enqueued = time.perf_counter()
        queue.finish()
        host.append(enqueued - started)
        wall.append(time.perf_counter() - started)
    return {"host_ms": min(host) * 1e3, "wall_ms": min(wall) * 1e3}


def empty_kernel(device: cl.Device, launches: int, repeats: int) -> dict[str, Any]:
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    source = "__kernel void empty(__global float *x) { if (x[0] == 12345.0f) x[1] = 1.0f; }"
    kernel = cl.Program(context, source).build().empty
    buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE, 64)
    cl.enqueue_fill_buffer(queue, buffer, np.float32(1), 0, 64)
    kernel.set_args(buffer)
    stream = [BoundLaunch(kernel, (32,), (32,))] * launches
    ways = {
        "pyopencl": enqueuer(stream, direct=False),
        "eventless": enqueuer(stream, direct=True),
        "pyopencl_flush1": enqueuer(stream, direct=False, flush_after=1),
    }
    row: dict[str, Any] = {"launches": launches}
    for name, way in ways.items():
        timed = clock(queue, way, repeats)
        row[name] = {
            k.replace("_ms", "_us_per_launch"): v * 1e3 / launches for k, v in timed.items()
        }
        print(f"empty kernel, {name}: {row[name]}", flush=True)
    return row


_ARGUMENT_KERNEL = """
typedef struct {{ ulong m[4]; int d[4]; int s[4]; float low, high; }} Meta;
__kernel void k(__global float *a{arguments}) {{
    if (a[0] == 12345.0f + {salt}) a[1] = 1.0f;
}}
"""


META = np.dtype(
    [
        ("m", np.uint64, 4),
        ("d", np.int32, 4),
        ("s", np.int32, 4),
        ("low", np.float32),
        ("high", np.float32),
    ],
    align=True,
)


@dataclass(frozen=True)
class Kind:
    buffers: int
    scalars: int
    struct: bool = False
    sub: bool = False
    distinct: int = 1
    rank: int = 1


def arguments(device: cl.Device, launches: int, repeats: int) -> dict[str, Any]:
    """The same empty kernel with more buffer and scalar arguments, with sub-buffers for its
    buffers, and as many distinct kernels taken in turn: what of a launch the driver prices.
    """
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    whole = cl.Buffer(context, cl.mem_flags.READ_WRITE, 1 << 20)
    cl.enqueue_fill_buffer(queue, whole, np.float32(1), 0, 1 << 20)
    parts = [whole.get_sub_region(i * 4096, 4096) for i in range(8)]
    kinds = {  # buffers, int scalars, a struct too, sub-buffers, distinct kernels, rank
        "1 buffer": Kind(1, 0),
        "6 buffers": Kind(6, 0),
        "1 buffer, 16 scalars": Kind(1, 16),
        "6 buffers, 16 scalars": Kind(6, 16),
        "6 sub-buffers, 16 scalars": Kind(6, 16, sub=True),
        "6 buffers, 16 scalars, 50 kernels in turn": Kind(6, 16, distinct=50),
        "1 buffer, 50 kernels in turn": Kind(1, 0, distinct=50),
        "6 buffers, 16 scalars, a 3-D range": Kind(6, 16, rank=3),
        "1 buffer, one 72-byte struct": Kind(1, 0, struct=True),
        "6 buffers, 2 scalars, one 72-byte struct": Kind(6, 2, struct=True),
    }
    row: dict[str, Any] = {}
    for name, kind in kinds.items():
        declared = [f", __global float *b{i}" for i in range(1, kind.buffers)]
        declared += [f", const int s{i}" for i in range(kind.scalars)]
        values: list[object] = [np.int32(i) for i in range(kind.scalars)]
        if kind.struct:
            declared.append(", const Meta meta")
            values.append(np.zeros(1, META))
        kernels = []
        for salt in range(kind.distinct):
            source = _ARGUMENT_KERNEL.format(arguments="".join(declared), salt=salt)
            kernel = cl.Program(context, source).build().k
            held = [parts[i] if kind.sub else whole for i in range(kind.buffers)]
            kernel.set_args(*held, *values)
            kernels.append(kernel)
        sizes = ((32, 4, 2), (32, 1, 1)) if kind.rank == 3 else ((32,), (32,))
        stream = [BoundLaunch(kernels[i % kind.distinct], *sizes) for i in range(launches)]
        row[name] = {}
        for way_name, way in (
            ("pyopencl", enqueuer(stream, direct=False)),
            ("eventless", enqueuer(stream, direct=True)),
        ):
            timed = clock(queue, way, repeats)
            row[name][way_name] = timed["host_ms"] * 1e3 / launches
        print(f"arguments, {name}: host us per launch {row[name]}", flush=True)
    return row


def network(path: Path, device: cl.Device, db: str, repeats: int) -> dict[str, Any]:
    from octune.db.store import Store
    from octune.networks.layers import load_model
    from octune.runtime.config_sources import StoreConfigs
    from octune.runtime.executor import Runtime
    from octune.runtime.verify import check, random_inputs
    from octune.tuner.device import DeviceInfo

    entry = next(
        e for e in json.loads((path.parent / "manifest.json").read_text()) if e["file"] == path.name
    )
    model = load_model(path, batch=1 if entry["dynamic_batch"] else None)
    source = StoreConfigs(Store(db), DeviceInfo.from_cl(device))
    runtime = Runtime(model, device, source, "confirmed")
    check(runtime, random_inputs(runtime))
    stream = [launch for p in runtime.plan for launch in p.launches]
    reference = {name: runtime.read(name) for name in runtime.graph.outputs}
    timing = runtime.time(repeats)
    row: dict[str, Any] = {
        "file": path.name,
        "launches": len(stream),
        "kernel_ms": timing.total_kernel_s * 1e3,
        "runtime_wall_ms": timing.wall_s * 1e3,
    }
    ways = {
        "pyopencl": enqueuer(stream, direct=False),
        "pyopencl_flush1": enqueuer(stream, direct=False, flush_after=1),
        "eventless": enqueuer(stream, direct=True),
        "eventless_flush1": enqueuer(stream, direct=True, flush_after=1),
    }
    for name, way in ways.items():
        for tensor in runtime.graph.outputs:  # poison the outputs, so each way must write them
            cl.enqueue_fill_buffer(
                runtime.queue, runtime.buffers[tensor], np.float32(np.nan), 0,
                runtime.buffers[tensor].size,
            )  # fmt: skip
        way(runtime.queue)
        same = all(np.array_equal(runtime.read(t), reference[t]) for t in reference)
        row[name] = {**clock(runtime.queue, way, repeats), "same_outputs": same}
        print(f"{path.name}, {name}: {row[name]}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--zoo", type=Path)
    ap.add_argument("--models", nargs="*", default=[])
    ap.add_argument("--db")
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    device = select_device(args.device)
    result: dict[str, Any] = {
        "device": device.name,
        "empty": empty_kernel(device, args.launches, args.repeats),
        "arguments": arguments(device, args.launches, args.repeats),
    }
    result["networks"] = [
        network(args.zoo / f"{m}.onnx", device, args.db, args.repeats) for m in args.models
    ]
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
