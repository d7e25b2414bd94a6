"""How the runtime plans the steps that have more than one way to run: a batched MatMul
(``runtime/batched.py``) and attention (``runtime/attention.py``). Each way is a plan; the
fastest on the device, timed at load on operands of ones, is kept unless the caller named
one. A mixin of ``Runtime``, whose buffers, launches and other plans it uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from functools import partial

import numpy as np
import pyopencl as cl

from octune.core.errors import OctuneError
from octune.runtime import attention as att
from octune.runtime import batched as bmm
from octune.runtime import layout
from octune.runtime.ops_cl import epilogue_arguments
from octune.runtime.steps import Attention, Graph, Step, Tuned
from octune.runtime.stream import BoundLaunch, Planned, Stream


class Products:
    """``Runtime``'s plans for batched products and attention."""

    graph: Graph
    buffers: dict[str, cl.Buffer]
    device: cl.Device
    queue: cl.CommandQueue
    storage: np.dtype
    batched: str | None
    attention: str | None
    _plans: dict[Hashable, str]  # the plan chosen for steps of a key (``_fastest``)
    _ops: Callable[..., BoundLaunch]
    _meta: Callable[..., cl.Buffer]
    _tuned: Callable[[Tuned], Planned]
    _plan: Callable[[Step], Planned]
    _epilogue_apart: Callable[[Step], tuple[BoundLaunch, ...]]
    _most_items: Callable[[cl.Kernel], int]
    _epilogue_defines: Callable[[Step], dict[str, int]]
    _tensor_buffer: Callable[[str], cl.Buffer]
    _type: Callable[[str], np.dtype]
    _dtype: Callable[[Tuned], str]

    def _batched(self, step: Tuned) -> Planned:
        """A batched MatMul by the plan ``batched`` names where the layer takes it, else by the
        fastest here of those it takes (``runtime/batched.py``), timed on operands of ones.
        """
        makers: dict[str, Callable[[], Planned | None]] = {
            "simple": lambda: self._one_launch(step, None),
            **{plan: partial(self._one_launch, step, plan) for plan in bmm.TILES},
        }
        shapes = tuple(map(tuple, bmm.shapes_of(step, self.graph.shapes)))
        extents = step.layer.workload(self._dtype(step)).extents
        align, item = self.device.mem_base_addr_align // 8, self.storage.itemsize
        if step.views == (None, None, None) and bmm.splits(*shapes[:2], extents, align, item):
            makers = {"per-matrix": lambda: self._tuned(step), **makers}
        key = ("batched", shapes, step.views, extents, self._epilogue_key(step))
        return self._fastest(step, makers, self.batched, key)

    def _fastest(
        self,
        step: Step,
        makers: Mapping[str, Callable[[], Planned | None]],
        named: str | None,
        key: Hashable,
    ) -> Planned:
        """``bmm.pick_plan`` of the step's plans, timed on its inputs filled with ones; a step
        of the same ``key`` as one timed before (a transformer's next layer) takes its plan
        untimed.
        """
        weights = {id(self.buffers[name]) for name in self.graph.constants if name in self.buffers}
        fill = [name for name in step.reads if id(self.buffers[name]) not in weights]

        def seconds(plan: Planned) -> float:
            while fill:  # before the first timing only; never a weight's buffer (or an alias's)
                name = fill.pop()
                bmm.fill_with_ones(self.queue, self.buffers[name], self._type(name))
            return Stream([(step.name, launch) for launch in plan.launches]).seconds(self.queue)

        name, plan = bmm.pick_plan(makers, named or self._plans.get(key), seconds)
        self._plans.setdefault(key, name)
        return plan

    def _attention(self, step: Attention) -> Planned:
        """Attention by the plan ``attention`` names, else by the fastest here of one
        ``attention`` launch a few query rows a work-group and its three steps' own plans.
        """
        makers: dict[str, Callable[[], Planned | None]] = {
            plan: partial(self._fused_attention, step, plan) for plan in (*att.ROWS, *att.TILED)
        }
        shapes = tuple(map(tuple, att.shapes_of(step, self.graph.shapes)))
        ends = tuple(self._epilogue_key(part) for part in step.parts)
        key = ("attention", shapes, step.views, step.mask, ends)
        return self._fastest(step, {**makers, "unfused": lambda: self._unfused(step)},
                             self.attention, key)  # fmt: skip

    def _epilogue_key(self, step: Step) -> tuple[tuple[str, int], ...]:
        """What of a step's epilogue its plans' times depend on: its build defines."""
        return () if step.epilogue.empty else tuple(sorted(self._epilogue_defines(step).items()))

    def _unfused(self, step: Attention) -> Planned:
        for part in step.parts[:-1]:  # only this plan stores what they write
            if part.output not in self.buffers:
                self.buffers[part.output] = self._tensor_buffer(part.output)
        launches = tuple(la for part in step.parts for la in self._plan(part).launches)
        return Planned(step, "attention (unfused)", "-", {}, launches)

    def _fused_attention(self, step: Attention, plan: str) -> Planned | None:
        """One launch of ops.cl's ``attention`` (query rows a work-item) or, for a plan in
        ``att.TILED``, of ``attention_tiled``; None where the device cannot run its work-groups
        or the tiled kernel does not take the heads.
        """
        shapes = att.shapes_of(step, self.graph.shapes)
        q, _, v, y = shapes
        head = {"D": q[-1], "DV": v[-1]}
        if plan in att.ROWS:
            rows, group, kernel = att.ROWS[plan], (att.ROWS[plan], 1), "attention"
            defines = dict(ATTENTION=1, AQ=rows, AK=att.KEYS, **head)
        else:
            height = att.TILED[plan]
            rows, group, kernel = 4 * height, (16, height), "attention_tiled"
            defines = dict(ATTENTION_TILED=1, TG=height, **head)
            too_big = att.tiled_bytes(q[-1], rows) > self.device.local_mem_size
            if max(head.values()) > att.TILED_HEAD or too_big:
                return None
        scores, on_scores = step.parts[0], ()
        if not scores.epilogue.empty:  # applied to each score in the kernel
            defines.update(self._epilogue_defines(scores))
            on_scores = epilogue_arguments(scores.epilogue, self.buffers)
        meta = self._meta(*bmm.product_meta(shapes, step.views), step.mask)
        tensors = [self.buffers[name] for name in step.inputs]
        mask = tensors[3] if len(tensors) > 3 else None
        args = (*tensors[:3], mask, self.buffers[step.output], meta,
                *map(np.int32, (q[-2], v[-2])), np.float32(step.alpha), *on_scores)  # fmt: skip
        defines["MASK"] = int(mask is not None)
        count = (-(-q[-2] // rows), math.prod(y[:-2]))
        sizes = (tuple(n * g for n, g in zip(count, group, strict=True)), group)
        launch = self._ops(step, kernel, args, 0, sizes, **defines)
        if self._most_items(launch.kernel) < math.prod(group):
            return None
        return Planned(step, kernel, "-", {}, (launch, *self._epilogue_apart(step)))

    def _one_launch(self, step: Tuned, tiled: str | None) -> Planned | None:
        """A batched MatMul (broadcast batches and views too) as one launch of the runtime's
        kernel, simple or by a ``TILES`` plan; None for a tiled one where the device cannot
        run its work-groups.
        """
        shapes = bmm.shapes_of(step, self.graph.shapes)
        (a_shape, b_shape, out), batch = shapes, shapes[-1][:-2]
        if len(a_shape) < 2 or len(b_shape) < 2 or len(batch) > layout.RANK:
            raise OctuneError(f"layer '{step.name}': octune run multiplies matrices, not vectors")
        (m, k), n = a_shape[-2:], b_shape[-1]
        meta = self._meta(*bmm.product_meta(shapes, step.views))
        a, b, y = (self.buffers[name] for name in (*step.inputs, step.output))
        alpha, name = np.float32(step.alpha), "batched_matmul_tiled" if tiled else "batched_matmul"
        if tiled:
            side, each = bmm.TILES[tiled]
            group = (side // each, side // each, 1)
            groups = (-(-n // side), -(-m // side), math.prod(batch))
            sizes = (tuple(g * w for g, w in zip(groups, group, strict=True)), group)
            args = (a, b, y, meta, *map(np.int32, (m, n, k)), alpha)
            launch = self._ops(step, name, args, 0, sizes, BATCHED=1, BT=side, TPW=each)
            if self._most_items(launch.kernel) < math.prod(group):
                return None
        else:
            args = (a, b, y, meta, *map(np.int32, (math.prod(out), m, n, k)), alpha)
            launch = self._ops(step, name, args, math.prod(out), BATCHED=1)
        return Planned(step, name, "-", {}, (launch, *self._epilogue_apart(step)))
