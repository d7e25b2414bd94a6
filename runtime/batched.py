"""How the runtime runs a batched MatMul (attention's scores and context: batch x heads
matrices): one tuned GEMM launch per matrix on sub-buffers of its tensors, or one launch of the
runtime's own kernel for all of them (``runtime/ops.cl``: one output a work-item, or tiles
through local memory). Which is faster depends on the device: a CPU runs the tuned launches
fastest, while on NVIDIA's OpenCL each launch costs about 5 us and a BERT layer's 24 x B launches
cost more than the products (benchmarks/batched_matmul_ab.py). So by default the runtime times
the plans a layer can take when it loads the model and keeps the fastest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from octune.core.errors import OctuneError
from octune.runtime import layout
from octune.runtime.steps import Tuned
from octune.runtime.stream import Stream

if TYPE_CHECKING:
    from octune.runtime.executor import Planned, Runtime

#: The plans a batched MatMul can run by (``Runtime(batched=)``; None: the fastest here).
BATCHED_PLANS = ("per-matrix", "simple", "tiled")
TILE, TILE_GROUP = 64, (16, 16, 1)  # ops.cl's batched_matmul_tiled: outputs and work-items


def plan_batched(runtime: Runtime, step: Tuned) -> Planned:
    """The layer by ``runtime.batched``'s plan where it can take that one, else by the fastest
    here of those it can.
    """
    extents = step.layer.workload(runtime._dtype(step)).extents
    makers: dict[str, Callable[[], Planned | None]] = {}
    if _splits(runtime, step, extents):
        makers["per-matrix"] = lambda: runtime._tuned(step)
    makers["simple"] = lambda: one_launch(runtime, step, tiled=False)
    makers["tiled"] = lambda: one_launch(runtime, step, tiled=True)
    if runtime.batched in makers:
        chosen = makers[runtime.batched]()
        if chosen is not None:
            return chosen
    plans = [plan for make in makers.values() if (plan := make()) is not None]
    return plans[0] if len(plans) == 1 else _fastest(runtime, step, plans)


def _fastest(runtime: Runtime, step: Tuned, plans: Sequence[Planned]) -> Planned:
    """The plan whose launches ran fastest here, its operands filled with ones where they are
    not weights (a pass overwrites them).
    """
    for name in step.inputs:
        if name not in runtime.graph.constants:
            buffer = runtime.buffers[name]
            one = np.ones(1, runtime.storage)
            cl.enqueue_fill_buffer(runtime.queue, buffer, one, 0, buffer.size)
    seconds = [
        Stream([(step.name, launch) for launch in plan.launches]).seconds(runtime.queue)
        for plan in plans
    ]
    return plans[seconds.index(min(seconds))]


def _splits(runtime: Runtime, step: Tuned, sizes: tuple[int, ...]) -> bool:
    """Whether a batched layer's matrices can be sub-buffers: one batch shape for both
    operands and sizes the device's base address alignment allows.
    """
    batch_a, batch_b = (runtime.graph.shapes[name][:-2] for name in step.inputs)
    align = runtime.device.mem_base_addr_align // 8
    item = runtime.storage.itemsize
    return batch_a == batch_b and not any(item * size % align for size in sizes)


def per_matrix_operands(
    runtime: Runtime, step: Tuned, buffers: tuple[cl.Buffer, ...], sizes: tuple[int, ...]
) -> list[tuple[tuple[cl.Buffer, ...], cl.Buffer]]:
    """A layer's operands, one launch per matrix of a batched layer: sub-buffers of each
    operand, ``sizes`` elements apart.
    """
    if step.layer.count == 1:
        return [(buffers[:-1], buffers[-1])]
    operands, item = [], runtime.storage.itemsize
    for i in range(step.layer.count):
        a_i, b_i, y_i = (
            runtime._hold(buffer.get_sub_region(item * i * size, item * size))
            for buffer, size in zip(buffers, sizes, strict=True)
        )
        operands.append(((a_i, b_i), y_i))
    return operands


def one_launch(runtime: Runtime, step: Tuned, tiled: bool) -> Planned | None:
    """The layer as one launch of the runtime's kernel (broadcast batches too), simple or
    tiled; None for the tiled one where the device cannot run its 256 work-items a group.
    """
    from octune.runtime.executor import Planned

    a_shape, b_shape = (runtime.graph.shapes[name] for name in step.inputs)
    out = runtime.graph.shapes[step.output]
    if len(a_shape) < 2 or len(b_shape) < 2 or len(out) - 2 > layout.RANK:
        raise OctuneError(f"layer '{step.name}': octune run multiplies matrices, not vectors")
    (m, k), n = a_shape[-2:], b_shape[-1]
    batch = out[:-2]
    meta = runtime._meta(layout.padded(batch, 1),
                         layout.broadcast_strides(a_shape[:-2], batch),
                         layout.broadcast_strides(b_shape[:-2], batch))  # fmt: skip
    a, b, y = (runtime.buffers[name] for name in (*step.inputs, step.output))
    alpha = np.float32(step.alpha)
    if tiled:
        groups = (-(-n // TILE), -(-m // TILE), math.prod(batch))
        sizes = (tuple(g * w for g, w in zip(groups, TILE_GROUP, strict=True)), TILE_GROUP)
        args = (a, b, y, meta, *map(np.int32, (m, n, k)), alpha)
        launch = runtime._ops(step, "batched_matmul_tiled", args, 0, sizes, BATCHED=1)
        allowed = launch.kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, runtime.device
        )
        if allowed < math.prod(TILE_GROUP):
            return None
        launches = [launch]
    else:
        args = (a, b, y, meta, *map(np.int32, (math.prod(out), m, n, k)), alpha)
        launches = [runtime._ops(step, "batched_matmul", args, math.prod(out), BATCHED=1)]
    if not step.epilogue.empty:
        launches.append(runtime._epilogue(step, step.output))
    name = "batched_matmul_tiled" if tiled else "batched_matmul"
    return Planned(step, name, "-", {}, tuple(launches))
